#include "fx/trace/internal/shape_inference.h"

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <ATen/ATen.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/csrc/jit/runtime/symbolic_shape_registry.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "fx/ir/libtorch_compat.h"
#include "fx/trace/internal/proxy.h"

namespace fx {
namespace internal {
namespace {

using Outputs = std::vector<InferredOutput>;
using Rule = Outputs (*)(const std::vector<c10::IValue>& args);

InferredOutput tensor_output(TensorMeta meta) {
  InferredOutput out;
  out.kind = InferredOutput::Kind::kTensor;
  out.tensor = std::move(meta);
  return out;
}

TensorMeta make_meta(std::vector<int64_t> sizes, c10::ScalarType dtype,
                     c10::Device device, c10::MemoryFormat format) {
  TensorMeta m;
  m.strides = strides_for(sizes, format);
  m.sizes = std::move(sizes);
  m.dtype = dtype;
  m.device = device;
  m.memory_format = memory_format_of(m.sizes, m.strides);
  return m;
}

// The memory format an operator keeps for its output, as
// Tensor::suggest_memory_format does.
c10::MemoryFormat suggested_format(const TensorMeta& m) {
  if (m.sizes.size() == 4 && m.memory_format == c10::MemoryFormat::ChannelsLast) {
    return c10::MemoryFormat::ChannelsLast;
  }
  if (m.sizes.size() == 5 &&
      m.memory_format == c10::MemoryFormat::ChannelsLast3d) {
    return c10::MemoryFormat::ChannelsLast3d;
  }
  return c10::MemoryFormat::Contiguous;
}

TensorMeta meta_arg(const std::vector<c10::IValue>& args, size_t i) {
  return tensor_meta_of(args.at(i).toTensor());
}

// Elementwise ops through TensorIterator keep a dense input's strides.
Outputs same_layout_as_input(const std::vector<c10::IValue>& args) {
  TensorMeta in = meta_arg(args, 0);
  if (in.memory_format == c10::MemoryFormat::Preserve) {
    return {tensor_output(make_meta(in.sizes, in.dtype, in.device,
                                    c10::MemoryFormat::Contiguous))};
  }
  in.requires_grad = false;
  return {tensor_output(std::move(in))};
}

// Ops that allocate their output with empty_like(input, suggested format).
Outputs same_sizes_suggested_format(const std::vector<c10::IValue>& args) {
  TensorMeta in = meta_arg(args, 0);
  return {tensor_output(
      make_meta(in.sizes, in.dtype, in.device, suggested_format(in)))};
}

Outputs same_sizes_contiguous(const std::vector<c10::IValue>& args) {
  TensorMeta in = meta_arg(args, 0);
  return {tensor_output(make_meta(in.sizes, in.dtype, in.device,
                                  c10::MemoryFormat::Contiguous))};
}

std::vector<int64_t> expand_param(const c10::IValue& v, size_t n) {
  std::vector<int64_t> values = v.toIntVector();
  if (values.size() == 1) values.assign(n, values[0]);
  if (values.size() != n) {
    throw c10::Error(absl::StrCat("expected ", n,
                                  " values for a convolution parameter, got ",
                                  values.size()),
                     compat::no_backtrace());
  }
  return values;
}

struct ConvParams {
  std::vector<int64_t> stride, padding, dilation, output_padding;
  std::string padding_mode;  // "same", "valid" or "" (numeric)
  bool transposed = false;
  int64_t groups = 1;
};

Outputs conv_output(const std::vector<c10::IValue>& args,
                    const ConvParams& p) {
  TensorMeta input = meta_arg(args, 0);
  TensorMeta weight = meta_arg(args, 1);
  const size_t spatial = weight.sizes.size() - 2;
  const bool batched = input.sizes.size() == weight.sizes.size();
  std::vector<int64_t> sizes;
  sizes.reserve(weight.sizes.size());
  if (batched) sizes.push_back(input.sizes[0]);
  sizes.push_back(p.transposed ? weight.sizes[1] * p.groups : weight.sizes[0]);
  const size_t first = batched ? 2 : 1;
  for (size_t d = 0; d < spatial; ++d) {
    int64_t in = input.sizes.at(first + d);
    int64_t k = weight.sizes[2 + d];
    int64_t out;
    if (p.padding_mode == "same") {
      out = in;
    } else if (p.transposed) {
      out = (in - 1) * p.stride[d] - 2 * p.padding[d] +
            p.dilation[d] * (k - 1) + p.output_padding[d] + 1;
    } else {
      int64_t pad = p.padding_mode == "valid" ? 0 : p.padding[d];
      out = (in + 2 * pad - p.dilation[d] * (k - 1) - 1) / p.stride[d] + 1;
    }
    if (out <= 0) {
      throw c10::Error(
          absl::StrCat("convolution: the output would have size ", out,
                       " in spatial dimension ", d,
                       ": the input is too small for this kernel"),
          compat::no_backtrace());
    }
    sizes.push_back(out);
  }
  c10::MemoryFormat format = c10::MemoryFormat::Contiguous;
  if (batched && (input.memory_format == c10::MemoryFormat::ChannelsLast ||
                  weight.memory_format == c10::MemoryFormat::ChannelsLast) &&
      sizes.size() == 4) {
    format = c10::MemoryFormat::ChannelsLast;
  } else if (batched &&
             (input.memory_format == c10::MemoryFormat::ChannelsLast3d ||
              weight.memory_format == c10::MemoryFormat::ChannelsLast3d) &&
             sizes.size() == 5) {
    format = c10::MemoryFormat::ChannelsLast3d;
  }
  return {tensor_output(make_meta(std::move(sizes), input.dtype, input.device,
                                  format))};
}

size_t spatial_dims(const std::vector<c10::IValue>& args) {
  return args.at(1).toTensor().dim() - 2;
}

// aten::conv{1,2,3}d(input, weight, bias, stride, padding, dilation, groups)
// and their .padding overloads (padding a string).
Outputs conv_nd(const std::vector<c10::IValue>& args) {
  size_t n = spatial_dims(args);
  ConvParams p;
  p.stride = expand_param(args[3], n);
  if (args[4].isString()) {
    p.padding_mode = args[4].toStringRef();
    p.padding.assign(n, 0);
  } else {
    p.padding = expand_param(args[4], n);
  }
  p.dilation = expand_param(args[5], n);
  p.groups = args[6].toInt();
  return conv_output(args, p);
}

// aten::convolution / aten::_convolution(input, weight, bias, stride,
// padding, dilation, transposed, output_padding, groups, ...)
Outputs convolution(const std::vector<c10::IValue>& args) {
  size_t n = spatial_dims(args);
  ConvParams p;
  p.stride = expand_param(args[3], n);
  p.padding = expand_param(args[4], n);
  p.dilation = expand_param(args[5], n);
  p.transposed = args[6].toBool();
  p.output_padding = expand_param(args[7], n);
  p.groups = args[8].toInt();
  return conv_output(args, p);
}

// aten::conv_transpose{1,2,3}d.input(input, weight, bias, stride, padding,
// output_padding, groups, dilation)
Outputs conv_transpose(const std::vector<c10::IValue>& args) {
  size_t n = spatial_dims(args);
  ConvParams p;
  p.transposed = true;
  p.stride = expand_param(args[3], n);
  p.padding = expand_param(args[4], n);
  p.output_padding = expand_param(args[5], n);
  p.groups = args[6].toInt();
  p.dilation = expand_param(args[7], n);
  return conv_output(args, p);
}

// aten::adaptive_avg_pool{1,2,3}d(self, output_size)
Outputs adaptive_pool(const std::vector<c10::IValue>& args) {
  TensorMeta in = meta_arg(args, 0);
  std::vector<int64_t> out_size = args[1].toIntVector();
  if (in.sizes.size() < out_size.size()) {
    throw c10::Error("adaptive pooling: the input has too few dimensions",
                     compat::no_backtrace());
  }
  std::vector<int64_t> sizes(in.sizes.begin(),
                             in.sizes.end() - out_size.size());
  sizes.insert(sizes.end(), out_size.begin(), out_size.end());
  return {tensor_output(
      make_meta(std::move(sizes), in.dtype, in.device, suggested_format(in)))};
}

// aten::embedding(weight, indices, ...)
Outputs embedding(const std::vector<c10::IValue>& args) {
  TensorMeta weight = meta_arg(args, 0);
  TensorMeta indices = meta_arg(args, 1);
  std::vector<int64_t> sizes = indices.sizes;
  sizes.push_back(weight.sizes.at(1));
  return {tensor_output(make_meta(std::move(sizes), weight.dtype,
                                  weight.device,
                                  c10::MemoryFormat::Contiguous))};
}

// aten::native_layer_norm(input, normalized_shape, ...) -> (out, mean, rstd)
Outputs native_layer_norm(const std::vector<c10::IValue>& args) {
  TensorMeta in = meta_arg(args, 0);
  size_t normalized = args[1].toIntVector().size();
  std::vector<int64_t> stat_sizes(in.sizes.begin(),
                                  in.sizes.end() - normalized);
  stat_sizes.resize(in.sizes.size(), 1);
  return {tensor_output(make_meta(in.sizes, in.dtype, in.device,
                                  c10::MemoryFormat::Contiguous)),
          tensor_output(make_meta(stat_sizes, in.dtype, in.device,
                                  c10::MemoryFormat::Contiguous)),
          tensor_output(make_meta(stat_sizes, in.dtype, in.device,
                                  c10::MemoryFormat::Contiguous))};
}

at::Tensor to_meta_tensor(const at::Tensor& t);

// aten::where.self / .ScalarSelf / .ScalarOther / .Scalar(condition, self,
// other): the broadcast sizes, and the dtype of result_type(self, other), as
// ATen's where computes it (not the condition's).
Outputs where(const std::vector<c10::IValue>& args) {
  std::vector<int64_t> sizes = meta_arg(args, 0).sizes;
  for (size_t i = 1; i < 3; ++i) {
    if (args[i].isTensor()) {
      sizes = at::infer_size(sizes, args[i].toTensor().sizes());
    }
  }
  at::ScalarType dtype;
  const c10::IValue& a = args[1];
  const c10::IValue& b = args[2];
  if (a.isTensor() && b.isTensor()) {
    dtype = at::result_type(to_meta_tensor(a.toTensor()),
                            to_meta_tensor(b.toTensor()));
  } else if (a.isTensor()) {
    dtype = at::result_type(to_meta_tensor(a.toTensor()), b.toScalar());
  } else if (b.isTensor()) {
    dtype = at::result_type(a.toScalar(), to_meta_tensor(b.toTensor()));
  } else {
    dtype = at::result_type(a.toScalar(), b.toScalar());
  }
  return {tensor_output(make_meta(std::move(sizes), dtype,
                                  args[0].toTensor().device(),
                                  c10::MemoryFormat::Contiguous))};
}

// A rule's answer that the arguments are not its case: the tiers below
// infer them instead.
struct NotThisRule {};

// aten::index.Tensor(self, indices) of a contiguous self with int64 indices
// (masks are sizes that depend on data: fx/ir/data_dependent.h): advanced
// indexing's sizes, the indices' broadcast sizes in place of the dimensions
// they index (or first, if Nones separate them), contiguous. The values are
// not read: the real kernel on filled-in indices would check them against
// sizes a trace chose (a selection of size 0 indexed by another's values).
Outputs index_tensor(const std::vector<c10::IValue>& args) {
  TensorMeta self = meta_arg(args, 0);
  if (!args.at(1).isList()) throw NotThisRule();
  // The list as TorchScript or the dispatcher holds it (Tensor?[] or a
  // generic list): an undefined tensor for each None.
  std::vector<at::Tensor> indices;
  for (const c10::IValue& v : args[1].toListRef()) {
    if (!v.isNone() && !v.isTensor()) throw NotThisRule();
    indices.push_back(v.isTensor() ? v.toTensor() : at::Tensor());
  }
  // Indices of other dtypes are the kernel's to refuse (1.13) or take
  // (2.x); the output of a non-contiguous self keeps its strides' order.
  if (indices.size() > self.sizes.size() ||
      self.strides != strides_for(self.sizes, c10::MemoryFormat::Contiguous)) {
    throw NotThisRule();
  }
  std::vector<int64_t> broadcast;
  int64_t first = -1, last = -1;
  for (size_t i = 0; i < indices.size(); ++i) {
    if (!indices[i].defined()) continue;
    if (indices[i].scalar_type() != at::kLong) throw NotThisRule();
    broadcast = first < 0 ? indices[i].sizes().vec()
                          : at::infer_size(broadcast, indices[i].sizes());
    if (first < 0) first = static_cast<int64_t>(i);
    last = static_cast<int64_t>(i);
  }
  if (first < 0) throw NotThisRule();
  bool adjacent = true;
  for (int64_t i = first; i <= last; ++i) {
    adjacent = adjacent && indices[i].defined();
  }
  std::vector<int64_t> sizes;
  if (adjacent) {
    sizes.assign(self.sizes.begin(), self.sizes.begin() + first);
    sizes.insert(sizes.end(), broadcast.begin(), broadcast.end());
    sizes.insert(sizes.end(), self.sizes.begin() + last + 1, self.sizes.end());
  } else {
    sizes = broadcast;
    for (size_t i = 0; i < self.sizes.size(); ++i) {
      if (i >= indices.size() || !indices[i].defined()) {
        sizes.push_back(self.sizes[i]);
      }
    }
  }
  return {tensor_output(make_meta(std::move(sizes), self.dtype, self.device,
                                  c10::MemoryFormat::Contiguous))};
}

// torchvision::roi_align(input, rois, spatial_scale, pooled_height,
// pooled_width, sampling_ratio, aligned): [K, C, pooled_height,
// pooled_width] for K boxes. Its kernel reads the image each box's first
// column names without a bounds check: on filled-in values (not image
// numbers) it would read past the input, so it is never run for shapes.
Outputs roi_align(const std::vector<c10::IValue>& args) {
  TensorMeta in = meta_arg(args, 0);
  TensorMeta rois = meta_arg(args, 1);
  if (in.sizes.size() != 4 || rois.sizes.size() != 2 || rois.sizes[1] != 5) {
    throw c10::Error(
        "torchvision::roi_align takes a 4-dimensional input and boxes of "
        "size [K, 5]",
        compat::no_backtrace());
  }
  return {tensor_output(make_meta(
      {rois.sizes[0], in.sizes[1], args.at(3).toInt(), args.at(4).toInt()},
      in.dtype, in.device, c10::MemoryFormat::Contiguous))};
}

const absl::flat_hash_map<std::string, Rule>& rules() {
  static const auto* table = new absl::flat_hash_map<std::string, Rule>{
      // A check: no outputs, nothing to run while tracing.
      {"fx_guard::check_size",
       [](const std::vector<c10::IValue>&) {
         return std::vector<InferredOutput>();
       }},
      {"aten::relu", &same_layout_as_input},
      {"aten::relu6", &same_layout_as_input},
      {"aten::hardtanh", &same_layout_as_input},
      {"aten::hardswish", &same_layout_as_input},
      {"aten::conv1d", &conv_nd},
      {"aten::conv2d", &conv_nd},
      {"aten::conv3d", &conv_nd},
      {"aten::conv1d.padding", &conv_nd},
      {"aten::conv2d.padding", &conv_nd},
      {"aten::conv3d.padding", &conv_nd},
      {"aten::convolution", &convolution},
      {"aten::_convolution", &convolution},
      {"aten::conv_transpose1d", &conv_transpose},
      {"aten::conv_transpose2d.input", &conv_transpose},
      {"aten::conv_transpose3d.input", &conv_transpose},
      {"aten::batch_norm", &same_sizes_suggested_format},
      {"aten::instance_norm", &same_sizes_contiguous},
      {"aten::layer_norm", &same_sizes_contiguous},
      {"aten::group_norm", &same_sizes_suggested_format},
      {"aten::native_layer_norm", &native_layer_norm},
      {"aten::adaptive_avg_pool1d", &adaptive_pool},
      {"aten::adaptive_avg_pool2d", &adaptive_pool},
      {"aten::adaptive_avg_pool3d", &adaptive_pool},
      {"aten::_adaptive_avg_pool2d", &adaptive_pool},
      {"aten::_adaptive_avg_pool3d", &adaptive_pool},
      {"aten::embedding", &embedding},
      {"aten::where.self", &where},
      {"aten::where.ScalarSelf", &where},
      {"aten::where.ScalarOther", &where},
      {"aten::where.Scalar", &where},
      {"aten::index.Tensor", &index_tensor},
      {"torchvision::roi_align", &roi_align},
  };
  return *table;
}

std::string full_name(const c10::OperatorHandle& op) {
  const c10::OperatorName& name = op.operator_name();
  return name.overload_name.empty()
             ? name.name
             : absl::StrCat(name.name, ".", name.overload_name);
}

// What failed for an operator before, so that it is not tried again.
struct OperatorCache {
  bool no_meta = false;
  bool no_shape_function = false;
  std::shared_ptr<torch::jit::Code> shape_function;
};

std::mutex cache_mutex;

OperatorCache& cache_for(const c10::OperatorHandle& op) {
  static auto* caches =
      new absl::flat_hash_map<const c10::FunctionSchema*, OperatorCache>();
  return (*caches)[&op.schema()];
}

// The device outputs live on: the `device` argument, else the first tensor
// input's, else the CPU.
c10::Device output_device(const c10::FunctionSchema& schema,
                          const std::vector<c10::IValue>& args) {
  if (auto index = schema.argumentIndexWithName("device")) {
    if (static_cast<size_t>(*index) < args.size() && args[*index].isDevice()) {
      return args[*index].toDevice();
    }
  }
  for (const c10::IValue& a : args) {
    if (a.isTensor() && a.toTensor().defined()) return a.toTensor().device();
    if (a.isTensorList()) {
      for (const at::Tensor& t : a.toTensorVector()) {
        if (t.defined()) return t.device();
      }
    }
  }
  return c10::Device(c10::DeviceType::CPU);
}

Outputs outputs_from_stack(const c10::FunctionSchema& schema,
                           const std::vector<c10::IValue>& stack,
                           c10::Device device) {
  Outputs outs;
  for (const c10::IValue& v : stack) {
    InferredOutput out;
    if (v.isTensor() && !v.toTensor().defined()) {
      // No tensor (aten::_native_multi_head_attention's weights when not
      // asked for): none in the runs either, by the arguments, not data.
      out.kind = InferredOutput::Kind::kValue;
      out.value = v;
    } else if (v.isTensor()) {
      out.kind = InferredOutput::Kind::kTensor;
      out.tensor = tensor_meta_of(v.toTensor());
      out.tensor.device = device;
      out.tensor.requires_grad = false;
    } else if (v.isTensorList()) {
      out.kind = InferredOutput::Kind::kTensorList;
      for (const at::Tensor& t : v.toTensorVector()) {
        TensorMeta m = tensor_meta_of(t);
        m.device = device;
        m.requires_grad = false;
        out.tensors.push_back(std::move(m));
      }
    } else {
      out.kind = InferredOutput::Kind::kValue;
      out.value = v;
    }
    outs.push_back(std::move(out));
  }
  (void)schema;
  return outs;
}

// `value` with tensors converted by `convert` (also inside lists).
c10::IValue map_tensors(const c10::IValue& value,
                        const std::function<at::Tensor(const at::Tensor&)>&
                            convert) {
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    return t.defined() ? convert(t) : t;
  }
  if (value.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : value.toTensorVector()) {
      list.push_back(t.defined() ? convert(t) : t);
    }
    return list;
  }
  if (value.isList()) {
    c10::impl::GenericList list(value.toList().elementType());
    for (const c10::IValue& e : value.toListRef()) {
      list.push_back(map_tensors(e, convert));
    }
    return list;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> elems;
    for (const c10::IValue& e : value.toTupleRef().elements()) {
      elems.push_back(map_tensors(e, convert));
    }
    return c10::ivalue::Tuple::create(std::move(elems));
  }
  return value;
}

at::Tensor to_meta_tensor(const at::Tensor& t) {
  TensorMeta m = tensor_meta_of(t);
  return at::empty_strided(m.sizes, m.strides,
                           at::TensorOptions().dtype(m.dtype).device(at::kMeta));
}

// A zero-filled tensor with t's metadata (strides included: the storage
// spans every element the strides can reach, so expanded and sliced layouts
// work too).
// How many elements t's sizes and strides reach in its storage.
int64_t storage_size(const TensorMeta& m) {
  int64_t storage = 1;
  for (size_t d = 0; d < m.sizes.size(); ++d) {
    if (m.sizes[d] == 0) return 0;
    storage += (m.sizes[d] - 1) * m.strides[d];
  }
  return storage;
}

at::Tensor to_zeros(const at::Tensor& t) {
  TensorMeta m = tensor_meta_of(t);
  return at::zeros({storage_size(m)},
                   at::TensorOptions().dtype(m.dtype).device(m.device))
      .as_strided(m.sizes, m.strides);
}

std::optional<Outputs> try_meta_kernel(const c10::OperatorHandle& op,
                                       const std::vector<c10::IValue>& args,
                                       c10::Device device) {
  std::vector<c10::IValue> stack;
  stack.reserve(args.size());
  bool has_meta_input = false;
  const auto& params = op.schema().arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& a = args[i];
    // Factories take a device (None: the default one); ask for meta.
    if (a.isDevice() || (a.isNone() && params[i].name() == "device")) {
      stack.emplace_back(c10::Device(c10::DeviceType::Meta));
      has_meta_input = true;
      continue;
    }
    c10::IValue converted = map_tensors(a, [&](const at::Tensor& t) {
      has_meta_input = true;
      return to_meta_tensor(t);
    });
    stack.push_back(std::move(converted));
  }
  if (!has_meta_input) return std::nullopt;  // no way to ask for meta
  try {
    op.callBoxed(&stack);
  } catch (const c10::NotImplementedError&) {
    std::lock_guard<std::mutex> lock(cache_mutex);
    cache_for(op).no_meta = true;
    return std::nullopt;
  } catch (const c10::Error&) {
    // Maybe the inputs are wrong for this op; the real kernel will say.
    return std::nullopt;
  }
  return outputs_from_stack(op.schema(), stack, device);
}

