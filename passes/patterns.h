// Patterns: the operator shapes that the inference lowering
// (optimize_for_inference), quantization (prepare_fx, convert_fx,
// quantize_dynamic_fx) and conv/batch-norm folding (fuse_conv_bn) rewrite,
// declared once and matched once. As torch.ao's BackendConfig, each
// fusion is data (a root operator and the operators after it) and each
// consumer names the fusions it takes; as MLIR's rewrite patterns, the
// matching of each operator lives in one place.
//
// A fusion's nodes after its root are each the only user of the node
// before and read it as their input:
//
//   before (the graph):
//       %conv2d = call_function[target=aten::conv2d](args = (%x, %conv_weight, %conv_bias, [1, 1], [1, 1]))
//       %add = call_function[target=aten::add.Tensor](args = (%conv2d, %y))
//       %relu = call_function[target=aten::relu](args = (%add,))
//   after (match_fusion(module, conv2d, {Fusion::kConvAddActivation,
//   Fusion::kConv}), printed by to_string):
//       %conv2d: conv_add_activation [%conv2d, %add, %relu]
//         convolution: input %x, weight %conv_weight, bias %conv_bias, stride [1, 1], padding [1, 1], dilation [1, 1], groups 1
//         residual: %y
//         activation: relu
//
// One rule for every consumer:
//   - A weight is a get_attr of a tensor attribute; a linear layer's may
//     be read through one aten::t (linear(x, t(w)) as addmm(b, x, t(w))).
//   - A constant (get_attr) is judged by the module's tensor, any other
//     value by its tensor metadata (Node::tensor_meta).
//   - Typed matching (PatternOptions::typed, the default) asks what the
//     consumers that compute need: a float32 CPU input of the rank the
//     operator takes, a float32 CPU weight, a bias that is None or a
//     float32 CPU tensor of one value per output channel, and geometry
//     (stride, padding, dilation, output padding, groups) of constant ints.
//   - addmm's alpha and beta, add's alpha, are the number 1 (int or float).
//   - Whether a bias must be a constant is the consumer's to say:
//     quantization packs it and folding rewrites it (both take get_attrs),
//     the lowering reads it as it runs.
//
// The next patterns (attention masks, layer norm) belong here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fx/runtime/graph_module.h"

