#!/usr/bin/env python3
"""Writes small models as torch.export programs, for the .pt2 reader's tests.

    python exported_programs.py OUT_DIR [NAME ...]

For each NAME (every model below if none): OUT_DIR/NAME.pt2
(torch.export.save of torch.export.export(model.eval(), inputs)) and
OUT_DIR/NAME_io.pt, torch.save of [inputs..., output] (the exported
program's own output on those inputs); for a model exported with dynamic
dimensions, also NAME_io_K.pt, the same at the K-th of its other shapes. Needs torch 2.x (torch.export): the
tests run it with FX_EXPORT_PYTHON (tools/setup.sh's torch 2.13).
"""
import os
import sys

import torch

# The example inputs below are drawn once, at import: seeded, so that every
# run writes the same files (a test's figures on them, an int8 SQNR, do not
# move from run to run).
torch.manual_seed(0)


class Mlp(torch.nn.Module):
    """Linear, eval-mode batch norm, relu, and a product with a number."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.bn = torch.nn.BatchNorm1d(3)

    def forward(self, x):
        return torch.relu(self.bn(self.linear(x))) * 2


class Cnn(torch.nn.Module):
    """Convolution, batch norm, pooling, a flatten, a linear layer, and a
    tensor constant (a plain tensor attribute, lifted by torch.export)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8 * 4 * 4, 10)
        self.offset = torch.linspace(-1, 1, 10)

    def forward(self, x):
        y = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc(torch.flatten(y, 1)) + self.offset


class TwoOutputs(torch.nn.Module):
    """An operator of two outputs (max over a dimension) and a tuple out."""

    def forward(self, x):
        values, indices = torch.max(x, dim=1)
        return values * 0.5, indices


class Dynamic(Mlp):
    """Exported with a dynamic batch (Dim("batch", max=64))."""


class DynamicSizes(torch.nn.Module):
    """Size arithmetic on a dynamic batch b: a reshape to (b, -1), a view
    to (3 * b, 4), a slice of b + 1 rows, b - 1 in a product, a new tensor
    of b // 2 + 1 rows."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        b = x.shape[0]
        y = self.fc(x).relu()
        rows = y.view(b * 3, 4)
        return (y.reshape(b, -1) * (b - 1), rows[: b + 1],
                y.new_ones(b // 2 + 1, 4))


class DynamicTwoInputs(torch.nn.Module):
    """Two inputs sharing their dynamic batch and length (x [B, T, 8],
    mask [B, T]): a linear layer on x viewed as (B * T, 8), masked."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 6)

    def forward(self, x, mask):
        b, t = x.shape[0], x.shape[1]
        y = self.fc(x.reshape(b * t, 8)).view(b, t, 6)
        return (y * mask.unsqueeze(-1)).sum(1)


class Encoder(torch.nn.Module):
    """A BERT-style encoder: token embeddings, two nn.TransformerEncoder
    layers (scaled-dot-product attention inside), a linear head."""

    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(100, 32)
        layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True,
                                                 dropout=0.0)
        self.encoder = torch.nn.TransformerEncoder(layer, 2,
                                                   enable_nested_tensor=False)
        self.head = torch.nn.Linear(32, 5)

    def forward(self, ids):
        return self.head(self.encoder(self.embedding(ids)))


class Gpt(torch.nn.Module):
    """A GPT-style decoder block: token and position embeddings (arange of
    the dynamic length), causal scaled-dot-product attention over heads
    split by view / permute, a residual, a vocabulary head."""

    def __init__(self):
        super().__init__()
        self.tokens = torch.nn.Embedding(100, 32)
        self.positions = torch.nn.Embedding(128, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.qkv = torch.nn.Linear(32, 96)
        self.proj = torch.nn.Linear(32, 32)
        self.head = torch.nn.Linear(32, 100)

    def forward(self, ids):
        b, t = ids.shape
        x = self.tokens(ids) + self.positions(torch.arange(t))
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, 4, 8).permute(2, 0, 3, 1, 4)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v,
                                                             is_causal=True)
        return self.head(x + self.proj(y.transpose(1, 2).reshape(b, t, 32)))


class Lstm(torch.nn.Module):
    """A two-layer LSTM and a linear head (the length is fixed: export
    specializes it)."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 16, num_layers=2, batch_first=True)
        self.fc = torch.nn.Linear(16, 3)

    def forward(self, x):
        return self.fc(self.lstm(x)[0])


class MobileBlock(torch.nn.Module):
    """MobileNet-style: a depthwise convolution, squeeze-and-excitation
    (global pooling, two 1x1 convolutions, hardsigmoid), hardswish, a
    pointwise convolution, a residual, then pooling and a classifier."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.depthwise = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.bn = torch.nn.BatchNorm2d(16)
        self.squeeze = torch.nn.Conv2d(16, 4, 1)
        self.excite = torch.nn.Conv2d(4, 16, 1)
        self.pointwise = torch.nn.Conv2d(16, 16, 1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        y = torch.nn.functional.hardswish(self.bn(self.depthwise(x)))
        s = torch.nn.functional.adaptive_avg_pool2d(y, 1)
        s = torch.nn.functional.hardsigmoid(self.excite(torch.relu(self.squeeze(s))))
        y = self.pointwise(y * s) + x
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(y, 1), 1))