std::optional<Outputs> try_shape_function(const c10::OperatorHandle& op,
                                          const std::vector<c10::IValue>& args,
                                          c10::Device device) {
  std::shared_ptr<torch::jit::Code> code;
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    OperatorCache& cache = cache_for(op);
    if (cache.no_shape_function) return std::nullopt;
    if (!cache.shape_function) {
      auto graph = torch::jit::shapeComputeGraphForSchema(op.schema());
      if (!graph) {
        cache.no_shape_function = true;
        return std::nullopt;
      }
      cache.shape_function =
          std::make_shared<torch::jit::Code>(*graph, full_name(op));
    }
    code = cache.shape_function;
  }
  const auto& returns = op.schema().returns();
  for (const auto& r : returns) {
    if (r.type()->kind() != c10::TypeKind::TensorType) return std::nullopt;
  }
  std::vector<c10::IValue> stack;
  const TensorMeta* first_tensor = nullptr;
  TensorMeta first;
  for (const c10::IValue& a : args) {
    if (a.isTensor() && a.toTensor().defined()) {
      TensorMeta m = tensor_meta_of(a.toTensor());
      if (!first_tensor) {
        first = m;
        first_tensor = &first;
      }
      stack.emplace_back(c10::List<int64_t>(m.sizes));
    } else if (a.isTensor()) {
      stack.emplace_back();
    } else {
      stack.push_back(a);
    }
  }
  if (!first_tensor) return std::nullopt;
  // Shape functions give sizes only: the dtype is the `dtype` argument's,
  // else self's (input's) promoted with other's, else the first tensor's.
  const c10::FunctionSchema& schema = op.schema();
  c10::ScalarType dtype = first.dtype;
  auto tensor_named = [&](const char* name) -> const at::Tensor* {
    auto index = schema.argumentIndexWithName(name);
    if (!index || static_cast<size_t>(*index) >= args.size() ||
        !args[*index].isTensor() || !args[*index].toTensor().defined()) {
      return nullptr;
    }
    return &args[*index].toTensor();
  };
  const at::Tensor* self = tensor_named("self");
  if (self == nullptr) self = tensor_named("input");
  if (self != nullptr) {
    dtype = self->scalar_type();
    if (const at::Tensor* other = tensor_named("other")) {
      dtype = c10::promoteTypes(dtype, other->scalar_type());
    }
  }
  if (auto index = schema.argumentIndexWithName("dtype")) {
    if (static_cast<size_t>(*index) < args.size() && args[*index].isInt()) {
      dtype = static_cast<c10::ScalarType>(args[*index].toInt());
    }
  }
  try {
    torch::jit::InterpreterState(*code).run(stack);
  } catch (const std::exception&) {
    // c10::Error, or a JITException from the function's own asserts: the
    // real kernel will say what is wrong.
    return std::nullopt;
  }
  std::vector<std::vector<int64_t>> shapes;
  if (returns.size() == 1 && stack.size() == 1 && stack[0].isIntList()) {
    shapes.push_back(stack[0].toIntVector());
  } else if (stack.size() == 1 && stack[0].isTuple()) {
    for (const c10::IValue& e : stack[0].toTupleRef().elements()) {
      if (!e.isIntList()) return std::nullopt;
      shapes.push_back(e.toIntVector());
    }
  } else {
    return std::nullopt;
  }
  if (shapes.size() != returns.size()) return std::nullopt;
  Outputs outs;
  for (auto& sizes : shapes) {
    outs.push_back(tensor_output(make_meta(std::move(sizes), dtype, device,
                                           suggested_format(first))));
  }
  return outs;
}

