// The headers nearly every source of this repository parses, precompiled
// once per configuration (third_party/pch/defs.bzl) and included first
// into each of our C++ sources (gcc: -include, clang: -include-pch):
// libtorch's tensor library and module base, which take most of a compile
// here (5-6 s of a 6 s pass). Only third-party headers belong here: a
// source still includes what it uses (the CMake build, which compiles
// without this, checks).
#ifndef FX_THIRD_PARTY_PCH_LIBTORCH_HEADERS_H_
#define FX_THIRD_PARTY_PCH_LIBTORCH_HEADERS_H_

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#endif  // FX_THIRD_PARTY_PCH_LIBTORCH_HEADERS_H_