namespace fx {

struct PatternOptions {
  // The operand checks above; off for a rewrite that only reads which
  // attributes a call uses (fuse_conv_bn, which runs on untyped graphs
  // too): then geometry lists are filled where they are constant ints.
  bool typed = true;
  // Operators (by name, as Node::is_call_to) that pass their first
  // argument on unchanged, looked through between a weight and the
  // operator reading it: quantization's observers.
  std::vector<std::string_view> look_through;
  // A batch_norm in training mode (training a constant True) matches
  // instead of one in inference mode: quantization-aware training's
  // conv/batch-norm blocks.
  bool batch_norm_training = false;
};

// --- Operators ----------------------------------------------------------------

// A weight as an operator reads it.
struct Weight {
  Node* use = nullptr;   // the operator's argument
  Node* t = nullptr;     // the aten::t between use and attr, if any
  Node* attr = nullptr;  // the get_attr
  // For a linear layer: attr is [in, out] (the layer computes
  // input @ attr: matmul and addmm of attr, linear of t(attr)); else
  // [out, in]. A convolution's is [out, in / groups, kernel...], a
  // transposed one's [in, out / groups, kernel...].
  bool transposed = false;
};

// aten::conv1d/2d/3d (and their padding="same" overloads, untyped only),
// aten::convolution and aten::_convolution (transposed or not),
// aten::conv_transpose1d/2d/3d.
struct Convolution {
  Node* node = nullptr;
  bool transposed = false;
  Node* input = nullptr;
  Weight weight;
  Node* bias = nullptr;  // nullptr: None
  int64_t spatial = 0;   // 1, 2 or 3: the weight's rank - 2
  // One value per spatial dimension ([1] given for [1, 1] expanded); a
  // convolution that is not transposed has an output_padding of zeros (or
  // no match). Untyped matching also takes padding="same" or "valid",
  // leaving `padding` empty.
  std::vector<int64_t> stride, padding, dilation, output_padding;
  int64_t groups = 1;
};
std::optional<Convolution> match_convolution(const GraphModuleImpl& module,
                                             Node& node,
                                             const PatternOptions& options = {});

// aten::linear(input, weight, bias), aten::addmm(bias, input, weight) with
// alpha = beta = 1, aten::matmul(input, weight) of a 2-d weight.
struct Linear {
  enum class Kind : uint8_t { kLinear, kAddmm, kMatmul };
  Node* node = nullptr;
  Kind kind = Kind::kLinear;
  Node* input = nullptr;
  Weight weight;
  Node* bias = nullptr;  // nullptr: None
};
std::optional<Linear> match_linear(const GraphModuleImpl& module, Node& node,
                                   const PatternOptions& options = {});

// aten::matmul or aten::bmm of two values of the same rank, 3 or more, that
// are not a linear layer's (match_linear: a constant 2-d weight), batch
// sizes equal or 1: attention's q @ k^T and weights @ v. Typed: float32
// CPU operands.
struct Matmul {
  Node* node = nullptr;
  Node* self = nullptr;
  Node* other = nullptr;
};
std::optional<Matmul> match_matmul(const GraphModuleImpl& module, Node& node,
                                   const PatternOptions& options = {});

// `node` as value * c or value / c of a constant number c (or a 0-d
// floating-point tensor attribute of `module`: a number TorchScript traced
// as a tensor constant): the factor (1 / c for a division), or nullopt.
std::optional<double> match_scale(const GraphModuleImpl& module, Node& node,
                                  const Node* value);

// aten::batch_norm in inference mode (training a constant False; True
// with PatternOptions::batch_norm_training) of
// running statistics that are attributes, and a weight and bias that are
// attributes or None. Typed: a float32 CPU input of rank 2 or more.
struct BatchNorm {
  Node* node = nullptr;
  Node* input = nullptr;
  Node* weight = nullptr;  // get_attrs; nullptr: None
  Node* bias = nullptr;
  Node* running_mean = nullptr;
  Node* running_var = nullptr;
  double eps = 0;
};
std::optional<BatchNorm> match_batch_norm(const GraphModuleImpl& module,
                                          Node& node,
                                          const PatternOptions& options = {});

// An activation of `input` (its first argument), in place or not:
//   kRelu       relu
//   kLeakyRelu  leaky_relu            alpha: the negative slope
//   kClamp      hardtanh, relu6, clamp (constant bounds)   alpha, beta: min, max
//   kHardswish, kHardsigmoid, kSilu, kSigmoid, kTanh
//   kGelu       gelu, approximate="none";  kGeluTanh: approximate="tanh"
struct Activation {
  enum class Kind : uint8_t {
    kRelu, kLeakyRelu, kClamp, kHardswish, kSilu, kSigmoid, kTanh, kGelu,
    kGeluTanh, kHardsigmoid,
  };
  Node* node = nullptr;
  Kind kind = Kind::kRelu;
  double alpha = 0, beta = 0;
};
std::optional<Activation> match_activation(Node& node, const Node* input);
// "relu", "leaky_relu", "clamp", ..., "gelu_tanh", "hardsigmoid".
const char* activation_name(Activation::Kind kind);

// `node` as value + residual (aten::add.Tensor or add_.Tensor, alpha 1; an
// in-place add must write into `value`): the residual, a float32 CPU
// tensor of value's sizes (as the sum's), or nullptr.
Node* match_residual_add(Node& node, const Node* value);

// aten::lstm.input and aten::gru.input (nn.LSTM, nn.GRU, the C++
// frontend's LSTM and GRU), their arguments decoded once:
//   %lstm = call_function[target=aten::lstm.input](args = (%x, [%h0, %c0], [%w_ih, %w_hh, %b_ih, %b_hh], True, 1, 0.0, False, False, True))
// matches (match_fusion(module, lstm, {Fusion::kRecurrent}), printed):
//   %lstm: recurrent [%lstm]
//     lstm: input %x, states [%h0, %c0], layers 1, directions 1, biases, batch_first
//       parameters [%w_ih, %w_hh, %b_ih, %b_hh]
// The layer counts and switches are constants (num_layers an int;
// has_biases, train, bidirectional and batch_first bools); the
// parameters get_attrs of tensor attributes, 4 per layer and direction
// with biases and 2 without (projections, proj_size, add a fifth: no
// match); the state an LSTM's (h0, c0) or a GRU's h0, nodes. Typed: a
// float32 CPU input of rank 3, float32 CPU states and parameters.
struct Recurrent {
  enum class Kind : uint8_t { kLstm, kGru };
  const Node* node = nullptr;
  Kind kind = Kind::kLstm;
  Node* input = nullptr;
  Argument hx;                // as the call passes it
  std::vector<Node*> states;  // h0 (and c0)
  // Per layer and direction in aten's order (layer 0's forward direction
  // first): w_ih, w_hh and, with biases, b_ih, b_hh.
  std::vector<Node*> params;
  int64_t layers = 1;
  bool has_biases = true;
  bool train = false;
  bool bidirectional = false;
  bool batch_first = false;
  Argument dropout;  // as the call passes it