// Like to_zeros, but filled with small non-zero values that vary along the
// storage: element i is (i * step) % 97 + 1, or for bool (i / step) % 2, so
// that steps 1 and 5 fill bool tensors differently too.
at::Tensor to_varied(const at::Tensor& t, int64_t step) {
  TensorMeta m = tensor_meta_of(t);
  at::Tensor i = at::arange(storage_size(m), at::kLong);
  at::Tensor values = m.dtype == at::kBool
                          ? i.div(step, "floor").remainder(2)
                          : i.mul(step).remainder(97).add(1);
  return values.to(at::TensorOptions().dtype(m.dtype).device(m.device))
      .as_strided(m.sizes, m.strides);
}
at::Tensor to_varied_a(const at::Tensor& t) { return to_varied(t, 1); }
at::Tensor to_varied_b(const at::Tensor& t) { return to_varied(t, 5); }

Outputs call_on(const c10::OperatorHandle& op,
                const std::vector<c10::IValue>& args, c10::Device device,
                at::Tensor (*fill)(const at::Tensor&)) {
  std::vector<c10::IValue> stack;
  stack.reserve(args.size());
  for (const c10::IValue& a : args) stack.push_back(map_tensors(a, fill));
  op.callBoxed(&stack);
  return outputs_from_stack(op.schema(), stack, device);
}

