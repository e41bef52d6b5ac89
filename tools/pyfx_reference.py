#!/usr/bin/python3
"""Python torch.fx reference figures for tools/benchmark.cc.

Run with the Python of the LibTorch the build uses (torch 2.13 in
tools/setup.sh's virtual environment by default; Debian's /usr/bin/python3,
torch 1.13 with torchvision 0.14, under --config=libtorch113). Where
torchvision does not import (beside torch 2.13), the models are
testdata/vision_models.py's copies of torchvision's definitions (the same
modules and torch.fx graphs; default initialization, which no figure here
depends on); `models` names which. Measures:
  - torch.fx.symbolic_trace of torchvision's resnet18, resnet50, mobilenet_v2
    (median of repeated traces of one model), and of resnet18 and resnet50
    freshly built before each trace (the like-for-like figure for importing
    a freshly loaded TorchScript file);
  - symbolic_trace of a chain of n `x = x + 1` (n = 1,000 and 10,000; torch.fx
    1.13 traces in quadratic time, so 10,000 is measured once, and skipped
    with --quick);
  - forward times, interleaved round by round under torch.no_grad(): ResNet-18
    eager / fx GraphModule / fx Interpreter, and the same on the 1,000-op chain,
    with the medians of the per-round comparisons with eager;
  - with --fuse instead (for tools/benchmark_passes.cc): forward times of
    torchvision's resnet18, resnet50 and mobilenet_v2, eager / fx GraphModule
    / torch.fx.experimental.optimization.fuse() (conv/bn folding);
  - with --inference MODEL... instead (for tools/benchmark_inference.cc):
    forward times at batch 1 of each torchvision model, interleaved: eager,
    torch.fx.experimental.optimization.optimize_for_inference (MKLDNN) and
    TorchScript torch.jit.freeze + torch.jit.optimize_for_inference.

Prints one `key value` line per figure (milliseconds, microseconds per op,
counts); on failure prints `error <reason>` and exits with status 1.
"""

import argparse
import os
import statistics
import sys
import time

try:
    import torch
    import torch.fx
    from torch.fx.experimental.optimization import fuse
except ImportError as e:
    print(f"error {e}")
    sys.exit(1)
try:
    import torchvision
    MODELS_FROM = f"torchvision-{torchvision.__version__}"

    def vision(name):
        return getattr(torchvision.models, name)()
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "testdata"))
    import vision_models
    MODELS_FROM = "testdata/vision_models.py"

    def vision(name):
        return vision_models.MODELS[name]()

TRACE_MODELS = ["resnet18", "resnet50", "mobilenet_v2"]
FRESH_TRACE_MODELS = ["resnet18", "resnet50"]
FORWARD_CHAIN_LENGTH = 1000
# Chain forward samples time this many calls each (one call is a few ms).
CHAIN_CALLS_PER_SAMPLE = 10


