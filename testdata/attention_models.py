"""Writes attention models as TorchScript files with the Python whose torch
matches the LibTorch of the build (FX_LIBTORCH_PYTHON, @libtorch//:python:
torch 2.13 by default), for testdata/attention_test.cc. Only torch is
imported (PyPI's torchvision does not load beside the CPU wheel). Random
weights from a fixed seed, nothing downloaded.

    python testdata/attention_models.py OUT_DIR [NAME ...]

Writes OUT_DIR/<name>.pt for each name (default: all of MODELS), and
prints one line per file. In torch 2.x, nn.MultiheadAttention (and so
nn.TransformerEncoderLayer) traced with autograd on calls
aten::scaled_dot_product_attention; under torch.no_grad() it takes the
fused inference path (aten::_transformer_encoder_layer_fwd) instead.
"""
import os
import sys

import torch
import torch.nn.functional as F


def _encoder():
    """nn.TransformerEncoder of two post-norm layers, relu, batch first."""
    layer = torch.nn.TransformerEncoderLayer(
        64, 4, 128, dropout=0.1, batch_first=True)
    return torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)


def _pre_norm_encoder():
    """Pre-norm layers with gelu, given a causal mask: what a GPT-style
    decoder-only stack traces to."""
    layer = torch.nn.TransformerEncoderLayer(
        64, 4, 128, dropout=0.1, activation="gelu", batch_first=True,
        norm_first=True)
    return CausalStack(torch.nn.TransformerEncoder(
        layer, 2, enable_nested_tensor=False))


class CausalStack(torch.nn.Module):
    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, x):
        mask = torch.nn.Transformer.generate_square_subsequent_mask(x.size(1))
        return self.encoder(x, mask=mask, is_causal=True)


class Sdpa(torch.nn.Module):
    """F.scaled_dot_product_attention called directly on [B, H, T, E]
    heads: causal, with a boolean mask, and with an explicit scale."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(32, 96)

    def forward(self, x, keep):
        B, T, _ = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, 4, 8).permute(2, 0, 3, 1, 4)
        causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        # The mask comes in as float (the tests' ONNX Runtime runner feeds
        # float32 and int64 inputs), boolean where it is used.
        masked = F.scaled_dot_product_attention(q, k, v, attn_mask=keep > 0.5)
        scaled = F.scaled_dot_product_attention(q, k, v, scale=0.5)
        return causal + masked + scaled


def _keep():
    # [B, 1, T, T]: 1 where a query sees a key; some keys masked out for
    # each query, none entirely.
    keep = (torch.rand(2, 1, 10, 10) > 0.3).float()
    keep[..., 0] = 1
    return keep


MODELS = {
    # name: (factory, example inputs)
    "sdpa_encoder_traced": (_encoder, lambda: (torch.randn(2, 10, 64),)),
    "sdpa_causal_encoder_traced": (
        _pre_norm_encoder, lambda: (torch.randn(2, 10, 64),)),
    "sdpa_functional_traced": (
        Sdpa, lambda: (torch.randn(2, 10, 32), _keep())),
}


def write(name, out_dir):
    torch.manual_seed(0)
    factory, example = MODELS[name]
    model = factory().eval()
    # check_trace=False: the check re-traces and compares the graphs, which
    # name the encoder's layers' classes apart (mangled) and so differ.
    module = torch.jit.trace(model, example(), check_trace=False)
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
