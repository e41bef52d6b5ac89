#include "lowering/operators.h"

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "fx/ir/operator_schemas.h"
#include "passes/operator_families.h"

namespace fx::onednn {

const std::vector<OperatorDeclaration>& operator_declarations() {
  static const auto* declarations = new std::vector<OperatorDeclaration>{
#define FX_INIT_STEP true, ""
#define FX_PRICED_AS(aten) false, aten
#define FX_PRICED_BY(function) false, ""
#define FX_ONEDNN_OPERATOR(name, schema, cost, traits) \
  {"fx_onednn::" #name, schema, cost, traits},
#include "lowering/operators.def"
#undef FX_ONEDNN_OPERATOR
#undef FX_PRICED_BY
#undef FX_PRICED_AS
#undef FX_INIT_STEP
  };
  return *declarations;
}

namespace {
// Each operator's traits, in the table of operator families.
[[maybe_unused]] const bool registered = [] {
  for (const OperatorDeclaration& op : operator_declarations()) {
    register_operator_family(op.name, OperatorFamily::kLowered, op.traits);
  }
  return true;
}();
}  // namespace

std::optional<ConvCall> conv_call(const Node& n) {
  const bool in_place = n.is_call_to({"fx_onednn::conv_add_"});
  if (!in_place && !n.is_call_to({"fx_onednn::conv"})) return std::nullopt;
  const CallArguments arg(n);
  ConvCall c;
  c.in_place = in_place;
  c.input = arg["input"];
  c.weight = arg["weight"];
  c.bias = arg["bias"];
  c.residual = arg[in_place ? "self" : "other"];
  c.stride = arg["stride"];
  c.padding = arg["padding"];
  c.dilation = arg["dilation"];
  c.groups = arg["groups"];
  const Argument activation = arg["activation"];
  if (!activation.is_string()) return std::nullopt;
  c.activation = activation.to_string_ref();
  c.alpha = arg["alpha"];
  c.beta = arg["beta"];
  return c;
}

std::optional<std::vector<ConvChainLayer>> conv_chain_layers(
    const Node& call) {
  if (!call.is_call_to({"fx_onednn::conv_chain"})) return std::nullopt;
  const CallArguments arg(call);
  const Argument weights = arg["weights"], biases = arg["biases"],
                 layers = arg["layers"], params = arg["params"],
                 activations = arg["activations"];
  if (!weights.is_sequence() || !biases.is_sequence() ||
      !layers.is_list() || !params.is_sequence() ||
      !activations.is_string()) {
    return std::nullopt;
  }
  const size_t n = weights.elements().size();
  const std::vector<int64_t> ints = layers.to_int_list();
  const std::vector<std::string> names =
      absl::StrSplit(activations.to_string_ref(), ',');
  if (n == 0 || biases.elements().size() != n || ints.size() != 4 * n ||
      params.elements().size() != 2 * n || names.size() != n) {
    return std::nullopt;
  }
  std::vector<ConvChainLayer> out(n);
  for (size_t i = 0; i < n; ++i) {
    ConvChainLayer& layer = out[i];
    layer.weight = weights.elements()[i];
    layer.bias = biases.elements()[i];
    layer.stride = ints[4 * i];
    layer.padding = ints[4 * i + 1];
    layer.groups = ints[4 * i + 2];
    layer.adds_into = ints[4 * i + 3];
    layer.activation = names[i];
    layer.alpha = params.elements()[2 * i];
    layer.beta = params.elements()[2 * i + 1];
  }
  return out;
}

std::vector<Argument> conv_chain_arguments(
    const Argument& input, const std::vector<ConvChainLayer>& layers) {
  std::vector<Argument> weights, biases, params;
  std::vector<int64_t> ints;
  std::vector<std::string> activations;
  for (const ConvChainLayer& layer : layers) {
    weights.push_back(layer.weight);
    biases.push_back(layer.bias);
    ints.insert(ints.end(),
                {layer.stride, layer.padding, layer.groups, layer.adds_into});
    activations.push_back(layer.activation);
    params.push_back(layer.alpha);
    params.push_back(layer.beta);
  }
  return {input,
          Argument::list(std::move(weights)),
          Argument::list(std::move(biases)),
          Argument(ints),
          absl::StrJoin(activations, ","),
          Argument::list(std::move(params))};
}

}  // namespace fx::onednn
