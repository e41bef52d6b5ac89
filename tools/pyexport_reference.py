#!/usr/bin/env python3
"""torch.export programs and Python's time to load them, for
tools/benchmark_exported.cc.

    python pyexport_reference.py OUT_DIR [--quick] [--repeats=N]

Exports ResNet-50 (testdata/vision_models.py's copy of torchvision's, or
ResNet-18 with --quick) at batch 1 and a BERT-base-sized encoder on
nn.TransformerEncoder (12 layers, width 768, 12 heads, 3072 wide
feed-forward, a 30,522-token embedding; 2 layers with --quick) with a
dynamic batch and length, each in eval mode with seeded weights, as
OUT_DIR/NAME.pt2 (torch.export.save), with OUT_DIR/NAME_io.pt (the
program's input and its output, torch.save). Then times torch.export.load
of each file, `repeats` times after one untimed load, and prints
`NAME.load_ms MEDIAN` and `NAME.file_mb SIZE`; `error <reason>` and status
1 on failure.
"""
import argparse
import os
import statistics
import sys
import time

try:
    import torch
except ImportError as e:
    print(f"error {e}")
    sys.exit(1)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "testdata"))
import vision_models  # noqa: E402


class Bert(torch.nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.embedding = torch.nn.Embedding(30522, 768)
        layer = torch.nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True,
                                                 dropout=0.0)
        self.encoder = torch.nn.TransformerEncoder(layer, layers,
                                                   enable_nested_tensor=False)

    def forward(self, ids):
        return self.encoder(self.embedding(ids))


def export(name, model, inputs, dynamic_shapes, out):
    path = os.path.join(out, name + ".pt2")
    program = torch.export.export(model.eval(), inputs,
                                  dynamic_shapes=dynamic_shapes)
    torch.export.save(program, path)
    with torch.no_grad():
        output = program.module()(*inputs)
    torch.save(list(inputs) + [output], os.path.join(out, name + "_io.pt"))
    return path


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    cnn = "resnet18" if args.quick else "resnet50"
    programs = {
        cnn: export(cnn, vision_models.MODELS[cnn](),
                    (torch.randn(1, 3, 224, 224),), None, args.out),
        "bert": export("bert", Bert(2 if args.quick else 12),
                       (torch.randint(0, 30522, (2, 16)),),
                       {"ids": {0: torch.export.Dim("B", max=64),
                                1: torch.export.Dim("T", max=512)}},
                       args.out),
    }
    print(f"torch_version {torch.__version__}", flush=True)
    for name, path in programs.items():
        torch.export.load(path)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            torch.export.load(path)
            times.append((time.perf_counter() - start) * 1e3)
        print(f"{name}.load_ms {statistics.median(times):.3f}", flush=True)
        print(f"{name}.file_mb {os.path.getsize(path) / 1e6:.1f}", flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001: the benchmark reports why
        print(f"error {type(e).__name__}: {str(e)[:300]}")
        sys.exit(1)
