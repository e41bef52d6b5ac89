// Errors raised by the public API of fx for LibTorch.
//
// Every recoverable, user-caused failure (code that cannot be traced, a bad
// graph edit, an input that breaks a trace guard, a failing node at run time)
// is reported as a subclass of fx::Error. fx::Error derives from c10::Error,
// so code that already catches LibTorch errors keeps working; what() carries a
// message meant for the user (what went wrong, where, and what to do) and no
// C++ backtrace.
#pragma once

#include <string>

#include <c10/util/Exception.h>

#include "fx/ir/libtorch_compat.h"

namespace fx {

class Error : public c10::Error {
 public:
  explicit Error(std::string message)
      : c10::Error(std::move(message), compat::no_backtrace()) {}
  // The message alone (c10::Error's what() would end it with a newline
  // where the backtrace goes).
  const char* what() const noexcept override { return msg().c_str(); }
};

// A program could not be traced: data-dependent control flow or values, an
// operator whose output shape depends on data, a proxy used after its trace
// ended, or an operator that failed on the example inputs' shapes.
class TraceError : public Error {
 public:
  using Error::Error;
};

// A graph is malformed or an edit would make it so (erasing a node that still
// has users, a node of another graph used as an argument, an unknown
// operator name, a lint failure).
class GraphError : public Error {
 public:
  using Error::Error;
};

// Text given to fx::parse_graph (or a file given to fx::load) is not a valid
// graph. line() and column() (1-based) locate the first problem; the message
// starts with them and quotes the offending line.
class ParseError : public GraphError {
 public:
  ParseError(std::string message, int line, int column)
      : GraphError(std::move(message)), line_(line), column_(column) {}
  int line() const { return line_; }
  int column() const { return column_; }

 private:
  int line_;
  int column_;
};

// An input given to a GraphModule does not satisfy what the trace assumed
// (dtype, device, rank, or sizes the traced program read).
class GuardError : public Error {
 public:
  using Error::Error;
};

// A node failed while a GraphModule or Interpreter was running it; the message
// names the node ("While executing %conv2d_3 = ...").
class ExecutionError : public Error {
 public:
  using Error::Error;
};

}  // namespace fx
