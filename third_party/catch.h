// Catch2 for tests that use LibTorch.
//
// Debian's libtorch logs through glog, whose CHECK macro (pulled in by c10's
// headers) clashes with Catch2's. This header includes c10's logging first,
// drops glog's CHECK and then includes Catch2, so CHECK means Catch2's.
// Include it after every LibTorch header of the test.
#pragma once

#include <c10/util/Logging.h>
#undef CHECK
#include <catch2/catch.hpp>
