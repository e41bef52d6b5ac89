// Internal to the tracer: the traced program's own frames, for errors.
#pragma once

#include <string>

namespace fx {
namespace internal {

// The traced program's own C++ frames at this point, innermost first, for
// an error (only on the error path: a backtrace costs milliseconds): the
// frames between the dispatcher's entry (at::_ops, c10::Dispatcher) and the
// tracer's call of forward. Functions of the program's executable are named
// only when it is linked with -rdynamic; libtorch's (torch::nn modules) are.
// Empty when there are none; otherwise a paragraph to append to a message.
std::string user_frames();

}  // namespace internal
}  // namespace fx