class TrainingBatchNorm(Mlp):
    """Exported in training mode: its batch norm updates its statistics in
    place (torch.export's default IR keeps the in-place ops)."""


class FunctionalTrainingBatchNorm(Mlp):
    """The same, decomposed (run_decompositions): the updated statistics
    become outputs (buffer mutations), not read yet."""


class Asserts(torch.nn.Module):
    """Checks on a dynamic batch (torch._check), kept by export as runtime
    assertions (prefer_deferred_runtime_asserts_over_guards): an even batch,
    and not 6."""

    def forward(self, x):
        torch._check(x.shape[0] % 2 == 0)
        torch._check(x.shape[0] != 6)
        return x.reshape(2, x.shape[0] // 2, x.shape[1]).sum(0) * 2


class TokensAndMask(torch.nn.Module):
    """int64 and bool inputs: token ids, a padding mask over them."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(50, 8)

    def forward(self, ids, mask):
        y = self.embed(ids.masked_fill(mask, 0))
        y = y * (~mask).unsqueeze(-1).float()
        return y.sum(1), (ids * mask.long()).sum(1)


class MutatesInput(torch.nn.Module):
    """Adds into its input in place (a user input mutation) and keeps a
    running count in a buffer."""

    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x):
        x.add_(1.0)
        self.calls.add_(1.0)
        return x * 2


class Branch(torch.nn.Module):
    """torch.cond on a tensor's sum: a higher-order operator."""

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda a: a * 2, lambda a: a + 1, (x,))


class Halving(torch.nn.Module):
    """torch.while_loop: halves until small (a trip count set by the data),
    counting the halvings; the buffer the body reads is lifted by export."""

    def __init__(self):
        super().__init__()
        self.register_buffer("factor", torch.tensor(0.5))

    def forward(self, x):
        return torch.while_loop(
            lambda c, n: c.abs().max() > 1,
            lambda c, n: (c * self.factor, n + 1),
            (x, torch.zeros((), dtype=torch.int64)))


class Recurrent(torch.nn.Module):
    """scan (torch._higher_order_ops.scan): an Elman cell over time from h0,
    its states returned by every step; then map (its map_impl): a head on
    each step's states. Both bodies read parameters, lifted by export."""

    def __init__(self):
        super().__init__()
        self.cell = torch.nn.Linear(4 + 8, 8)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x, h0):
        from torch._higher_order_ops.map import map as map_steps
        from torch._higher_order_ops.scan import scan

        def combine(h, xt):
            n = torch.tanh(self.cell(torch.cat([xt, h], 1)))
            return n, n.clone()  # scan's outputs may not alias each other

        h, ys = scan(combine, h0, x.transpose(0, 1))
        return map_steps(lambda y: self.head(y).softmax(-1), ys).sum(0) + h.sum()


BATCH = torch.export.Dim("batch", max=64)

# Dynamic dimensions (export's dynamic_shapes) and the other shapes each
# model runs at (NAME_io_K.pt).
DYNAMIC = {
    "dynamic": ({"x": {0: BATCH}},
                [(torch.randn(1, 4),), (torch.randn(5, 4),),
                 (torch.randn(64, 4),)]),
    "dynamic_sizes": ({"x": {0: BATCH}},
                      [(torch.randn(2, 3, 8),), (torch.randn(7, 3, 8),),
                       (torch.randn(64, 3, 8),)]),
    "dynamic_two_inputs": (
        {"x": {0: torch.export.Dim("B", max=16),
               1: torch.export.Dim("T", max=128)},
         "mask": {0: torch.export.Dim("B", max=16),
                  1: torch.export.Dim("T", max=128)}},
        [(torch.randn(1, 1, 8), torch.rand(1, 1) > 0.5),
         (torch.randn(3, 17, 8), torch.rand(3, 17) > 0.5),
         (torch.randn(16, 128, 8), torch.rand(16, 128) > 0.5)]),
    "encoder": (
        {"ids": {0: torch.export.Dim("B", max=16),
                 1: torch.export.Dim("T", max=128)}},
        [(torch.randint(0, 100, (1, 1)),), (torch.randint(0, 100, (5, 33)),),
         (torch.randint(0, 100, (16, 128)),)]),
    "gpt": (
        {"ids": {0: torch.export.Dim("B", max=8),
                 1: torch.export.Dim("T", max=128)}},
        [(torch.randint(0, 100, (1, 1)),), (torch.randint(0, 100, (3, 17)),),
         (torch.randint(0, 100, (8, 128)),)]),
    "lstm": ({"x": {0: torch.export.Dim("B", max=32)}},
             [(torch.randn(1, 9, 8),), (torch.randn(5, 9, 8),),
              (torch.randn(32, 9, 8),)]),
    "asserts": ({"x": {0: BATCH}},
                [(torch.randn(4, 3),), (torch.randn(8, 3),),
                 (torch.randn(64, 3),)]),
    "tokens_and_mask": (
        {"ids": {0: torch.export.Dim("B", max=16),
                 1: torch.export.Dim("T", max=64)},
         "mask": {0: torch.export.Dim("B", max=16),
                  1: torch.export.Dim("T", max=64)}},
        [(torch.randint(0, 50, (1, 1)), torch.rand(1, 1) > 0.5),
         (torch.randint(0, 50, (3, 17)), torch.rand(3, 17) > 0.5),
         (torch.randint(0, 50, (16, 64)), torch.rand(16, 64) > 0.5)]),
    "strict_mlp": ({"x": {0: BATCH}},
                   [(torch.randn(1, 4),), (torch.randn(64, 4),)]),
    "mobile_block": ({"x": {0: torch.export.Dim("B", max=32)}},
                     [(torch.randn(1, 3, 16, 16),), (torch.randn(3, 3, 16, 16),),
                      (torch.randn(32, 3, 16, 16),)]),
}

