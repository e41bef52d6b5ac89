"""Python torch.ao quantize_fx on torchvision models, the reference
tools/benchmark_quantization.cc measures fx for LibTorch's int8 against
(run with the Python of the LibTorch the build uses: torch 2.13 in
tools/setup.sh's virtual environment by default, Debian's /usr/bin/python3
with torch 1.13 under --config=libtorch113).

    python3 tools/pyquant_reference.py OUT_DIR MODEL... [--engines=onednn,qnnpack]
        [--calibration=4] [--batches=1,8] [--rounds=20] [--threads=2]

MODEL is a name of testdata/torchscript_models.py without "_traced"
(resnet18, mobilenet_v2, ...): built as that script builds it, so with the
weights of its MODEL_traced.pt. Where torchvision does not import (beside
torch 2.13), the model is testdata/vision_models.py's copy of torchvision's
definition with the weights of OUT_DIR/MODEL_traced.pt, which the benchmark
wrote with Debian's Python first; `models` names which. For each model it writes
OUT_DIR/MODEL_data.pt, a list of 1x3x224x224 tensors: the calibration
batches, then --evaluation more, which the C++ side loads to calibrate and
measure on the very same data. Then, per engine, quantize_fx with
get_default_qconfig_mapping(engine), calibrated on those batches, and
`key value` lines:

    resnet18.onednn.sqnr 34.1
    resnet18.fp32_ms.1 29.5
    resnet18.int8_ms.1 7.7

sqnr: 10 log10(sum fp32^2 / sum (fp32 - int8)^2) over the outputs of the
evaluation batches; times (with --rounds > 0, onednn only): medians of
interleaved rounds, the converted model against fp32 eager, per batch size.

With --qat_steps=N, for each model of --qat_models and each engine:
prepare_qat_fx of the model in eval mode (batch norms frozen) and N steps
of distillation as fx::distill_qat runs them (Adam at --qat_lr, each step
the next calibration batch in turn, the squared error against the float
model's output over its energy, observers disabled halfway), then

    mobilenet_v2.qnnpack.qat_sqnr 1.6        (converted, as sqnr above)
    mobilenet_v2.qnnpack.qat_fake_sqnr 31.2  (the trained QAT module itself)
    mobilenet_v2.qnnpack.qat_step_ms 310.0   (median training step)
"""
import argparse
import os
import sys
import time

import torch
from torch.ao.quantization import (HistogramObserver, QConfig,
                                   default_per_channel_weight_observer,
                                   disable_observer, get_default_qat_qconfig_mapping,
                                   get_default_qconfig_mapping)
from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx, prepare_qat_fx

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "testdata"))
try:
    import torchvision
    import torchscript_models  # noqa: E402  (imports torchvision)
except ImportError:
    torchvision = None
    import vision_models  # noqa: E402

# Where the traced models were written (main() sets it from OUT_DIR).
WEIGHTS_DIR = None


def models_from():
    if torchvision is not None:
        return f"torchvision-{torchvision.__version__}"
    return "testdata/vision_models.py+weights-of-MODEL_traced.pt"


def build(name):
    if torchvision is None:
        return vision_models.build(
            name, os.path.join(WEIGHTS_DIR, name + "_traced.pt"))
    key = name + "_traced"
    factory, _ = (torchscript_models.MODELS[key]
                  if key in torchscript_models.MODELS
                  else torchscript_models.CLASSIFICATION[key])
    torch.manual_seed(0)
    return torchscript_models._calibrated(factory())


def data(n_calibration, n_evaluation):
    torch.manual_seed(12345)
    return [torch.randn(1, 3, 224, 224)
            for _ in range(n_calibration + n_evaluation)]


def sqnr(reference, other):
    noise = (reference - other).pow(2).sum().item()
    signal = reference.pow(2).sum().item()
    return float("inf") if noise == 0 else 10 * torch.log10(
        torch.tensor(signal / noise)).item()