class Chain(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.n = n

    def forward(self, x):
        for _ in range(self.n):
            x = x + 1
        return x


def median_seconds(fn, repeats, warmup=True):
    """Median wall time of fn() over `repeats` runs, after one warm-up run."""
    if warmup:
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def interleaved_seconds(variants, rounds, calls_per_sample=1):
    """Seconds per call of each variant (a dict name -> fn), one per round.

    Variants alternate within each round (ABC, then CBA, ...) so that drift
    on a shared machine affects them alike.
    """
    for fn in variants.values():
        fn()
    names = list(variants)
    samples = {name: [] for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            fn = variants[name]
            start = time.perf_counter()
            for _ in range(calls_per_sample):
                fn()
            samples[name].append((time.perf_counter() - start) / calls_per_sample)
    return samples


def emit(key, value):
    print(f"{key} {value:.6g}" if isinstance(value, float) else f"{key} {value}",
          flush=True)


def trace_models(repeats):
    for name in TRACE_MODELS:
        model = vision(name).eval()
        emit(f"trace_ms.{name}",
             median_seconds(lambda: torch.fx.symbolic_trace(model), repeats) * 1e3)
        emit(f"nodes.{name}", len(torch.fx.symbolic_trace(model).graph.nodes))


def trace_fresh_models(repeats):
    """Median time of symbolic_trace of a model built just before (not timed),
    so that, as for a freshly loaded file, nothing of it is in the caches."""
    for name in FRESH_TRACE_MODELS:
        samples = []
        for _ in range(repeats):
            model = vision(name).eval()
            start = time.perf_counter()
            torch.fx.symbolic_trace(model)
            samples.append(time.perf_counter() - start)
        emit(f"trace_fresh_ms.{name}", statistics.median(samples) * 1e3)


def trace_chains(repeats, quick):
    chain = Chain(1000)
    emit("chain_trace_ms.1000",
         median_seconds(lambda: torch.fx.symbolic_trace(chain), repeats) * 1e3)
    if not quick:
        # About 17 s on the reference machine: one run, no warm-up.
        chain = Chain(10000)
        emit("chain_trace_ms.10000",
             median_seconds(lambda: torch.fx.symbolic_trace(chain), 1,
                            warmup=False) * 1e3)


def emit_forward(workload, unit, scale, samples):
    """Medians of eager, gm, interp (seconds * scale, in `unit`), and the
    medians of their per-round comparisons with eager (tools/benchmark.cc's
    keys)."""
    eager = samples["eager"]
    for variant, s in samples.items():
        emit(f"{workload}_{variant}{unit}", statistics.median(s) * scale)
    emit(f"{workload}_gm_minus_eager{unit}",
         statistics.median(g - e for g, e in zip(samples["gm"], eager)) * scale)
    for variant in ("gm", "interp"):
        emit(f"{workload}_{variant}_over_eager",
             statistics.median(v / e for v, e in zip(samples[variant], eager)))


def forward_times(rounds):
    with torch.no_grad():
        model = vision("resnet18").eval()
        gm = torch.fx.symbolic_trace(model)
        interpreter = torch.fx.Interpreter(gm)
        x = torch.randn(1, 3, 224, 224)
        samples = interleaved_seconds({"eager": lambda: model(x),
                                       "gm": lambda: gm(x),
                                       "interp": lambda: interpreter.run(x)},
                                      rounds)
        emit_forward("resnet18", "_ms", 1e3, samples)

        chain = Chain(FORWARD_CHAIN_LENGTH)
        gm = torch.fx.symbolic_trace(chain)
        interpreter = torch.fx.Interpreter(gm)
        x = torch.zeros(1)
        samples = interleaved_seconds({"eager": lambda: chain(x),
                                       "gm": lambda: gm(x),
                                       "interp": lambda: interpreter.run(x)},
                                      rounds, CHAIN_CALLS_PER_SAMPLE)
        emit_forward("chain", "_us_per_op", 1e6 / FORWARD_CHAIN_LENGTH, samples)


def fuse_times(rounds):
    with torch.no_grad():
        for name in TRACE_MODELS:
            model = vision(name).eval()
            gm = torch.fx.symbolic_trace(model)
            fused = fuse(model)
            x = torch.randn(1, 3, 224, 224)
            samples = interleaved_seconds({"eager": lambda: model(x),
                                           "gm": lambda: gm(x),
                                           "fused": lambda: fused(x)},
                                          rounds)
            for variant, s in samples.items():
                emit(f"fuse.{name}_{variant}_ms", statistics.median(s) * 1e3)
            emit(f"fuse.{name}_fused_over_eager",
                 statistics.median(f / e for f, e in zip(samples["fused"],
                                                         samples["eager"])))


def inference_times(names, rounds):
    from torch.fx.experimental.optimization import optimize_for_inference
    with torch.no_grad():
        for name in names:
            torch.manual_seed(0)
            model = vision(name).eval()
            x = torch.randn(1, 3, 224, 224)
            variants = {"eager": lambda: model(x)}
            try:
                fx_opt = optimize_for_inference(model)
                fx_opt(x)
                variants["fx_opt"] = lambda: fx_opt(x)
            except Exception as e:  # mkldnn cannot run some models
                emit(f"inference.{name}_fx_opt_error", type(e).__name__)
            ts = torch.jit.optimize_for_inference(
                torch.jit.freeze(torch.jit.trace(model, x)))
            variants["ts_opt"] = lambda: ts(x)
            samples = interleaved_seconds(variants, rounds)
            for variant, s in samples.items():
                emit(f"inference.{name}_{variant}_ms", statistics.median(s) * 1e3)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=10,
                        help="timed runs (or interleaved rounds) per figure")
    parser.add_argument("--quick", action="store_true",
                        help="skip the 10,000-node chain trace")
    parser.add_argument("--fuse", action="store_true",
                        help="only the fuse() forward times")
    parser.add_argument("--inference", nargs="+", metavar="MODEL",
                        help="only these models' optimized forward times")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    emit("torch_version", torch.__version__)
    emit("models", MODELS_FROM)
    emit("threads", torch.get_num_threads())
    if args.fuse:
        fuse_times(args.repeats)
        return
    if args.inference:
        inference_times(args.inference, args.repeats)
        return
    trace_models(args.repeats)
    trace_fresh_models(args.repeats)
    trace_chains(args.repeats, args.quick)
    forward_times(args.repeats)


if __name__ == "__main__":
    main()
