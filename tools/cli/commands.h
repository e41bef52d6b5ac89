// The commands of the fx tool, one file each; main.cc lists them in this
// order for `fx help`.
#pragma once

#include <memory>

#include "tools/cli/command.h"

namespace cli {

std::unique_ptr<Command> make_demo();             // demo.cc
std::unique_ptr<Command> make_zoo();              // zoo.cc
std::unique_ptr<Command> make_passes();           // passes.cc
std::unique_ptr<Command> make_trace();            // trace.cc
std::unique_ptr<Command> make_opt();              // opt.cc
std::unique_ptr<Command> make_quantize();         // quantize.cc
std::unique_ptr<Command> make_branches();         // branches.cc
std::unique_ptr<Command> make_pipeline_split();   // pipeline.cc
std::unique_ptr<Command> make_pipeline_serve();   // pipeline.cc
std::unique_ptr<Command> make_pipeline_run();     // pipeline.cc

}  // namespace cli
