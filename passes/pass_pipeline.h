// PassPipeline: a named list of passes with their options, as data (MLIR's
// pass pipelines, torch.fx's PassManager lists). Printed and parsed as
//
//   decompose_attention,remove_dropout,fuse_conv_bn,lower_onednn{bf16=true}
//
// (a pass name, then its options in braces, comma-separated), the text
// `fx passes` lists and `fx opt --passes=...` / `fx trace --passes=...`
// take. fx::PassManager runs one, step by step, linting after each step.
//
// Libraries register the pipelines they define (lowering/ registers
// optimize_for_inference when it is linked), as passes register in
// passes/registry.h.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "passes/pass.h"

namespace fx {

struct PassStep {
  std::string pass;     // a registered pass's name
  PassOptions options;  // its options, in the order written
  bool operator==(const PassStep& other) const {
    return pass == other.pass && options == other.options;
  }
};

struct PassPipeline {
  std::string name;
  std::string description;
  std::vector<PassStep> steps;
};

// `steps` as text: "a,b{x=1,y=true},c". Byte-identical for equal steps.
std::string to_string(const std::vector<PassStep>& steps);
// One step as text: "b{x=1,y=true}".
std::ostream& operator<<(std::ostream& os, const PassStep& step);

// Text as to_string writes it (spaces around names and values allowed)
// into steps; throws fx::GraphError naming what is malformed (an empty
// name, an unclosed brace, an option without a value). Pass names and
// options are not checked here: make_pass (passes/registry.h) checks them.
std::vector<PassStep> parse_pass_pipeline(const std::string& text);

// Every registered pipeline, in registration order.
std::vector<PassPipeline> registered_pass_pipelines();

// Adds a named pipeline; throws fx::GraphError when the name is taken.
void register_pass_pipeline(PassPipeline pipeline);

// The pipeline named `name`, if one is registered.
std::optional<PassPipeline> pass_pipeline_named(const std::string& name);

}  // namespace fx
