// ONNX out: a GraphModule as an ONNX model (torch.onnx.export's C++
// counterpart), so that a LibTorch model reaches ONNX Runtime, TensorRT and
// OpenVINO without Python.
//
//   fx::GraphModule gm = fx::symbolic_trace(model, torch::randn({1, 3, 224, 224}));
//   fx::to_onnx(*gm, "model.onnx");
//
//   before (the graph):
//       %x : [#users=1] = placeholder[target=x]
//       %fc_weight : [#users=1] = get_attr[target=fc.weight]
//       %fc_bias : [#users=1] = get_attr[target=fc.bias]
//       %linear : [#users=1] = call_function[target=aten::linear](args = (%x, %fc_weight, %fc_bias), kwargs = {})
//       %relu : [#users=1] = call_function[target=aten::relu](args = (%linear,), kwargs = {})
//       return relu
//   after (the ONNX graph, opset 17):
//       inputs: x float[2, 4]    initializers: fc.weight float[3, 4], fc.bias float[3]
//       linear = Gemm(x, fc.weight, fc.bias, transB=1)
//       relu = Relu(linear)
//       outputs: output float[2, 3]
//
// The model: ONNX IR version 8, opset 17 (the newest Debian's ONNX 1.12
// checks; ONNX Runtime, TensorRT and OpenVINO all read it); parameters,
// buffers and constants as initializers named by their attribute paths;
// inputs named after the placeholders; outputs "output" for one tensor,
// "output_0", "output_1", ... for a tuple (nested: "output_1_0"),
// "output_KEY" for a dict's (segmentation models' "output_out"). Each ONNX
// node is named after the graph node it comes from. Shapes are the example
// input's (the graph is specialized to them, as its guards say), but for
// a graph's dynamic dimensions (TraceOptions::dynamic): symbolic in the
// inputs (dim_param), the sizes computed in the model (docs/onnx.md). Before
// anything is written, ONNX's checker runs with full shape inference
// (check_model, then InferShapes with type checks and node errors on), and
// the inferred output shapes must be the GraphModule's.
//
// What maps: the aten operators of convolution nets, MLPs, embeddings and
// attention (convolutions, batch norm, layer norm, pooling, linear layers,
// matmuls, softmax, activations, elementwise arithmetic, reductions,
// reshapes, transposes, concatenation, chunk and split, masks and where,
// comparisons, casts, gathers, LSTM and GRU layers, dropout in eval mode,
// ...): onnx/operators.cc lists them (int8_operators.cc and
// lowered_operators.cc beside it). Int8 modules (convert_fx) export in
// QDQ form: quantized::conv2d, linear, add, mul, cat and hardswish as the
// float operator between DequantizeLinear and QuantizeLinear, int8
// weights, int32 biases. Anything else (an operator
// without a mapping, a leaf module, a wrapped function, a call_method) is
// refused with fx::GraphError naming the node, its target and the module
// it came from, and nothing is written; register_onnx_mapping adds a
// mapping for an operator or wrapped function of your own.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/core/ivalue.h>

#include "fx/runtime/graph_module.h"
#include "passes/pass_pipeline.h"

namespace onnx {
class GraphProto;
class NodeProto;
}  // namespace onnx

namespace fx {

struct OnnxOptions {
  // The default domain's opset. 17 is the newest Debian's ONNX 1.12
  // checks; no other is supported yet.
  int64_t opset = 17;
  // Fold what depends only on weights first, as torch.onnx's
  // do_constant_folding does: on a copy of the module, batch norms into the
  // convolutions and linear layers before them (fuse_conv_bn), then
  // fold_constants and eliminate_dead_code. False: the graph as it is.
  bool fold = true;
};

// The passes run on a copy of `module` before it is written, as a pipeline
// (passes/pass_pipeline.h), each linted after it runs:
//   decompose_attention        when the graph holds PyTorch's fused
//                              transformer ops (as their parts, which map);
//   specialize_sizes           when it computes sizes from its inputs and
//                              has no dynamic dimension (sizes written as the
//                              example's, as torch.onnx writes fixed shapes);
//   fuse_conv_bn, fold_constants{writes=true}, eliminate_dead_code
//                              with OnnxOptions::fold, on a graph not traced
//                              in training mode.
// The pipeline "to_onnx" (`fx passes`) is the one for an eval-mode graph
// with all three.
PassPipeline onnx_export_pipeline(const GraphModuleImpl& module,
                                  const OnnxOptions& options = {});

// Writes `module` as an ONNX model. Throws fx::GraphError (see above) and
// writes nothing when a node does not map or the checker refuses the model.
void to_onnx(const GraphModuleImpl& module, const std::string& path,
             const OnnxOptions& options = {});
void to_onnx(const GraphModuleImpl& module, std::ostream& out,
             const OnnxOptions& options = {});
// The serialized ModelProto.
std::string to_onnx_string(const GraphModuleImpl& module,
                           const OnnxOptions& options = {});

// What a mapping writes with: the ONNX graph being built, and the names of
// the values of the fx graph's nodes and constants.
class OnnxBuilder {
 public:
  virtual ~OnnxBuilder() = default;
  // The ONNX value of an argument: a node's value, or a constant (int,
  // double, bool, int list) as an initializer of the given element type
  // (an ONNX TensorProto::DataType; 0: the argument's own type).
  virtual std::string value(const Argument& argument, int32_t element_type = 0) = 0;
  // A new initializer of int64 values (shapes, axes, pads) of rank 1, or of
  // rank 0 for `scalar`.
  virtual std::string int64s(const std::vector<int64_t>& values,
                             bool scalar = false) = 0;
  // An initializer holding `tensor` (a copy of its values), named after
  // `base`.
  virtual std::string tensor(const std::string& base, const at::Tensor& tensor) = 0;
  // The tensor an argument reads when it is a get_attr of a tensor
  // attribute (a weight a mapping must rearrange); nullopt otherwise.
  virtual std::optional<at::Tensor> constant(const Argument& argument) = 0;
  // The script object an argument reads when it is a get_attr of one (a
  // quantized layer's packed weights); nullopt otherwise.
  virtual std::optional<c10::IValue> object(const Argument& argument) = 0;