MODELS = {
    "mlp": (Mlp, (torch.randn(2, 4),)),
    "cnn": (Cnn, (torch.randn(1, 3, 8, 8),)),
    "two_outputs": (TwoOutputs, (torch.randn(3, 5),)),
    "dynamic": (Dynamic, (torch.randn(2, 4),)),
    "dynamic_sizes": (DynamicSizes, (torch.randn(4, 3, 8),)),
    "dynamic_two_inputs": (DynamicTwoInputs,
                           (torch.randn(2, 5, 8), torch.rand(2, 5) > 0.5)),
    "encoder": (Encoder, (torch.randint(0, 100, (2, 7)),)),
    "gpt": (Gpt, (torch.randint(0, 100, (2, 9)),)),
    "lstm": (Lstm, (torch.randn(2, 9, 8),)),
    "mobile_block": (MobileBlock, (torch.randn(2, 3, 16, 16),)),
    "training_batch_norm": (TrainingBatchNorm, (torch.randn(2, 4),)),
    "functional_training_batch_norm": (FunctionalTrainingBatchNorm,
                                       (torch.randn(2, 4),)),
    "asserts": (Asserts, (torch.randn(4, 3),)),
    "tokens_and_mask": (TokensAndMask,
                        (torch.randint(0, 50, (2, 5)),
                         torch.tensor([[False, True, False, False, True],
                                       [False, False, False, True, True]]))),
    "strict_mlp": (Mlp, (torch.randn(2, 4),)),
    "mutates_input": (MutatesInput, (torch.randn(2, 3),)),
    "functional_mutates_input": (MutatesInput, (torch.randn(2, 3),)),
    "cond": (Branch, (torch.randn(3),)),
    "while_loop": (Halving, (torch.randn(3) * 10,)),
    "scan": (Recurrent, (torch.randn(2, 5, 4), torch.randn(2, 8))),
}

# How each model is exported, beyond the defaults (strict=False).
EXPORT_OPTIONS = {
    "asserts": {"prefer_deferred_runtime_asserts_over_guards": True},
    "strict_mlp": {"strict": True},
}


def main():
    out = sys.argv[1]
    names = sys.argv[2:] or list(MODELS)
    os.makedirs(out, exist_ok=True)
    for name in names:
        cls, inputs = MODELS[name]
        torch.manual_seed(0)
        model = cls()
        # Statistics that are not the defaults, so that batch norm matters.
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                    m.running_mean.uniform_(-0.5, 0.5)
                    m.running_var.uniform_(0.5, 2.0)
        if "training" in name:
            model.train()
        else:
            model.eval()
        dynamic_shapes, shapes = DYNAMIC.get(name, (None, []))
        program = torch.export.export(
            model, tuple(t.clone() for t in inputs),
            dynamic_shapes=dynamic_shapes, **EXPORT_OPTIONS.get(name, {}))
        if name.startswith("functional"):
            program = program.run_decompositions()
        torch.export.save(program, os.path.join(out, name + ".pt2"))
        # NAME_io.pt: the inputs, the outputs, then the inputs and the
        # buffers as the call left them (a program may mutate either).
        module = program.module()
        called = [t.clone() for t in inputs]
        with torch.no_grad():
            output = module(*called)
        outputs = list(output) if isinstance(output, tuple) else [output]
        torch.save(list(inputs) + outputs, os.path.join(out, name + "_io.pt"))
        torch.save(called + [b for _, b in sorted(module.named_buffers())],
                   os.path.join(out, name + "_state.pt"))
        for k, other in enumerate(shapes):
            with torch.no_grad():
                output = program.module()(*other)
            outputs = list(output) if isinstance(output, tuple) else [output]
            torch.save(list(other) + outputs,
                       os.path.join(out, "%s_io_%d.pt" % (name, k)))
        print(name)


if __name__ == "__main__":
    main()
