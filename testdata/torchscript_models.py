"""Writes torchvision models as TorchScript files, for the import tests and
benchmarks (run with Debian's /usr/bin/python3, torch 1.13, torchvision
0.14). Random weights from a fixed seed, nothing downloaded.

    python3 testdata/torchscript_models.py OUT_DIR [NAME ...]

Writes OUT_DIR/<name>.pt for each name (default: all of MODELS; the
CLASSIFICATION models only by name), and prints one line per file.
"""
import math
import os
import sys
from typing import List

import torch
import torchvision


class DataDependent(torch.nn.Module):
    """A tensor's value read as a Python number: cannot be traced."""

    def forward(self, x):
        if float(x.sum()) > 0:
            return x.relu()
        return -x


class SelectsBoxes(torch.nn.Module):
    """Boxes whose score passes a threshold: sizes known only at run time."""

    def forward(self, boxes, scores):
        keep = scores > 0.5
        kept = boxes[keep]
        n = kept.size(0)
        return kept[:, :2].reshape(n * 2), torch.nonzero(keep)


class Batch:
    """A TorchScript class, as torchvision's ImageList."""

    def __init__(self, tensors: torch.Tensor, sizes: List[int]):
        self.tensors = tensors
        self.sizes = sizes


class CachesAnchors(torch.nn.Module):
    """What torchvision's detection models do around their selections:
    forward sets an attribute to what it holds (AnchorGenerator's anchors
    cast to the input's dtype and device), makes an object of a TorchScript
    class, and lists sizes to split by ([b.shape[0] for b in boxes])."""

    def __init__(self):
        super().__init__()
        self.anchors = [torch.randn(3, 4), torch.randn(2, 4)]
        self.norm = torch.nn.BatchNorm1d(4)

    def forward(self, boxes, scores):
        self.anchors = [a.to(dtype=boxes.dtype, device=boxes.device)
                        for a in self.anchors]
        batch = Batch(boxes[scores > 0.5], [boxes.shape[0]])
        parts = [batch.tensors, self.anchors[0], self.anchors[1]]
        sizes = [p.shape[0] for p in parts]
        joined = self.norm(torch.cat(parts)) * 2
        return [part.sum(0) + part.shape[0] for part in joined.split(sizes)]


class CountsCalls(torch.nn.Module):
    """Keeps state from one call to the next: no graph can."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x * self.calls


class TensorControlFlow(torch.nn.Module):
    """A branch and a loop on tensor values: fx::cond and fx::while_loop."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        if bool(x.sum() > 0):
            y = self.linear(x)
        else:
            y = -x
        while bool(y.abs().max() > 1):
            y = y / 2
        return y + x


class CallsDataDependent(torch.nn.Module):
    """The data-dependent branch one call down."""

    def __init__(self):
        super().__init__()
        self.inner = DataDependent()

    def forward(self, x):
        return self.inner(x) + 1


def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


class ControlFlow(torch.nn.Module):
    """TorchScript's control flow on values a trace knows: a loop over a
    size, branches on dim() and on an attribute, lists, tuples, a dict, a
    call to a scripted function, a tuple output."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.use_linear = True

    def forward(self, x):
        h = x
        for i in range(x.size(0)):
            h = h + float(i)
        a, b = h.chunk(2, dim=1)
        pair = (a, b)
        p, q = pair
        parts = {"p": p, "q": q}
        if x.dim() == 2 and self.use_linear:
            out = self.linear(torch.cat([parts["p"], parts["q"]], 1))
        else:
            out = x
        return out, _double(out)


class NoGrad(torch.nn.Module):
    """A `with` block: prim::Enter / prim::Exit, which only TorchScript's
    own interpreter runs."""

    def forward(self, x):
        with torch.no_grad():
            y = x * 3
        return y + 1


class FormatsMessage(torch.nn.Module):
    """torch._assert with an f-string: aten::format, a vararg operator."""

    def forward(self, x):
        n = x.size(1)
        torch._assert(n == 4, f"Wrong width! Expected {4} but got {n}!")
        return x * 2


class DictOutput(torch.nn.Module):
    """Returns a dict, as torchvision's segmentation models do."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        result = {}
        y = self.conv(x)
        result["out"] = y.relu()
        result["aux"] = y + x.sum()
        return result


