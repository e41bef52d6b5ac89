#!/usr/bin/env bash
# Installs what fx for LibTorch builds and tests with: LibTorch 2.13, the
# default (the CPU wheel torch==2.13.0 from PyPI, in a virtual environment:
# its C++ headers and libraries are LibTorch's, its Python the reference the
# benchmarks compare against; below), and from Debian 12's archive:
# libtorch 1.13 (the second configuration, --config=libtorch113), Bazel (offline, with its platforms and Java rules),
# Catch2, abseil, graphviz, the locale sources (a test builds a locale with
# a decimal comma), clang-14 with its sanitizer and libFuzzer runtimes (the
# fuzzers and the sanitized test run) and Python torch/torchvision (the
# torch.fx reference the benchmarks compare against), CMake with ccache
# (the CMake build and its consumer example), oneDNN's headers (the
# lowering), scikit-learn (its digits data set: the quantization
# accuracy test), Gloo's headers (c10d's ProcessGroupGloo: the pipeline
# across processes), Doxygen (the API reference, docs/Doxyfile) and ONNX
# (libonnx-dev: the ONNX export's protobuf classes, checker and shape
# inference; python3-onnx: Python's checker beside it) and OpenBLAS
# (libopenblas0-pthread: it takes over libblas.so.3 through Debian's
# alternatives and so becomes libtorch's BLAS, as on any well-configured
# machine; without it libtorch's matmuls run on the reference netlib BLAS,
# 5-10x slower, and every figure we publish assumes it); then ONNX Runtime
# from npm (below). Does nothing when all are there.
set -euo pipefail

packages=(
  libtorch-dev
  bazel-bootstrap
  bazel-platforms
  bazel-rules-java
  catch2
  libabsl-dev
  graphviz
  locales
  clang-14
  libclang-rt-14-dev
  python3-torch
  python3-torchvision
  cmake
  ccache
  libdnnl-dev
  python3-sklearn
  libgloo-dev
  doxygen
  libonnx-dev
  python3-onnx
  libopenblas0-pthread
  nlohmann-json3-dev
)

missing=()
for package in "${packages[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
if [ "${#missing[@]}" -ne 0 ]; then
  echo "installing: ${missing[*]}" >&2
  $sudo apt-get update -q
  # Without the packages these merely recommend (video codecs, Qt, GTK,
  # matplotlib, pytest, speech models: 117 of 389 packages on a fresh
  # Debian 12, none of them used here).
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q \
    --no-install-recommends "${missing[@]}"
fi

# ONNX Runtime's CPU library, for the ONNX export's tests: not in Debian; it
# ships inside the npm package onnxruntime-node, run with the machine's
# Node.js (its install script, which fetches GPU extras, is skipped).
ort_dir="${FX_ORT_DIR:-/usr/local/lib/fx-libtorch/onnxruntime}"
if [ ! -d "$ort_dir/node_modules/onnxruntime-node" ]; then
  echo "installing: onnxruntime-node 1.30.0 (npm) into $ort_dir" >&2
  $sudo mkdir -p "$ort_dir"
  $sudo npm install --prefix "$ort_dir" --ignore-scripts --no-audit --no-fund \
    onnxruntime-node@1.30.0 >&2
fi

# LibTorch 2.13 (the default build, third_party/libtorch.bzl): the CPU wheel
# of torch 2.13.0 in a virtual environment of the machine's Python 3.11,
# pinned (an unpinned torch resolves to a CUDA build of several GB), with
# numpy, which torch's Python side converts tensors through.
venv="${FX_VENV:-/usr/local/lib/fx-libtorch/venv}"
if ! "$venv/bin/python" -c "import torch, numpy; assert torch.__version__.startswith('2.13.0')" \
    >/dev/null 2>&1; then
  echo "installing: torch 2.13.0 (CPU), numpy 2.4.6 (PyPI) into $venv" >&2
  python="$(command -v python3.11 || command -v python3)"
  $sudo mkdir -p "$(dirname "$venv")"
  $sudo "$python" -m venv "$venv"
  $sudo "$venv/bin/pip" install -q --disable-pip-version-check \
    torch==2.13.0 numpy==2.4.6 >&2
fi
# ONNX Runtime's Python package beside it, the version of onnxruntime-node
# above: its quantize_dynamic makes the int8 files benchmark_quantization's
# section 6 times ONNX Runtime on (tools/ort_quantize_dynamic.py).
if ! "$venv/bin/python" -c "import onnxruntime, onnx; assert onnxruntime.__version__ == '1.30.0'" \
    >/dev/null 2>&1; then
  echo "installing: onnxruntime 1.30.0, onnx 1.23.1 (PyPI) into $venv" >&2
  $sudo "$venv/bin/pip" install -q --disable-pip-version-check \
    onnxruntime==1.30.0 onnx==1.23.1 >&2
fi