  // Int8 graphs are exported in ONNX's QDQ form: a quantized value is the
  // uint8 or int8 output of a QuantizeLinear, and each operator runs in
  // float32 between a DequantizeLinear of its inputs and a QuantizeLinear
  // of its output, which ONNX Runtime and TensorRT fuse into int8 kernels.
  struct QParams {
    double scale = 1;
    int64_t zero_point = 0;
    bool is_signed = false;  // qint8 (else quint8)
  };
  // The quantization of a quantized value; nullopt for any other.
  virtual std::optional<QParams> qparams(const Argument& argument) = 0;
  // A quantized value as float32 (its DequantizeLinear, made once).
  virtual std::string dequantized(const Argument& argument) = 0;
  // Quantizes `value` (float32) into output() with `qparams`, which the
  // node's value then carries.
  virtual void quantize_output(const std::string& value, const QParams& qparams) = 0;
  // Initializers of a QuantizeLinear / DequantizeLinear's scale and zero
  // point (per tensor, or one per channel).
  virtual std::string scales(const std::vector<double>& scales) = 0;
  virtual std::string zero_points(const std::vector<int64_t>& zero_points,
                                  bool is_signed) = 0;

  // A float32 initializer (rank 0 for one value and `scalar`).
  virtual std::string floats(const std::vector<float>& values,
                             bool scalar = false) = 0;
  // Appends an ONNX node of `op_type` with these inputs ("" for an absent
  // optional one) and one new output, returned; `node` names it.
  virtual onnx::NodeProto& add(const std::string& op_type,
                               const std::vector<std::string>& inputs,
                               const std::string& output) = 0;
  // The same with several outputs (the op's outputs, in order).
  virtual onnx::NodeProto& add(const std::string& op_type,
                               const std::vector<std::string>& inputs,
                               const std::vector<std::string>& outputs) = 0;
  // For a node whose value is a tuple or list of tensors (aten::chunk,
  // say): the ONNX values of its elements, which getitem nodes then read,
  // instead of one value named output().
  virtual void set_outputs(std::vector<std::string> elements) = 0;
  // A fresh value name derived from `base`.
  virtual std::string fresh(std::string_view base) = 0;
  // A graph with dynamic dimensions (TraceOptions::dynamic) is exported
  // with them: whether dimension `dim` of `node`'s value varies from run to
  // run, its size in the tensor metadata being only the example's. A
  // mapping needing a size reads one that does not vary, or refuses.
  virtual bool varies(const Node& node, int64_t dim) const = 0;
  // The module being exported, and the fx node of it being exported.
  virtual const GraphModuleImpl& module() const = 0;
  virtual const Node& node() const = 0;
  // Its output value's name (what the mapping must produce).
  virtual const std::string& output() const = 0;
};

// Writes the ONNX nodes computing `node`'s value into `builder`, the last
// of them producing builder.output().
using OnnxMapping = std::function<void(OnnxBuilder& builder)>;

// Adds (or replaces) the mapping of an operator ("aten::gelu",
// "my_ops::fused_gate") or a wrapped function (its registered name).
void register_onnx_mapping(const std::string& target, OnnxMapping mapping);
// Whether `target` maps: a mapping is registered for it, or for its
// functional form when it is an in-place operator ("aten::relu_" maps as
// "aten::relu", where nothing reads the written input afterwards).
bool has_onnx_mapping(const std::string& target);

}  // namespace fx
