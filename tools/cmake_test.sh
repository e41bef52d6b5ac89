#!/usr/bin/env bash
# The CMake build end to end: builds the libraries with CMake (warnings as
# errors), installs them to a scratch prefix, builds examples/cmake_consumer
# against the installed package (find_package(fx_libtorch)) and runs its
# demo, which traces, folds and runs a model and compares it with eager.
# With ccache (tools/setup.sh installs it) objects are reused across clones
# of the repository on one machine, as Bazel's disk cache does.
#
#   tools/cmake_test.sh [--subdirectory]   # consumer via add_subdirectory instead
set -euo pipefail
cd "$(dirname "$0")/.."

# Inside the checkout, at a fixed place: ccache rewrites paths under
# CCACHE_BASEDIR relative to the build directory, so objects are found
# again from any clone only when the build directory sits at the same
# place relative to the sources.
work="$PWD/.cmake_test"
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
launcher=()
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/fx-libtorch-ccache}"
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
jobs="$(nproc)"
# The LibTorch, as Bazel's FX_LIBTORCH names it (third_party/libtorch.bzl):
# by default 2.13, the wheel tools/setup.sh installs.
libtorch="${FX_LIBTORCH:-/usr/local/lib/fx-libtorch/venv/lib/python3.11/site-packages/torch}"

if [ "${1:-}" = "--subdirectory" ]; then
  cmake -S examples/cmake_consumer -B "$work/consumer" \
    -DFX_LIBTORCH_SOURCE_DIR="$PWD" -DFX_LIBTORCH_WERROR=ON \
    -DCMAKE_PREFIX_PATH="$libtorch" "${launcher[@]}"
else
  # Unoptimized (a build type with no flags of its own): this checks the
  # build, the package and the consumer, and Bazel's build is the -O2 one;
  # it compiles in about two thirds of the time. A unity build, eight
  # sources at a time: LibTorch's headers are most of a compile, and Bazel
  # compiles each source alone (its include checks hold for both). From
  # nothing, on two cores: 4 min 49 s, where one source at a time had
  # compiled 40% of them after 6 minutes (docs/testing.md).
  cmake -S . -B "$work/build" -DFX_LIBTORCH_WERROR=ON -DCMAKE_BUILD_TYPE=Check \
    -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8 \
    -DCMAKE_PREFIX_PATH="$libtorch" "${launcher[@]}"
  cmake --build "$work/build" -j"$jobs"
  cmake --install "$work/build" --prefix "$work/install" >/dev/null
  cmake -S examples/cmake_consumer -B "$work/consumer" \
    -DCMAKE_PREFIX_PATH="$work/install" "${launcher[@]}"
fi
cmake --build "$work/consumer" -j"$jobs"
# One LibTorch in the consumer: the one the package was built against, not
# a second one on the machine (Debian's under /usr beside the wheel's).
linked="$(ldd "$work/consumer/demo" | grep -E '/lib(c10|torch|torch_cpu)\.so' || true)"
echo "$linked"
if [ "$libtorch" != /usr ] &&
   echo "$linked" | grep -v -F "$(realpath "$libtorch")/lib/" | grep -q .; then
  echo "the consumer links a LibTorch other than $libtorch"
  exit 1
fi
"$work/consumer/demo"