def interleaved_ms(variants, rounds):
    samples = [[] for _ in variants]
    for v in variants:
        v()
    for r in range(rounds):
        order = range(len(variants)) if r % 2 == 0 else reversed(range(len(variants)))
        for i in order:
            start = time.perf_counter()
            variants[i]()
            samples[i].append((time.perf_counter() - start) * 1e3)
    return [sorted(s)[len(s) // 2] for s in samples]


def distill(student, teacher, batches, steps, lr):
    """fx::distill_qat's procedure; returns each step's milliseconds."""
    with torch.no_grad():
        targets = [teacher(b) for b in batches]
    adam = torch.optim.Adam(student.parameters(), lr=lr)
    times = []
    for step in range(steps):
        if step == steps // 2 and step > 0:
            student.apply(disable_observer)
        start = time.perf_counter()
        i = step % len(batches)
        adam.zero_grad()
        out = student(batches[i])
        loss = (out - targets[i]).pow(2).sum() / targets[i].pow(2).sum().clamp_min(1e-12)
        loss.backward()
        adam.step()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def quantization_aware(name, engine, calibration, evaluation, steps, lr):
    model = build(name)
    student = prepare_qat_fx(build(name), get_default_qat_qconfig_mapping(engine),
                             (calibration[0],))
    # prepare_qat_fx's ConvBn modules are new, so in training mode even for
    # a model in eval mode: their batch norms would normalize by the batch
    # and pull their running statistics toward the distillation data's.
    # Frozen, as fx's blocks of a model traced in eval mode are.
    student.eval()
    times = distill(student, model, calibration, steps, lr)
    with torch.no_grad():
        want = torch.cat([model(x) for x in evaluation])
        fake = torch.cat([student(x) for x in evaluation])
        int8 = convert_fx(student)
        got = torch.cat([int8(x) for x in evaluation])
    print(f"{name}.{engine}.qat_sqnr {sqnr(want, got):.4f}", flush=True)
    print(f"{name}.{engine}.qat_fake_sqnr {sqnr(want, fake):.4f}", flush=True)
    print(f"{name}.{engine}.qat_step_ms {sorted(times)[len(times) // 2]:.4f}",
          flush=True)


def static_mapping(engine, args):
    """torch.ao's default mapping; with --onednn_reduce_range, onednn's
    activations observed in 7 bits, as fx for LibTorch's default is on a
    CPU without VNNI."""
    mapping = get_default_qconfig_mapping(engine)
    if engine == "onednn" and args.onednn_reduce_range:
        default = mapping.global_qconfig
        reduced = QConfig(
            activation=HistogramObserver.with_args(reduce_range=True),
            weight=default_per_channel_weight_observer)
        mapping.set_global(reduced)
        # torch 1.13's onednn mapping also names convolutions, linear
        # layers, relu, ... with the default: those too.
        for op, qconfig in list(mapping.object_type_qconfigs.items()):
            if qconfig == default:
                mapping.set_object_type(op, reduced)
    return mapping


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("models", nargs="+")
    parser.add_argument("--engines", default="onednn,qnnpack")
    parser.add_argument("--calibration", type=int, default=4)
    parser.add_argument("--evaluation", type=int, default=2)
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--qat_steps", type=int, default=0)
    parser.add_argument("--qat_models", default="mobilenet_v2")
    parser.add_argument("--qat_lr", type=float, default=1e-5)
    # fx for LibTorch's onednn default on a CPU without VNNI: 7-bit
    # activations (quantization/qconfig.h), compared like with like.
    parser.add_argument("--onednn_reduce_range", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.makedirs(args.out_dir, exist_ok=True)
    global WEIGHTS_DIR
    WEIGHTS_DIR = args.out_dir
    print(f"torch_version {torch.__version__}", flush=True)
    print(f"models {models_from()}", flush=True)
    for name in args.models:
        batches = data(args.calibration, args.evaluation)
        torch.save(batches, os.path.join(args.out_dir, name + "_data.pt"))
        calibration = batches[:args.calibration]
        evaluation = batches[args.calibration:]
        for engine in args.engines.split(","):
            torch.backends.quantized.engine = engine
            model = build(name)
            with torch.no_grad():
                want = torch.cat([model(x) for x in evaluation])
                prepared = prepare_fx(model, static_mapping(engine, args),
                                      (calibration[0],))
                for b in calibration:
                    prepared(b)
                int8 = convert_fx(prepared)
                got = torch.cat([int8(x) for x in evaluation])
                print(f"{name}.{engine}.sqnr {sqnr(want, got):.4f}", flush=True)
                if args.rounds > 0 and engine == "onednn":
                    fp32 = build(name)
                    for batch in [int(b) for b in args.batches.split(",")]:
                        # Converted again at this batch size, as the C++
                        # side does (a onednn model calibrated at batch 1
                        # fails at batch 8 in 1.13: "could not create a
                        # primitive descriptor for a reorder primitive").
                        torch.manual_seed(batch)
                        x = torch.randn(batch, 3, 224, 224)
                        timed = prepare_fx(build(name),
                                           static_mapping(engine, args), (x,))
                        for _ in range(2):
                            timed(torch.randn_like(x))
                        timed = convert_fx(timed)
                        ms = interleaved_ms([lambda: fp32(x), lambda: timed(x)],
                                            args.rounds)
                        print(f"{name}.fp32_ms.{batch} {ms[0]:.4f}", flush=True)
                        print(f"{name}.int8_ms.{batch} {ms[1]:.4f}", flush=True)
            if args.qat_steps > 0 and name in args.qat_models.split(","):
                quantization_aware(name, engine, calibration, evaluation,
                                   args.qat_steps, args.qat_lr)


if __name__ == "__main__":
    main()
