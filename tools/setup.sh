#!/usr/bin/env bash
# Installs what fx for LibTorch builds and tests with, from Debian 12's
# archive only: libtorch, Bazel (offline, with its platforms and Java rules),
# Catch2, abseil, graphviz, the locale sources (a test builds a locale with
# a decimal comma), clang-14 with its sanitizer and libFuzzer runtimes (the
# fuzzers and the sanitized test run) and Python torch/torchvision (the
# torch.fx reference the benchmarks compare against), CMake with ccache
# (the CMake build and its consumer example), oneDNN's headers (the
# lowering), scikit-learn (its digits data set: the quantization
# accuracy test), Gloo's headers (c10d's ProcessGroupGloo: the pipeline
# across processes) and Doxygen (the API reference, docs/Doxyfile). Does
# nothing when all are there.
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
)

missing=()
for package in "${packages[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
echo "installing: ${missing[*]}" >&2
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