  int64_t directions() const { return bidirectional ? 2 : 1; }
  size_t params_per_layer() const { return has_biases ? 4 : 2; }
};
std::optional<Recurrent> match_recurrent(const GraphModuleImpl& module,
                                         const Node& node,
                                         const PatternOptions& options = {});

// --- Fusions ------------------------------------------------------------------

// What a node of a fusion pattern is.
enum class PatternOp : uint8_t {
  kConvolution,            // match_convolution, not transposed
  kTransposedConvolution,  // match_convolution, transposed
  kLinear,                 // match_linear
  kMatmul,                 // match_matmul
  kBatchNorm,              // match_batch_norm
  kAdd,                    // a + b (alpha 1) of two float32 CPU tensors
  kMul,                    // a * b of two float32 CPU tensors
  kCat,                    // cat of float32 CPU tensors, a constant dim
  kHardswish,              // hardswish of a float32 CPU tensor
  kResidualAdd,            // after a root: match_residual_add
  kRelu,                   // after a root: relu or relu_
  kActivation,             // after a root: match_activation
  kScale,                  // after a root: match_scale
  kRecurrent,              // match_recurrent
};

// Every fusion pattern; the table in patterns.cc says what each is made of.
enum class Fusion : uint8_t {
  kConv,
  kConvRelu,
  kConvActivation,
  kConvAdd,
  kConvAddActivation,
  kConvBatchNorm,
  kConvTranspose,
  kConvTransposeActivation,
  kConvTransposeBatchNorm,
  kLinear,
  kLinearRelu,
  kLinearActivation,
  kLinearAdd,
  kLinearBatchNorm,
  kMatmul,
  kMatmulScale,
  kBatchNorm,
  kBatchNormRelu,
  kAdd,
  kAddRelu,
  kMul,
  kMulRelu,
  kCat,
  kHardswish,
  kRecurrent,
};

struct FusionPattern {
  Fusion fusion;
  std::string_view name;       // "conv_add_activation"
  std::vector<PatternOp> ops;  // the root first
};
const FusionPattern& fusion_pattern(Fusion fusion);
// By name ("conv_relu"); nullopt for none.
std::optional<Fusion> fusion_named(std::string_view name);

struct FusionMatch {
  Fusion fusion;
  std::vector<Node*> nodes;  // one per op of the pattern, the root first
  // What the root's op reads (the one of these its op has).
  std::optional<Convolution> convolution;
  std::optional<Linear> linear;
  std::optional<Matmul> matmul;
  std::optional<BatchNorm> batch_norm;  // a batch_norm root, or after one
  std::optional<Recurrent> recurrent;
  std::vector<Node*> inputs;            // kAdd, kMul, kCat, kHardswish
  int64_t cat_dim = 0;                  // kCat
  // What the ops after it read.
  Node* residual = nullptr;               // kResidualAdd
  std::optional<Activation> activation;  // kRelu, kActivation
  double scale = 1;                      // kScale

  Node* root() const { return nodes.front(); }
  Node* output() const { return nodes.back(); }
};

// The first of `fusions`, in the given order, whose pattern matches at
// `root` (a consumer lists longer fusions before their prefixes), or
// nullopt.
std::optional<FusionMatch> match_fusion(const GraphModuleImpl& module,
                                        Node& root,
                                        const std::vector<Fusion>& fusions,
                                        const PatternOptions& options = {});

// The match as the golden tests print it (see the top of this file).
std::string to_string(const FusionMatch& match);

// --- Arguments ------------------------------------------------------------------

// An int list argument expanded to `n` values (int[2] stride=1 may be
// given as 1 or [1]); nullopt when it is not a constant list of ints.
std::optional<std::vector<int64_t>> constant_ints(const Argument& argument,
                                                  size_t n);
// A constant int or float as a double; nullopt otherwise.
std::optional<double> constant_number(const std::optional<Argument>& argument);
// Whether `meta` (may be null) is a float32 CPU tensor's.
bool float32_cpu(const TensorMeta* meta);
// `node` as an argument: None for nullptr (a bias that is None).
inline Argument argument_or_none(Node* node) {
  return node == nullptr ? Argument() : Argument(node);
}

}  // namespace fx