bool same_shapes(const Outputs& a, const Outputs& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].kind != b[i].kind) return false;
    if (a[i].kind == InferredOutput::Kind::kTensor &&
        (a[i].tensor.sizes != b[i].tensor.sizes ||
         a[i].tensor.dtype != b[i].tensor.dtype)) {
      return false;
    }
    if (a[i].kind == InferredOutput::Kind::kTensorList) {
      if (a[i].tensors.size() != b[i].tensors.size()) return false;
      for (size_t j = 0; j < a[i].tensors.size(); ++j) {
        if (a[i].tensors[j].sizes != b[i].tensors[j].sizes ||
            a[i].tensors[j].dtype != b[i].tensors[j].dtype) {
          return false;
        }
      }
    }
  }
  return true;
}

// The last resort: the real kernel on inputs of the right metadata, twice,
// with different values (zeros, else two non-zero fillings for operators
// that refuse zeros, as integer division does); an operator whose outputs'
// shapes differ between the two depends on data.
Outputs run_real_kernel(const c10::OperatorHandle& op,
                        const std::vector<c10::IValue>& args,
                        c10::Device device) {
  using Fill = at::Tensor (*)(const at::Tensor&);
  Fill first = &to_zeros;
  Fill second = &to_varied_a;
  Outputs a;
  try {
    a = call_on(op, args, device, first);
  } catch (const c10::Error&) {
    first = &to_varied_a;
    second = &to_varied_b;
    a = call_on(op, args, device, first);  // its error is the operator's
  }
  if (op.hasTag(at::Tag::nondeterministic_seeded)) return a;
  Outputs b;
  try {
    b = call_on(op, args, device, second);
  } catch (const c10::Error&) {
    // Other values may be invalid for it (indices out of range): the first
    // run stands.
    return a;
  }
  if (!same_shapes(a, b)) {
    throw DataDependentOutput(absl::StrCat(
        full_name(op), " returned outputs of different shapes for inputs "
        "of the same shapes but other values"));
  }
  return a;
}

}  // namespace

std::vector<InferredOutput> infer_outputs(const c10::OperatorHandle& op,
                                          const std::vector<c10::IValue>& args,
                                          InferenceTier* tier) {
  const auto& table = rules();
  auto rule = table.find(full_name(op));
  if (rule != table.end()) {
    try {
      *tier = InferenceTier::kRule;
      return rule->second(args);
    } catch (const NotThisRule&) {
    }
  }
  c10::Device device = output_device(op.schema(), args);
  bool no_meta;
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    no_meta = cache_for(op).no_meta;
  }
  if (!no_meta) {
    if (auto outs = try_meta_kernel(op, args, device)) {
      *tier = InferenceTier::kMetaKernel;
      return *outs;
    }
  }
  if (auto outs = try_shape_function(op, args, device)) {
    *tier = InferenceTier::kShapeFunction;
    return *outs;
  }
  *tier = InferenceTier::kRealKernel;
  return run_real_kernel(op, args, device);
}

c10::IValue zeros_like_value(const c10::IValue& value) {
  return map_tensors(value, &to_zeros);
}

}  // namespace internal
}  // namespace fx
