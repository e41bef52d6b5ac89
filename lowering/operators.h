// The fx_onednn operators as the rest of the project reads them: their
// declarations (lowering/operators.def: name, schema, price, docs) as a
// table, and typed readers of the calls other code takes apart (by
// argument name, through the schema: no code reads a lowered call's
// arguments by position).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fx/ir/argument.h"
#include "fx/ir/node.h"

namespace fx::onednn {

struct OperatorDeclaration {
  std::string name;       // "fx_onednn::conv"
  std::string schema;
  // Run in init steps only (packing weights): neither priced nor exported.
  bool init_step = false;
  // The aten operator whose price a call takes; "" for one priced by a
  // function of its own (conv_chain's) or an init step's.
  std::string priced_as;
  // passes/operator_families.h's traits (its family: kLowered).
  uint32_t traits = 0;
};
// operators.def's, in its order.
const std::vector<OperatorDeclaration>& operator_declarations();

// A call of fx_onednn::conv or conv_add_.
struct ConvCall {
  bool in_place = false;  // conv_add_
  Argument input, weight, bias;
  // conv's `other` (None: no residual), conv_add_'s `self`.
  Argument residual;
  Argument stride, padding, dilation, groups;
  std::string activation = "none";
  Argument alpha, beta;
};
std::optional<ConvCall> conv_call(const Node& n);

// A layer of a call of fx_onednn::conv_chain.
struct ConvChainLayer {
  Argument weight, bias;
  int64_t stride = 1, padding = 0, groups = 1;
  // The chain's value the layer adds its result into in place: -1 for
  // none, i >= 1 layer i - 1's output (the chain's input, value 0, never).
  int64_t adds_into = -1;
  std::string activation = "none";
  Argument alpha, beta;
};
// The layers of `call`; nullopt when it is not a conv_chain call or its
// lists do not hold one layer each.
std::optional<std::vector<ConvChainLayer>> conv_chain_layers(const Node& call);
// conv_chain's arguments for `layers` on `input`: conv_chain_layers'
// inverse.
std::vector<Argument> conv_chain_arguments(
    const Argument& input, const std::vector<ConvChainLayer>& layers);

}  // namespace fx::onednn
