#include "lowering/onednn_support.h"

#include <ATen/quantized/Quantizer.h>

#include <absl/strings/str_join.h>

#include <cmath>
#include <cstring>

#include "lowering/kernels/activation_cache.h"
#include "lowering/kernels/elementwise.h"
#include "lowering/kernels/image_layout.h"
#include "lowering/onednn_ops.h"

namespace fx::onednn {
namespace {

using internal::memory;

// --- Activations (eltwise post-ops) ---------------------------------------
struct Activation {
  const char* name;
  dnnl::algorithm algorithm;
};

const Activation kActivations[] = {
    {"relu", dnnl::algorithm::eltwise_relu},
    {"clip", dnnl::algorithm::eltwise_clip},
    {"hardswish", dnnl::algorithm::eltwise_hardswish},
    // x / 6 + 0.5 clipped to [0, 1]: oneDNN 2.6 has no hardsigmoid, so two
    // post-ops (linear, then the clip below).
    {"hardsigmoid", dnnl::algorithm::eltwise_linear},
    {"silu", dnnl::algorithm::eltwise_swish},
    {"sigmoid", dnnl::algorithm::eltwise_logistic},
    {"tanh", dnnl::algorithm::eltwise_tanh},
    {"gelu", dnnl::algorithm::eltwise_gelu_erf},
    {"gelu_tanh", dnnl::algorithm::eltwise_gelu_tanh},
};

}  // namespace

const std::vector<std::string>& activation_names() {
  static const auto* names = [] {
    auto* v = new std::vector<std::string>{"none"};
    for (const Activation& a : kActivations) v->push_back(a.name);
    return v;
  }();
  return *names;
}

std::string last_kernel() { return internal::last_kernel_name; }

namespace internal {

std::atomic<uint64_t> cache_generation{0};
thread_local std::string last_kernel_name;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& cpu_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

namespace {
int64_t extra_offset(uint64_t data_bytes) {
  return (static_cast<int64_t>(data_bytes) + 63) / 64 * 64;
}
}  // namespace

at::Tensor pack(const at::Tensor& plain, const memory::desc& plain_desc,
                const memory::desc& packed_desc, at::IntArrayRef logical,
                PackKind kind, int64_t extra_bytes) {
  const int64_t data_bytes = static_cast<int64_t>(packed_desc.get_size());
  // The storage also holds the float32 view of the logical sizes (a bfloat16
  // or int8 packing is smaller).
  const int64_t storage_bytes =
      std::max<int64_t>(extra_offset(data_bytes) + extra_bytes,
                        4 * c10::multiply_integers(logical));
  at::Tensor storage = at::empty({(kHeaderBytes + storage_bytes + 3) / 4},
                                 at::TensorOptions(at::kFloat));
  char* base = static_cast<char*>(storage.data_ptr());
  std::memset(base, 0, kHeaderBytes);
  Header header{kMagic, static_cast<uint64_t>(data_bytes), kind,
                packed_desc.data};
  std::memcpy(base, &header, sizeof(Header));
  at::Tensor source = plain.contiguous();
  memory from(plain_desc, cpu_engine(), source.data_ptr());
  memory to(packed_desc, cpu_engine(), base + kHeaderBytes);
  dnnl::reorder(from, to).execute(cpu_stream(), from, to);
  cpu_stream().wait();
  return storage.as_strided(logical, c10::contiguous_strides(logical),
                            kHeaderBytes / 4);
}

const void* packed_extra(const at::Tensor& packed, const Header& header) {
  return static_cast<const char*>(packed.storage().data()) + kHeaderBytes +
         extra_offset(header.data_bytes);
}

const Header& header_of(const at::Tensor& packed, const char* op,
                        const char* packer) {
  const auto& storage = packed.storage();
  const bool framed =
      packed.defined() && packed.device().is_cpu() &&
      packed.scalar_type() == at::kFloat && storage.data() != nullptr &&
      packed.storage_offset() == kHeaderBytes / 4 &&
      storage.nbytes() >= static_cast<size_t>(kHeaderBytes);
  const Header* header =
      framed ? static_cast<const Header*>(storage.data()) : nullptr;
  TORCH_CHECK(header != nullptr && header->magic == kMagic &&
                  storage.nbytes() >= kHeaderBytes + header->data_bytes,
              op, ": the weight is not one that ", packer,
              " made (a copy or a plain weight loses its packing); pack the "
              "weight with ", packer,
              " in the same process, e.g. by running fx::optimize_for_inference "
              "or GraphModuleImpl::run_init()");
  return *header;
}

const void* packed_data(const at::Tensor& packed) {
  return static_cast<const char*>(packed.storage().data()) + kHeaderBytes;
}

Tag channels_last_tag(int64_t dim) {
  switch (dim) {
    case 3: return Tag::nwc;
    case 4: return Tag::nhwc;
    default: return Tag::ndhwc;
  }
}

Tag plain_weight_tag(int64_t dim, bool grouped) {
  switch (dim) {
    case 3: return grouped ? Tag::goiw : Tag::oiw;
    case 4: return grouped ? Tag::goihw : Tag::oihw;
    default: return grouped ? Tag::goidhw : Tag::oidhw;
  }
}

bool is_channels_last_dense(const at::Tensor& t) {
  if (t.numel() <= 1) return t.is_contiguous();
  // channels_last_strides' strides, without making them (a call's check).
  const int64_t dim = t.dim();
  if (dim < 3 || dim > 5) return false;
  int64_t expected = 1;
  auto dense = [&](int64_t i) {
    const bool ok = t.size(i) == 1 || t.stride(i) == expected;
    expected *= t.size(i);
    return ok;
  };
  if (!dense(1)) return false;  // channels innermost,
  for (int64_t i = dim - 1; i >= 2; --i) {  // then the last spatial size out,
    if (!dense(i)) return false;
  }
  return dense(0);  // then the batch
}

int64_t channels_last_pitch(const at::Tensor& t) {
  if (t.dim() != 4 || t.size(3) < 2 || t.size(1) < 1) return 0;
  const int64_t pitch = t.stride(3);
  const bool strided = (t.stride(1) == 1 || t.size(1) == 1) &&
                       pitch >= t.size(1) &&
                       (t.size(2) == 1 || t.stride(2) == t.size(3) * pitch) &&
                       (t.size(0) == 1 ||
                        t.stride(0) == t.size(2) * t.size(3) * pitch);
  return strided ? pitch : 0;
}

at::Tensor empty_channels_last(at::IntArrayRef sizes,
                               const at::TensorOptions& options) {
  return empty_activation(sizes, channels_last_strides(sizes.vec()), options);
}

// A channels-last quint8 tensor whose memory comes from the activation
// cache (a fresh allocation of a large output paid its page faults and
// zeroing on every call).
at::Tensor empty_quint8_channels_last(at::IntArrayRef sizes, double scale,
                                      int64_t zero_point) {
  const std::vector<int64_t> strides = channels_last_strides(sizes.vec());
  at::Tensor bytes = empty_activation({c10::multiply_integers(sizes)},
                                      at::TensorOptions(at::kByte));
  at::Tensor q = at::from_blob_quantized_per_tensor_affine(
      bytes.data_ptr(), sizes, strides, [bytes](void*) {},
      static_cast<float>(scale), zero_point, at::TensorOptions(at::kQUInt8));
  // from_blob takes the scale as a float; the graph's is a double.
  at::set_quantizer_(
      q, at::make_per_tensor_affine_quantizer(scale, zero_point, at::kQUInt8));
  return q;
}

at::Tensor to_channels_last(const at::Tensor& t) {
  if (is_channels_last_dense(t)) return t;
  at::Tensor out = empty_channels_last(t.sizes(), t.options());
  if (t.dim() == 4 && t.size(1) == 3 && t.scalar_type() == at::kFloat &&
      t.is_contiguous() && rgb_to_channels_last_runs()) {
    rgb_to_channels_last(t.data_ptr<float>(), out.data_ptr<float>(),
                         t.size(0), t.size(2) * t.size(3));
    return out;
  }
  out.copy_(t);
  return out;
}

memory::dims dims_of(at::IntArrayRef sizes) {
  return memory::dims(sizes.begin(), sizes.end());
}

DataType data_type_of(const char* op, const at::Tensor& t, const char* what) {
  switch (t.scalar_type()) {
    case at::kFloat: return DataType::f32;
    case at::kBFloat16: return DataType::bf16;
    default:
      TORCH_CHECK(false, op, ": the ", what,
                  " must be float32 or bfloat16, got ", t.toString());
  }
  return DataType::f32;
}

at::ScalarType scalar_type_of(DataType type) {
  return type == DataType::bf16 ? at::kBFloat16 : at::kFloat;
}

DataType compute_type(const char* op, const Header& header,
                      const at::Tensor& input) {
  const DataType weights = memory::desc(header.desc).data_type();
  const DataType in = data_type_of(op, input, "input");
  TORCH_CHECK(!(weights == DataType::f32 && in == DataType::bf16), op,
              ": the input is bfloat16 but the weight was packed for float32; "
              "pack it with bf16=True (fx::InferenceOptions::bf16)");
  return weights;
}



void check_bf16(const char* op, bool bf16) {
  TORCH_CHECK(!bf16 || bf16_supported(), op,
              ": bf16 needs a CPU with AVX-512 (avx512_core), where oneDNN "
              "has bfloat16 kernels; this one has none: pack in float32");
}

void check_input(const char* op, const at::Tensor& input) {
  TORCH_CHECK(input.device().is_cpu(), op,
              ": the input must be a CPU tensor, got ", input.toString());
  data_type_of(op, input, "input");
}

void append_activation(dnnl::post_ops& ops, const char* op,
                       c10::string_view activation, double alpha, double beta,
                       float scale) {
  if (activation == "none") return;
  const Activation* found = nullptr;
  for (const Activation& a : kActivations) {
    if (activation == a.name) found = &a;
  }
  TORCH_CHECK(found != nullptr, op, ": unknown activation '",
              std::string(activation), "'; the known ones are ",
              absl::StrJoin(activation_names(), ", "));
  if (activation == "hardsigmoid") {
    ops.append_eltwise(1.f, found->algorithm, 1.f / 6, 0.5f);
    ops.append_eltwise(scale, dnnl::algorithm::eltwise_clip, 0.f, 1.f);
  } else {
    // silu is swish with alpha 1.
    const float a = activation == "silu" ? 1.f : static_cast<float>(alpha);
    ops.append_eltwise(scale, found->algorithm, a, static_cast<float>(beta));
  }
}

dnnl::primitive_attr post_ops(const char* op, bool sum,
                              c10::string_view activation, double alpha,
                              double beta) {
  dnnl::post_ops ops;
  if (sum) ops.append_sum(1.f);
  append_activation(ops, op, activation, alpha, beta, 1.f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  // Each call brings its own scratchpad: in the library's mode, oneDNN
  // shares one between primitives, and two threads running lowered graphs
  // at once (a server's requests, parallel branches) overwrite each
  // other's.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

bool silu_as_pass(c10::string_view activation, DataType output) {
  return activation == "silu" && output == DataType::f32 && silu_pass_runs();
}

void* thread_scratchpad(size_t size) {
  thread_local at::Tensor buffer;
  if (!buffer.defined() || buffer.numel() < static_cast<int64_t>(size)) {
    buffer = at::empty({static_cast<int64_t>(size)}, at::kByte);
  }
  return buffer.data_ptr();
}

void append_key(std::string* key, at::IntArrayRef values) {
  key->append(reinterpret_cast<const char*>(values.data()),
              values.size() * sizeof(int64_t));
  key->push_back('|');
}

void append_key(std::string* key, double value) {
  key->append(reinterpret_cast<const char*>(&value), sizeof(value));
  key->push_back('|');
}

bool is_reference(const dnnl::primitive_desc_base& pd) {
  return std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
}

std::shared_ptr<const Reorder> make_reorder(const memory::desc& from,
                                           const memory::desc& to) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::reorder::primitive_desc pd(cpu_engine(), from, cpu_engine(), to, attr);
  return std::make_shared<const Reorder>(Reorder{pd, dnnl::reorder(pd)});
}

void run_reorder(const Reorder& reorder, void* from, void* to) {
  dnnl::engine& engine = cpu_engine();
  std::unordered_map<int, memory> args{
      {DNNL_ARG_FROM, memory(reorder.pd.src_desc(), engine, from)},
      {DNNL_ARG_TO, memory(reorder.pd.dst_desc(), engine, to)}};
  add_thread_scratchpad(reorder.pd, &args);
  reorder.primitive.execute(cpu_stream(), args);
}

memory weights_for_call(const at::Tensor& packed, const Header& header,
                        const memory::desc& wanted,
                        const std::shared_ptr<const Reorder>& reorder,
                        std::vector<at::Tensor>* storage) {
  memory from(memory::desc(header.desc), cpu_engine(),
              const_cast<void*>(packed_data(packed)));
  if (!reorder) return from;
  storage->push_back(at::empty({static_cast<int64_t>(wanted.get_size())},
                               at::kByte));
  run_reorder(*reorder, from.get_data_handle(), storage->back().data_ptr());
  return memory(wanted, cpu_engine(), storage->back().data_ptr());
}

void point_scratchpad(CallMemories* m) {
  if (m->scratchpad_bytes == 0) return;
  m->scratchpad.set_data_handle(thread_scratchpad(m->scratchpad_bytes));
}

at::Tensor float_bias(const char* op, const c10::optional<at::Tensor>& bias,
                      int64_t channels) {
  if (!bias.has_value() || !bias->defined()) return at::Tensor();
  TORCH_CHECK(bias->numel() == channels, op, ": the bias must have ",
              channels, " values, got ", bias->sizes());
  if (bias->scalar_type() == at::kFloat && bias->is_contiguous()) return *bias;
  return bias->to(at::kFloat).contiguous();
}

ActivationDescs activation_descs(at::IntArrayRef input,
                                 at::IntArrayRef output_size, bool bias,
                                 DataType compute, DataType output,
                                 Tag src_layout,
                                 Tag dst_layout) {
  const Tag layout = channels_last_tag(static_cast<int64_t>(input.size()));
  return {memory::desc(dims_of(input), compute,
                       src_layout == Tag::undef ? layout : src_layout),
          memory::desc(dims_of(output_size), output,
                       dst_layout == Tag::undef ? layout : dst_layout),
          bias ? memory::desc({output_size[1]}, DataType::f32, Tag::x)
               : memory::desc()};
}

ConvGeometry conv_geometry(const char* op, at::IntArrayRef input,
                           at::IntArrayRef weight, at::IntArrayRef stride,
                           at::IntArrayRef padding, at::IntArrayRef dilation,
                           int64_t groups) {
  const int64_t spatial =
      spatial_dims_of(op, input, weight, {stride, padding, dilation},
                      "stride, padding and dilation");
  TORCH_CHECK(groups >= 1 && weight[0] % groups == 0 &&
                  input[1] == weight[1] * groups,
              op, ": the input has ", input[1], " channels, but the weight ",
              weight, " with ", groups, " groups takes ", weight[1] * groups);
  ConvGeometry g;
  g.output_size = {input[0], weight[0]};
  for (int64_t i = 0; i < spatial; ++i) {
    TORCH_CHECK(stride[i] >= 1 && dilation[i] >= 1 && padding[i] >= 0, op,
                ": stride and dilation must be positive and padding not "
                "negative");
    const int64_t extent = dilation[i] * (weight[2 + i] - 1) + 1;
    const int64_t out = (input[2 + i] + 2 * padding[i] - extent) / stride[i] + 1;
    TORCH_CHECK(out >= 1, op, ": the input's spatial size ", input,
                " is smaller than the kernel's ", weight);
    g.output_size.push_back(out);
    g.strides.push_back(stride[i]);
    g.dilates.push_back(dilation[i] - 1);
    g.padding.push_back(padding[i]);
  }
  return g;
}

int64_t spatial_dims_of(const char* op, at::IntArrayRef input,
                        at::IntArrayRef weight,
                        std::initializer_list<at::IntArrayRef> lists,
                        const char* names) {
  const int64_t dim = static_cast<int64_t>(input.size());
  const int64_t spatial = dim - 2;
  TORCH_CHECK(dim >= 3 && dim <= 5, op,
              ": the input must be 3-, 4- or 5-dimensional (N, C and 1 to 3 "
              "spatial sizes), got ", dim, " dimensions");
  TORCH_CHECK(static_cast<int64_t>(weight.size()) == dim, op, ": a ", dim,
              "-d input needs a ", dim, "-d weight, got ", weight.size());
  for (at::IntArrayRef list : lists) {
    TORCH_CHECK(static_cast<int64_t>(list.size()) == spatial, op, ": ", names,
                " need ", spatial, " values each");
  }
  return spatial;
}

memory::desc conv_weight_desc(at::IntArrayRef weight, int64_t groups,
                              Tag tag, DataType type) {
  memory::dims dims = dims_of(weight);
  if (groups > 1) {
    dims[0] /= groups;
    dims.insert(dims.begin(), groups);
  }
  return memory::desc(dims, type, tag);
}

memory::desc deconv_weight_desc(at::IntArrayRef weight, int64_t groups,
                                Tag tag, DataType type) {
  memory::dims dims = dims_of(weight);
  std::swap(dims[0], dims[1]);  // oneDNN's (out, in, ...)
  if (groups > 1) {
    dims[1] /= groups;
    dims.insert(dims.begin(), groups);
  }
  return memory::desc(dims, type, tag);
}

Tag plain_deconv_weight_tag(int64_t dim, bool grouped) {
  switch (dim) {
    case 3: return grouped ? Tag::acbd : Tag::bac;
    case 4: return grouped ? Tag::acbde : Tag::bacd;
    default: return grouped ? Tag::acbdef : Tag::bacde;
  }
}

memory::dims linear_weight_dims(at::IntArrayRef weight) {
  return {weight[1], weight[0]};
}

memory::desc plain_weight_desc(PackKind kind, at::IntArrayRef sizes,
                               int64_t groups) {
  const int64_t dim = static_cast<int64_t>(sizes.size());
  switch (kind) {
    case PackKind::kConv:
      return conv_weight_desc(sizes, groups, plain_weight_tag(dim, groups > 1));
    case PackKind::kQConv:
      return conv_weight_desc(sizes, groups, plain_weight_tag(dim, groups > 1),
                              DataType::s8);
    case PackKind::kConvTranspose:
      return deconv_weight_desc(sizes, groups,
                                plain_deconv_weight_tag(dim, groups > 1));
    case PackKind::kLinear:
      // [out, in] row-major is [in, out] with the second dimension outer.
      return memory::desc(linear_weight_dims(sizes), DataType::f32, Tag::ba);
    case PackKind::kQLinear:
      return memory::desc(linear_weight_dims(sizes), DataType::s8, Tag::ba);
  }
  TORCH_INTERNAL_ASSERT(false, "unknown PackKind");
}

std::vector<float> weight_scales(const char* op, const at::Tensor& w) {
  TORCH_CHECK(w.is_quantized() && w.scalar_type() == at::kQInt8, op,
              ": the weight must be qint8, got ", w.toString());
  const int64_t channels = w.size(0);
  std::vector<float> scales(channels);
  switch (w.qscheme()) {
    case at::kPerTensorAffine:
    case at::kPerTensorSymmetric:
      TORCH_CHECK(w.q_zero_point() == 0, op,
                  ": the weight's zero point must be 0 (symmetric), got ",
                  w.q_zero_point());
      std::fill(scales.begin(), scales.end(), static_cast<float>(w.q_scale()));
      break;
    case at::kPerChannelAffine:
    case at::kPerChannelSymmetric:
    case at::kPerChannelAffineFloatQParams: {
      TORCH_CHECK(w.q_per_channel_axis() == 0, op,
                  ": the weight's scales must be per output channel (axis "
                  "0), got axis ", w.q_per_channel_axis());
      TORCH_CHECK(w.q_per_channel_zero_points().eq(0).all().item<bool>(), op,
                  ": the weight's zero points must be 0 (symmetric)");
      const at::Tensor s =
          w.q_per_channel_scales().to(at::kFloat).contiguous();
      std::memcpy(scales.data(), s.data_ptr<float>(),
                  sizeof(float) * channels);
      break;
    }
    default:
      TORCH_CHECK(false, op, ": unsupported weight quantization ",
                  c10::toString(w.qscheme()));
  }
  for (float s : scales) {
    TORCH_CHECK(std::isfinite(s) && s > 0, op,
                ": the weight's scales must be positive, got ", s);
  }
  return scales;
}

int64_t rows_of(const char* op, at::IntArrayRef input, int64_t in_features) {
  TORCH_CHECK(!input.empty() && input.back() == in_features, op,
              ": the input's last size must be the weight's in_features (",
              in_features, "), got sizes ", input);
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < input.size(); ++i) rows *= input[i];
  return rows;
}

QParams quint8_params(const char* op, const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.is_quantized() && t.scalar_type() == at::kQUInt8 &&
                  t.qscheme() == at::kPerTensorAffine && t.device().is_cpu(),
              op, ": ", what, " must be a quint8 CPU tensor quantized per "
              "tensor, got ", t.toString(),
              t.is_quantized() ? " " + std::string(c10::toString(t.qscheme()))
                               : std::string());
  return {t.q_scale(), t.q_zero_point()};
}

void check_output_params(const char* op, double scale, int64_t zero_point) {
  TORCH_CHECK(std::isfinite(scale) && scale > 0, op,
              ": output_scale must be positive and finite, got ", scale);
  TORCH_CHECK(zero_point >= 0 && zero_point <= 255, op,
              ": output_zero_point must be within 0 to 255 (quint8), got ",
              zero_point);
}

}  // namespace internal
}  // namespace fx::onednn