class ChannelShuffle(torch.nn.Module):
    """shufflenet_v2's channel shuffle: traced, its size arithmetic is
    aten::size -> prim::NumToTensor -> tensor arithmetic -> aten::Int."""

    def forward(self, x):
        batch, channels, height, width = x.size()
        groups = 3
        x = x.view(batch, groups, channels // groups, height, width)
        x = torch.transpose(x, 1, 2).contiguous()
        return x.view(batch, -1, height, width)


class ReshapesBySum(torch.nn.Module):
    def forward(self, x):
        rows = (x.sum() * 0 + 1).long()  # a tensor as a size: aten::Int
        return x.reshape(rows, -1)


class TracedDataDependent(torch.nn.Module):
    """Data dependence inside a traced file: aten::Int of a tensor computed
    from data, a node torch.jit.trace gives no source line."""

    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Sequential(torch.nn.ReLU(), ReshapesBySum())

    def forward(self, x):
        return self.inner(x) + 1


class TokenEncoder(torch.nn.Module):
    """A BERT- or GPT-style encoder layer that reads its sizes: the batch and
    sequence length from the tokens, a positional table sliced to the
    length, heads split and merged with view, a causal mask made at the
    length (causal=True)."""

    def __init__(self, causal: bool):
        super().__init__()
        d, self.heads, self.causal = 32, 4, causal
        self.embed = torch.nn.Embedding(100, d)
        self.pos = torch.nn.Parameter(torch.randn(1, 64, d))
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)
        self.norm = torch.nn.LayerNorm(d)
        self.scale = (d // self.heads) ** -0.5

    def forward(self, ids):
        B, T = ids.size()
        h = self.embed(ids) + self.pos[:, :T]
        qkv = self.qkv(h).view(B, T, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = (q @ k.transpose(-2, -1)) * self.scale
        if self.causal:
            mask = torch.ones(T, T, dtype=torch.bool).triu(1)
            att = att.masked_fill(mask, float("-inf"))
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, -1)
        return self.norm(h + self.out(y))


class FusedEncoder(torch.nn.Module):
    """What PyTorch runs fused in eval mode without autograd, as a
    deployment traces it: an nn.TransformerEncoderLayer (post-norm, relu),
    one with norm_first and gelu given a key padding mask, and an
    nn.MultiheadAttention (aten::_transformer_encoder_layer_fwd,
    aten::_native_multi_head_attention)."""

    def __init__(self):
        super().__init__()
        d, heads = 32, 4
        self.post_norm = torch.nn.TransformerEncoderLayer(
            d, heads, 64, dropout=0.1, batch_first=True)
        self.pre_norm = torch.nn.TransformerEncoderLayer(
            d, heads, 64, dropout=0.1, activation="gelu", batch_first=True,
            norm_first=True)
        self.attention = torch.nn.MultiheadAttention(d, heads, batch_first=True)

    def forward(self, x):
        padding = x[:, :, 0] > 1.5
        h = self.post_norm(x)
        h = self.pre_norm(h, src_key_padding_mask=padding)
        return h + self.attention(h, h, h, need_weights=False)[0]


class Patches(torch.nn.Module):
    """Image sides read, divided and multiplied: (B, C, H, W) into
    (B, H/4 * W/4, C*16) patches and back."""

    def forward(self, x):
        b, c, h, w = x.shape
        p = x.reshape(b, c, h // 4, 4, w // 4, 4).permute(0, 2, 4, 1, 3, 5)
        p = p.reshape(b, (h // 4) * (w // 4), c * 16)
        return p.softmax(-1).reshape(b, h // 4, w // 4, c, 4, 4) \
            .permute(0, 3, 1, 4, 2, 5).reshape(b, c, h, w) + x.numel() % 7


class GuardsLength(torch.nn.Module):
    """Asserts and branches on sizes: the feature size checked as nn.LSTM
    checks it, the length against a positional table."""

    def __init__(self):
        super().__init__()
        self.pos = torch.nn.Parameter(torch.randn(1, 32, 8))

    def forward(self, x):
        B, T, C = x.size()
        torch._assert(C == 8, "expected 8 features")
        if T > 32:
            raise ValueError("longer than the positional table")
        return x + self.pos[:, :T]


class LstmLanguageModel(torch.nn.Module):
    """A 2-layer LSTM language model: nn.LSTM's scripted forward reads the
    batch size for its zero state and checks the input's sizes."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(100, 16)
        self.lstm = torch.nn.LSTM(16, 32, num_layers=2, batch_first=True)
        self.head = torch.nn.Linear(32, 100)

    def forward(self, ids):
        h, _ = self.lstm(self.embed(ids))
        return self.head(h)


class ChunkedQkv(torch.nn.Module):
    """Attention whose q, k and v are chunks of one projection: how many
    chunks there are follows from a size."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(16, 48)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return (q @ k.transpose(-2, -1)).softmax(-1) @ v


class SumSteps(torch.nn.Module):
    """A loop over the time steps unbind returns: unrolled by a trace, so
    the number of steps is checked."""

    def forward(self, x):
        h = torch.zeros_like(x[:, 0])
        for step in x.unbind(1):
            h = torch.tanh(h + step)
        return h


class ScalesByWidth(torch.nn.Module):
    """A float made from a size, as attention scales by sqrt(head_dim): the
    graph is specialized to the example's shapes."""

    def forward(self, x):
        return x / math.sqrt(x.size(-1))


def _tokens():
    return torch.randint(0, 100, (2, 16))


def _small_vit():
    # vit_b_16's code (class token, torch._assert with f-strings, encoder
    # blocks) at a size that imports in a moment.
    return torchvision.models.VisionTransformer(
        image_size=32, patch_size=16, num_layers=2, num_heads=2,
        hidden_dim=32, mlp_dim=64, num_classes=10)


def _calibrated(model):
    # Non-trivial batch norm statistics, so conv/bn folding is tested.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    return model.eval()


def _image():
    return torch.randn(1, 3, 224, 224)


MODELS = {
    # name: (factory, "script" or "trace")
    "resnet18_scripted": (lambda: torchvision.models.resnet18(), "script"),
    "resnet18_traced": (lambda: torchvision.models.resnet18(), "trace"),
    "resnet50_scripted": (lambda: torchvision.models.resnet50(), "script"),
    "resnet50_traced": (lambda: torchvision.models.resnet50(), "trace"),
    "mobilenet_v2_scripted": (lambda: torchvision.models.mobilenet_v2(), "script"),
    "squeezenet_traced": (lambda: torchvision.models.squeezenet1_1(), "trace"),
    "data_dependent_scripted": (lambda: DataDependent(), "script"),
    "tensor_control_flow_scripted": (lambda: TensorControlFlow(), "script"),
    "selects_boxes_scripted": (lambda: SelectsBoxes(), "script"),
    "caches_anchors_scripted": (lambda: CachesAnchors(), "script"),
    "counts_calls_scripted": (lambda: CountsCalls(), "script"),
    "calls_data_dependent_scripted": (lambda: CallsDataDependent(), "script"),
    "control_flow_scripted": (lambda: ControlFlow(), "script"),
    "no_grad_scripted": (lambda: NoGrad(), "script"),
    "formats_message_scripted": (lambda: FormatsMessage(), "script"),
    "small_vit_scripted": (_small_vit, "script"),
    "dict_output_scripted": (lambda: DictOutput(), "script"),
    "dict_output_traced": (lambda: DictOutput(), "trace_strict_false"),
    "channel_shuffle_traced": (lambda: ChannelShuffle(), "trace"),
    "data_dependent_traced": (lambda: TracedDataDependent(), "trace"),
    "token_encoder_scripted": (lambda: TokenEncoder(False), "script"),
    "causal_encoder_scripted": (lambda: TokenEncoder(True), "script"),
    "causal_encoder_traced": (lambda: TokenEncoder(True), "trace"),
    "fused_encoder_traced": (lambda: FusedEncoder(), "trace_no_grad"),
    "patches_scripted": (lambda: Patches(), "script"),
    "patches_traced": (lambda: Patches(), "trace"),
    "guards_length_scripted": (lambda: GuardsLength(), "script"),
    "lstm_lm_scripted": (lambda: LstmLanguageModel(), "script"),
    "chunked_qkv_scripted": (lambda: ChunkedQkv(), "script"),
    "chunked_qkv_traced": (lambda: ChunkedQkv(), "trace"),
    "sum_steps_scripted": (lambda: SumSteps(), "script"),
    "scales_by_width_scripted": (lambda: ScalesByWidth(), "script"),
}

# Example inputs other than _image().
EXAMPLES = {
    "token_encoder_scripted": _tokens,
    "causal_encoder_scripted": _tokens,
    "causal_encoder_traced": _tokens,
    "patches_scripted": lambda: torch.randn(1, 3, 8, 12),
    "patches_traced": lambda: torch.randn(1, 3, 8, 12),
    "lstm_lm_scripted": _tokens,
    "fused_encoder_traced": lambda: torch.randn(2, 16, 32),
    "chunked_qkv_traced": lambda: torch.randn(2, 5, 16),
}

# Traced classification models for the inference lowering's tests and
# benchmark (lowering/torchvision_test.cc, tools/benchmark_inference.cc):
# written only when named (VGG's file alone is 530 MB).
CLASSIFICATION = {
    f"{name}_traced": (getattr(torchvision.models, name), "trace")
    for name in ["mobilenet_v2", "mobilenet_v3_small", "densenet121",
                 "googlenet", "efficientnet_b0", "regnet_x_400mf",
                 "mnasnet0_5", "convnext_tiny", "inception_v3", "vgg11",
                 "alexnet"]
}


def write(name, out_dir):
    torch.manual_seed(0)
    factory, how = MODELS[name] if name in MODELS else CLASSIFICATION[name]
    model = _calibrated(factory())
    if how == "script":
        module = torch.jit.script(model)
    elif how == "trace_no_grad":  # PyTorch's fused inference paths
        with torch.no_grad():
            module = torch.jit.trace(model, EXAMPLES[name]())
    elif how == "trace_strict_false":  # a dict output
        module = torch.jit.trace(model, _image(), strict=False)
    else:
        module = torch.jit.trace(model, EXAMPLES.get(name, _image)())
    path = os.path.join(out_dir, name + ".pt")
    module.save(path)
    print(path)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for name in sys.argv[2:] or sorted(MODELS):
        write(name, out_dir)


if __name__ == "__main__":
    main()
