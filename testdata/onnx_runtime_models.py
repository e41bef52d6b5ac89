"""The models the inference benchmark times against ONNX Runtime
(tools/benchmark_inference.cc, section 6): torchvision's, and transformer
and recurrent models written here as Python classes. ONNX Runtime runs what
torch.onnx exports from each (opset 14, fixed shapes, autograd on: the path
torch.onnx can export), and we run the TorchScript file traced from the same
module (seed 0) in eval mode without autograd, as a deployment traces it
(PyTorch's fused transformer ops included).

    python3 testdata/onnx_runtime_models.py OUT_DIR NAME:BATCH[:BATCH...] ...

writes OUT_DIR/NAME.pt (traced at the first batch size) and
OUT_DIR/NAME_bBATCH.onnx per batch size, and prints a line
`NAME INPUT_SPEC` per model (`1x128:int64`, `1x3x224x224:float32`: the
first batch size's)."""
import math
import os
import sys

import torch


class BertEncoder(torch.nn.Module):
    """A BERT-style encoder: token and position embeddings, a stack of
    nn.TransformerEncoderLayer (post-norm, gelu), the first token's state."""

    def __init__(self, layers=4, d=256, heads=4, ff=1024, vocab=1000,
                 length=128):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Parameter(torch.randn(1, length, d) * 0.02)
        self.norm = torch.nn.LayerNorm(d)
        layer = torch.nn.TransformerEncoderLayer(
            d, heads, ff, dropout=0.1, activation="gelu", batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(
            layer, layers, enable_nested_tensor=False)
        for p in self.encoder.parameters():  # the copies' own weights
            if p.dim() > 1:
                torch.nn.init.xavier_uniform_(p)

    def forward(self, ids):
        h = self.norm(self.embed(ids) + self.pos[:, : ids.shape[1]])
        return self.encoder(h)[:, 0]


class BertBase(BertEncoder):
    """BERT-base's sizes: 12 layers, d=768, 12 heads, 3072 wide."""

    def __init__(self):
        super().__init__(layers=12, d=768, heads=12, ff=3072, vocab=30522)


class GptDecoder(torch.nn.Module):
    """A GPT-2-style decoder written by hand: pre-norm blocks, causal
    attention on nn.Linear (q @ k^T, masked_fill, softmax), a tanh-GELU
    MLP, tied output embedding."""

    def __init__(self, layers=4, d=256, heads=4, vocab=1000, length=64):
        super().__init__()
        self.heads = heads
        self.embed = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Parameter(torch.randn(1, length, d) * 0.02)
        self.blocks = torch.nn.ModuleList(
            [GptBlock(d, heads) for _ in range(layers)])
        self.norm = torch.nn.LayerNorm(d)
        self.register_buffer(
            "causal", torch.ones(length, length, dtype=torch.bool).triu(1))

    def forward(self, ids):
        t = ids.shape[1]
        h = self.embed(ids) + self.pos[:, :t]
        mask = self.causal[:t, :t]
        for block in self.blocks:
            h = block(h, mask)
        return self.norm(h) @ self.embed.weight.t()


class Gpt2Small(GptDecoder):
    """GPT-2 small's sizes: 12 blocks, d=768, 12 heads, its vocabulary."""

    def __init__(self):
        super().__init__(layers=12, d=768, heads=12, vocab=50257, length=128)


class GptBlock(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc = torch.nn.Linear(d, 4 * d)
        self.out = torch.nn.Linear(4 * d, d)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q = q.view(b, t, self.heads, -1).transpose(1, 2)
        k = k.view(b, t, self.heads, -1).transpose(1, 2)
        v = v.view(b, t, self.heads, -1).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(
            torch.nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class LstmLanguageModel(torch.nn.Module):
    """An LSTM language model: embedding, 2 LSTM layers, a linear head."""

    def __init__(self, vocab=1000, d=256, hidden=512, layers=2):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.lstm = torch.nn.LSTM(d, hidden, layers, batch_first=True)
        self.head = torch.nn.Linear(hidden, vocab)

    def forward(self, ids):
        return self.head(self.lstm(self.embed(ids))[0])


class BilstmTagger(torch.nn.Module):
    """A sequence tagger: embedding, 2 bidirectional LSTM layers (256 units
    each way), a linear head over both directions' outputs."""

    def __init__(self, vocab=1000, d=256, hidden=256, layers=2, tags=32):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.lstm = torch.nn.LSTM(d, hidden, layers, batch_first=True,
                                  bidirectional=True)
        self.head = torch.nn.Linear(2 * hidden, tags)

    def forward(self, ids):
        return self.head(self.lstm(self.embed(ids))[0])


# name: (factory, sequence length); torchvision's take images.
MODELS = {
    "bert_encoder": (BertEncoder, 128),
    "bert_base": (BertBase, 128),
    "gpt_decoder": (GptDecoder, 64),
    "gpt2_small": (Gpt2Small, 128),
    "lstm_lm": (LstmLanguageModel, 32),
    "bilstm_tagger": (BilstmTagger, 32),
}


def build(name):
    torch.manual_seed(0)
    if name in MODELS:
        return MODELS[name][0]().eval()
    import torchvision  # Debian's Python has it; PyPI's 2.13 has none

    model = getattr(torchvision.models, name)().eval()
    if name.startswith("vit_"):
        # torchvision starts ViT's classifier at zero: an output to compare.
        with torch.no_grad():
            for p in model.heads.parameters():
                p.normal_(0, 0.02)
    return model


def example(name, batch):
    if name in MODELS:
        return torch.randint(0, 1000, (batch, MODELS[name][1]))
    return torch.randn(batch, 3, 224, 224)


def write(name, batches, out_dir):
    model = build(name)
    x = example(name, batches[0])
    with torch.no_grad():  # PyTorch's fused inference paths, as deployed
        torch.jit.trace(model, x).save(os.path.join(out_dir, name + ".pt"))
    for batch in batches:
        # torch.onnx runs the unfused path (it cannot export the fused ops).
        torch.onnx.export(model, example(name, batch),
                          os.path.join(out_dir, f"{name}_b{batch}.onnx"),
                          opset_version=14, input_names=["input"],
                          output_names=["output"])
    dtype = "int64" if x.dtype == torch.int64 else "float32"
    print(name, "x".join(str(d) for d in x.shape) + ":" + dtype)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for arg in sys.argv[2:]:
        name, *batches = arg.split(":")
        write(name, [int(b) for b in batches or ["1"]], out_dir)


if __name__ == "__main__":
    main()
