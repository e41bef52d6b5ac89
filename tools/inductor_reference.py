#!/usr/bin/env python3
"""torch.compile (Inductor) and AOTInductor beside tools/benchmark_inference.cc
(section 9), on the same model, weights and input as ours.

    python inductor_reference.py serve NAME WEIGHTS THREADS FILE:DTYPE:SHAPE...
    python inductor_reference.py package NAME WEIGHTS OUT.pt2 FILE:DTYPE:SHAPE...

NAME is one of testdata/vision_models.py's models (torchvision's, copied) or
of testdata/onnx_runtime_models.py's (transformers, recurrent models);
WEIGHTS the TorchScript file the benchmark traces, whose parameters and
buffers are loaded into the Python module (strictly). Inputs are raw files
as tools/ort_timer.js reads them (DTYPE float32 or int64, SHAPE like
1x3x224x224).

serve: torch.compile(model) with Inductor's freezing on (its CPU
inference setting: weights folded as constants), `THREADS` intra-op
threads, run without autograd; compiles and warms it, prints "ready", then
answers each line of stdin as tools/ort_timer.js does: `run N` prints
"ms T1 ... TN", `save FILE` writes the first output (float32, raw) and
prints "saved DIMS".

package: torch.export.export, then AOTInductor
(torch._inductor.aoti_compile_and_package, freezing on) into OUT.pt2, for
LibTorch's torch::inductor::AOTIModelPackageLoader; prints
"packaged SECONDS".

Prints `error <reason>` and exits 1 when it cannot.
"""
import os
import sys
import time

try:
    import torch
    import torch._inductor.config as inductor_config
except ImportError as e:
    print(f"error {e}")
    sys.exit(1)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "testdata"))
import onnx_runtime_models  # noqa: E402
import vision_models  # noqa: E402

DTYPES = {"float32": torch.float32, "int64": torch.int64}


def build(name, weights):
    if name in vision_models.MODELS:
        return vision_models.build(name, weights)
    if name in onnx_runtime_models.MODELS:
        model = onnx_runtime_models.MODELS[name][0]()
        model.load_state_dict(torch.jit.load(weights).state_dict(),
                              strict=True)
        return model.eval()
    known = sorted(set(vision_models.MODELS) | set(onnx_runtime_models.MODELS))
    raise KeyError(f"no Python definition of '{name}' (known: "
                   f"{', '.join(known)})")


def read_input(spec):
    path, dtype, shape = spec.split(":")
    dims = [int(d) for d in shape.split("x")] if shape else []
    with open(path, "rb") as f:
        data = bytearray(f.read())
    return torch.frombuffer(data, dtype=DTYPES[dtype]).reshape(dims).clone()


def first_tensor(out):
    while isinstance(out, (tuple, list)):
        out = out[0]
    return out


def serve(name, weights, threads, specs):
    torch.set_num_threads(threads)
    inductor_config.freezing = True
    model = build(name, weights)
    inputs = [read_input(s) for s in specs]
    compiled = torch.compile(model)
    with torch.no_grad():
        last = compiled(*inputs)
        last = compiled(*inputs)
    print("ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        if len(words) == 2 and words[0] == "run":
            times = []
            with torch.no_grad():
                for _ in range(int(words[1])):
                    start = time.perf_counter()
                    last = compiled(*inputs)
                    times.append((time.perf_counter() - start) * 1e3)
            print("ms " + " ".join(f"{t:.4f}" for t in times), flush=True)
        elif len(words) == 2 and words[0] == "save":
            # A storage of its own: exactly its values, in order.
            out = first_tensor(last).detach().float().clone(
                memory_format=torch.contiguous_format)
            with open(words[1], "wb") as f:
                f.write(bytes(out.untyped_storage()))
            print("saved " + "x".join(str(d) for d in out.shape), flush=True)
        else:
            print(f"error unknown command '{line.strip()}': run N or save FILE",
                  flush=True)
            sys.exit(1)


def package(name, weights, out, specs):
    model = build(name, weights)
    inputs = tuple(read_input(s) for s in specs)
    start = time.perf_counter()
    with torch.no_grad():
        program = torch.export.export(model, inputs)
        torch._inductor.aoti_compile_and_package(
            program, package_path=out, inductor_configs={"freezing": True})
    print(f"packaged {time.perf_counter() - start:.1f}", flush=True)


def main():
    if len(sys.argv) < 5 or sys.argv[1] not in ("serve", "package"):
        print("error usage: inductor_reference.py serve NAME WEIGHTS THREADS "
              "INPUT... | package NAME WEIGHTS OUT.pt2 INPUT...")
        sys.exit(1)
    try:
        if sys.argv[1] == "serve":
            serve(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:])
        else:
            package(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
    except Exception as e:  # noqa: BLE001: the benchmark prints the reason
        print(f"error {type(e).__name__}: {str(e).splitlines()[0][:300]}",
              flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
