#!/usr/bin/env bash
# Checks that CMake (CMakeLists.txt) and Bazel (the BUILD files) build the
# libraries from the same sources: CMake's rule (every .cc of a layer's
# folder and its subfolders but the tests), as CMake itself lists it when it
# configures, against the srcs of the non-testonly cc_library targets of
# //fx/... (fx/ and its layers' packages), //interpreter, //passes,
# //lowering, //quantization, //scheduling, //codegen and //onnx. Prints the
# difference and exits 1 if they differ.
set -euo pipefail
cd "$(dirname "$0")/.."

build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT
cmake -S . -B "$build" >"$build.log" 2>&1 || { cat "$build.log"; rm -f "$build.log"; exit 1; }
rm -f "$build.log"
sort "$build/fx_libtorch_sources.txt" | grep . >"$build/cmake.txt"

bazel query --noshow_progress \
  'kind("source file", labels(srcs, attr(testonly, 0, kind(cc_library, //fx/...:* + //interpreter:* + //passes:* + //lowering:* + //quantization:* + //scheduling:* + //codegen:* + //onnx:*))))' \
  2>/dev/null | sed -E 's#^//##; s#:#/#' | grep -E '\.cc$' | sort >"$build/bazel.txt"

if ! diff -u "$build/bazel.txt" "$build/cmake.txt"; then
  echo "CMake's sources (+) differ from Bazel's (-): keep every library source" \
       "of a folder in its BUILD file, and tests in *_test.cc" >&2
  exit 1
fi
echo "CMake and Bazel build the same $(wc -l <"$build/cmake.txt") sources"
