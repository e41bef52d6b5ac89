#include "lowering/onednn_ops.h"

#include <torch/library.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <absl/container/flat_hash_map.h>
#include <absl/container/inlined_vector.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <oneapi/dnnl/dnnl.hpp>

#include "lowering/activation_cache.h"
#include "lowering/channel_affine.h"
#include "lowering/concat.h"
#include "lowering/elementwise.h"
#include "lowering/image_layout.h"
#include "lowering/kernel_support.h"
#include "lowering/squeeze_excite.h"
#include "lowering/recurrence.h"

namespace fx::onednn {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

// --- Packed weights -------------------------------------------------------
// A packed weight is a float tensor viewing, at offset kHeaderBytes, a
// storage that starts with a Header: oneDNN's description of the blocked
// layout the data after it is in.
constexpr int64_t kHeaderBytes = 4096;
constexpr uint64_t kMagic = 0x6678'6f6e'6564'6e6eULL;  // "fxonednn"

// Which pack operator made a packed weight (unpack_weight reads it back in
// that operator's layout).
enum class PackKind : uint64_t { kConv = 1, kConvTranspose = 2, kLinear = 3 };

// The layout a pack operator reads its weight in, and unpack_weight gives it
// back in: aten's, float32 (defined with the layouts below).
memory::desc plain_weight_desc(PackKind kind, at::IntArrayRef sizes,
                               int64_t groups);

struct Header {
  uint64_t magic;
  uint64_t data_bytes;
  PackKind kind;
  dnnl_memory_desc_t desc;
};
static_assert(sizeof(Header) <= kHeaderBytes, "the header outgrew its room");

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& cpu_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

// Reorders `plain` (described by `plain_desc`) into `packed_desc`, behind a
// header, as a tensor of `logical` sizes.
at::Tensor pack(const at::Tensor& plain, const memory::desc& plain_desc,
                const memory::desc& packed_desc, at::IntArrayRef logical,
                PackKind kind) {
  const int64_t data_bytes = static_cast<int64_t>(packed_desc.get_size());
  // The storage also holds the float32 view of the logical sizes (a bfloat16
  // packing is half as large).
  const int64_t storage_bytes =
      std::max<int64_t>(data_bytes, 4 * c10::multiply_integers(logical));
  at::Tensor storage = at::empty({(kHeaderBytes + storage_bytes + 3) / 4},
                                 plain.options().dtype(at::kFloat));
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

// The header of a packed weight; a clear error for any other tensor.
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

// --- Layouts --------------------------------------------------------------
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

// The distance in floats between the pixels of `t` when it is a 4-d
// channels-last tensor whose pixels may lie further apart than its channels
// (the first channels of a wider one: a concat_buffer's view); 0 otherwise.
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

using DataType = memory::data_type;

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

// The type a packed weight computes in (its header's), checked against the
// input's: float32 weights take float32 inputs; bfloat16 weights take
// either (a float32 input is converted, and the output stays float32).
DataType compute_type(const char* op, const Header& header,
                      const at::Tensor& input) {
  const DataType weights = memory::desc(header.desc).data_type();
  const DataType in = data_type_of(op, input, "input");
  TORCH_CHECK(!(weights == DataType::f32 && in == DataType::bf16), op,
              ": the input is bfloat16 but the weight was packed for float32; "
              "pack it with bf16=True (fx::InferenceOptions::bf16)");
  return weights;
}

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

dnnl::primitive_attr post_ops(const char* op, bool sum,
                              c10::string_view activation, double alpha,
                              double beta) {
  dnnl::post_ops ops;
  if (sum) ops.append_sum(1.f);
  if (activation != "none") {
    const Activation* found = nullptr;
    for (const Activation& a : kActivations) {
      if (activation == a.name) found = &a;
    }
    TORCH_CHECK(found != nullptr, op, ": unknown activation '",
                std::string(activation), "'; the known ones are ",
                absl::StrJoin(activation_names(), ", "));
    if (activation == "hardsigmoid") {
      ops.append_eltwise(1.f, found->algorithm, 1.f / 6, 0.5f);
      ops.append_eltwise(1.f, dnnl::algorithm::eltwise_clip, 0.f, 1.f);
    } else {
      // silu is swish with alpha 1.
      const float a = activation == "silu" ? 1.f : static_cast<float>(alpha);
      ops.append_eltwise(1.f, found->algorithm, a, static_cast<float>(beta));
    }
  }
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  // Each call brings its own scratchpad: in the library's mode, oneDNN
  // shares one between primitives, and two threads running lowered graphs
  // at once (a server's requests, parallel branches) overwrite each
  // other's.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// Whether a conv or linear layer's `activation` runs as a pass of our own
// after its primitive (lowering/elementwise.h: SiLU on a float32 output),
// the primitive then made with no activation.
bool silu_as_pass(c10::string_view activation, DataType output) {
  return activation == "silu" && output == DataType::f32 && silu_pass_runs();
}

// The scratchpad of a primitive run by this thread: one buffer per thread,
// grown to the largest any primitive asked for, added to `args` (none when
// it needs none). A call runs to its end before the thread makes another,
// so the buffer is never in use twice (a buffer per call cost a large
// allocation and its free on every call: a fifth of a small convolution's
// time).
void* thread_scratchpad(size_t size) {
  thread_local at::Tensor buffer;
  if (!buffer.defined() || buffer.numel() < static_cast<int64_t>(size)) {
    buffer = at::empty({static_cast<int64_t>(size)}, at::kByte);
  }
  return buffer.data_ptr();
}

template <typename PrimitiveDesc>
void add_thread_scratchpad(const PrimitiveDesc& pd,
                           std::unordered_map<int, memory>* args) {
  const memory::desc desc = pd.scratchpad_desc();
  const size_t size = desc.get_size();
  if (size == 0) return;
  args->emplace(DNNL_ARG_SCRATCHPAD,
                memory(desc, cpu_engine(), thread_scratchpad(size)));
}

// --- Primitive cache -------------------------------------------------------
// Incremented whenever a cache drops its entries, so that what a thread
// keeps per entry (CallMemories) is dropped with them.
std::atomic<uint64_t> cache_generation{0};

// Making a primitive descriptor costs tens of microseconds, as much as a
// small convolution, so each call shape's primitive is kept.
template <typename Primitive>
class PrimitiveCache {
 public:
  using Make = std::function<Primitive()>;
  Primitive get(const std::string& key, const Make& make) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = entries_.find(key);
      if (it != entries_.end()) return it->second;
    }
    Primitive made = make();
    std::lock_guard<std::mutex> lock(mutex_);
    if (entries_.size() >= kCapacity) {
      ++cache_generation;  // before any entry can be freed
      entries_.clear();
    }
    // A thread that made the same primitive first wins: every caller then
    // shares its entry.
    return entries_.emplace(key, std::move(made)).first->second;
  }

 private:
  static constexpr size_t kCapacity = 4096;
  std::mutex mutex_;
  absl::flat_hash_map<std::string, Primitive> entries_;
};

void append_key(std::string* key, at::IntArrayRef values) {
  key->append(reinterpret_cast<const char*>(values.data()),
              values.size() * sizeof(int64_t));
  key->push_back('|');
}

// A post-op parameter by its bits: printed, two that differ past the sixth
// digit would share a primitive.
void append_key(std::string* key, double value) {
  key->append(reinterpret_cast<const char*>(&value), sizeof(value));
  key->push_back('|');
}

// --- Weights packed at another thread count --------------------------------
// oneDNN picks a packed weight's blocked layout for the thread count it is
// packed at. Run at another count, a convolution may have no optimized
// kernel for that layout and fall back to its reference kernel: a
// densenet121 1x1 convolution packed at 1 thread and run at 2 took 1.5 s
// instead of 0.1 ms. The primitive then reads the layout it prefers now,
// and the packed weights are reordered into it before each call.
thread_local std::string last_kernel_name;

bool is_reference(const dnnl::primitive_desc_base& pd) {
  return std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
}

struct Reorder {
  dnnl::reorder::primitive_desc pd;
  dnnl::reorder primitive;
};

// A reorder from `from` to `to` whose scratchpad each call brings
// (run_reorder: the thread's), as every primitive here.
std::shared_ptr<const Reorder> make_reorder(const memory::desc& from,
                                           const memory::desc& to) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::reorder::primitive_desc pd(cpu_engine(), from, cpu_engine(), to, attr);
  return std::make_shared<const Reorder>(Reorder{pd, dnnl::reorder(pd)});
}

// Runs a reorder on this thread's stream, with this thread's scratchpad.
void run_reorder(const Reorder& reorder, void* from, void* to) {
  dnnl::engine& engine = cpu_engine();
  std::unordered_map<int, memory> args{
      {DNNL_ARG_FROM, memory(reorder.pd.src_desc(), engine, from)},
      {DNNL_ARG_TO, memory(reorder.pd.dst_desc(), engine, to)}};
  add_thread_scratchpad(reorder.pd, &args);
  reorder.primitive.execute(cpu_stream(), args);
}

// The primitive descriptor `make` gives for the packed layout, unless that
// is oneDNN's reference kernel and the preferred layout (`preferred`, a
// Tag::any description) has a better one; *reorder is then the reorder of
// the packed weights into that layout.
template <typename PrimitiveDesc>
PrimitiveDesc for_packed_weights(
    const std::function<PrimitiveDesc(const memory::desc&)>& make,
    const memory::desc& packed, const memory::desc& preferred,
    std::shared_ptr<const Reorder>* reorder) {
  PrimitiveDesc pd = make(packed);
  if (!is_reference(pd)) return pd;
  PrimitiveDesc better = make(preferred);
  if (is_reference(better) || better.weights_desc() == packed) return pd;
  *reorder = make_reorder(packed, better.weights_desc());
  return better;
}

// The weights argument for one call: the packed data, or its reorder into
// `*storage` (kept alive by the caller for the call).
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

// The memory objects of one primitive's calls on this thread, made once and
// pointed at each call's data (set_data_handle, which writes nothing into
// these plain layouts): making and destroying them per call took a sixth of
// a small convolution's time. The weights' is made again for another
// weight (or when the weights are reordered for the call).
struct CallMemories {
  // The primitive these were made for: another made later at the same
  // address (an entry freed when its cache cleared, or when its maker lost
  // a race) gets memories of its own.
  std::weak_ptr<const void> owner;
  memory src, dst, bias, scratchpad;
  size_t scratchpad_bytes = 0;
  const void* weights_data = nullptr;
  std::unordered_map<int, memory> args;
  std::string kernel_name;
};

template <typename PrimitiveDesc>
CallMemories& call_memories(const std::shared_ptr<const void>& made,
                            const PrimitiveDesc& pd, bool has_bias) {
  thread_local absl::flat_hash_map<const void*, std::unique_ptr<CallMemories>>
      kept;
  thread_local uint64_t generation = 0;
  if (generation != cache_generation.load()) {
    kept.clear();
    generation = cache_generation.load();
  }
  std::unique_ptr<CallMemories>& m = kept[made.get()];
  if (m && m->owner.lock() == made) return *m;
  m = std::make_unique<CallMemories>();
  m->owner = made;
  dnnl::engine& engine = cpu_engine();
  m->src = memory(pd.src_desc(), engine, nullptr);
  m->dst = memory(pd.dst_desc(), engine, nullptr);
  m->args = {{DNNL_ARG_SRC, m->src}, {DNNL_ARG_DST, m->dst}};
  if (has_bias) {
    m->bias = memory(pd.bias_desc(), engine, nullptr);
    m->args.emplace(DNNL_ARG_BIAS, m->bias);
  }
  const memory::desc scratch = pd.scratchpad_desc();
  m->scratchpad_bytes = scratch.get_size();
  if (m->scratchpad_bytes > 0) {
    m->scratchpad = memory(scratch, engine, nullptr);
    m->args.emplace(DNNL_ARG_SCRATCHPAD, m->scratchpad);
  }
  m->kernel_name = pd.impl_info_str();
  return *m;
}

// Points a call's scratchpad at this thread's buffer, grown to fit.
void point_scratchpad(CallMemories* m) {
  if (m->scratchpad_bytes == 0) return;
  m->scratchpad.set_data_handle(thread_scratchpad(m->scratchpad_bytes));
}

// A convolution's or linear layer's bias as float32 values (undefined for
// none), checked to have one value per output channel (`channels`).
at::Tensor float_bias(const char* op, const c10::optional<at::Tensor>& bias,
                      int64_t channels) {
  if (!bias.has_value() || !bias->defined()) return at::Tensor();
  TORCH_CHECK(bias->numel() == channels, op, ": the bias must have ",
              channels, " values, got ", bias->sizes());
  if (bias->scalar_type() == at::kFloat && bias->is_contiguous()) return *bias;
  return bias->to(at::kFloat).contiguous();
}

// Runs a primitive made for a packed weight (`made`: its pd, primitive and
// weights reorder, or none) from `src` into `dst`, with the bias when there
// is one (checked to have one value per output channel, `channels`).
template <typename Made>
void run_made(const std::shared_ptr<const Made>& made_ptr, const void* src,
              const at::Tensor& weight, const Header& header,
              const void* bias, void* dst) {
  const bool has_bias = bias != nullptr;
  const Made& made = *made_ptr;
  CallMemories& m = call_memories(made_ptr, made.pd, has_bias);
  m.src.set_data_handle(const_cast<void*>(src));
  m.dst.set_data_handle(dst);
  if (has_bias) m.bias.set_data_handle(const_cast<void*>(bias));
  std::vector<at::Tensor> reordered;
  if (made.weights_reorder || m.weights_data != packed_data(weight)) {
    m.args[DNNL_ARG_WEIGHTS] =
        weights_for_call(weight, header, made.pd.weights_desc(),
                         made.weights_reorder, &reordered);
    m.weights_data = made.weights_reorder ? nullptr : packed_data(weight);
  }
  point_scratchpad(&m);
  last_kernel_name = m.kernel_name;
  made.primitive.execute(cpu_stream(), m.args);
  cpu_stream().wait();
}

template <typename Made>
void run_with_weights(const char* op, const std::shared_ptr<const Made>& made_ptr,
                      const at::Tensor& src,
                      const at::Tensor& weight, const Header& header,
                      const c10::optional<at::Tensor>& bias, int64_t channels,
                      const at::Tensor& dst) {
  const at::Tensor bias_values = float_bias(op, bias, channels);
  run_made(made_ptr, src.data_ptr(), weight, header,
           bias_values.defined() ? bias_values.data_ptr() : nullptr,
           dst.data_ptr());
}

// --- Weights reordered for a kernel, kept --------------------------------------
// A weight in the layout a kernel wants that its tensor does not hold
// (oneDNN's RNN primitives' and run_recurrences' layouts, Winograd
// convolutions'), reordered once per weight tensor and layout and kept
// while the tensor lives unwritten (its version counter) and reads the same
// data. The weights come from init steps, which make them once; a weight
// written in place through autograd's view of it is reordered again (one
// written inside an InferenceMode guard, or through its raw data, is not:
// rerun the init steps, as for packed convolution weights).
class ReorderedWeights {
 public:
  // `weight`'s data (as `from` describes it) as `wanted` describes it;
  // *keep holds that data for the call (another thread may reorder a weight
  // written in place meanwhile).
  memory get(const at::Tensor& weight, const memory::desc& from,
             const memory::desc& wanted, at::Tensor* keep) {
    const auto wanted_bytes =
        std::string(reinterpret_cast<const char*>(&wanted.data),
                    sizeof(wanted.data));
    c10::StorageImpl* storage = weight.storage().unsafeGetStorageImpl();
    // Inference tensors keep no version counter.
    const uint32_t version = weight.is_inference() ? 0 : weight._version();
    const std::pair<const void*, std::string> key{weight.data_ptr(),
                                                  wanted_bytes};
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = entries_.find(key);
      if (it != entries_.end() &&
          it->second.storage.lock().get() == storage &&
          it->second.version == version) {
        *keep = it->second.reordered;
        return memory(wanted, cpu_engine(), keep->data_ptr());
      }
    }
    // Reordered outside the lock: other threads' calls go on meanwhile.
    Entry entry{weight.storage().getWeakStorageImpl(), version,
                reordered(weight, from, wanted)};
    *keep = entry.reordered;
    std::lock_guard<std::mutex> lock(mutex_);
    // Forget the weights that are gone (a destroyed model's), here rather
    // than on every call.
    for (auto e = entries_.begin(); e != entries_.end();) {
      if (e->second.storage.expired()) {
        entries_.erase(e++);
      } else {
        ++e;
      }
    }
    entries_.insert_or_assign(key, std::move(entry));
    return memory(wanted, cpu_engine(), keep->data_ptr());
  }

  // `weight`'s data reordered, not kept (a temporary's). oneDNN reorders
  // into some layouts (Winograd's) only from plain ones: from another, the
  // data goes through its plain float32 layout.
  static at::Tensor reordered(const at::Tensor& weight,
                              const memory::desc& from,
                              const memory::desc& wanted) {
    at::Tensor out =
        at::empty({static_cast<int64_t>(wanted.get_size())}, at::kByte);
    memory source(from, cpu_engine(), weight.data_ptr());
    memory to(wanted, cpu_engine(), out.data_ptr());
    dnnl::reorder::primitive_desc direct;
    try {
      direct = dnnl::reorder::primitive_desc(source, to);
    } catch (const dnnl::error&) {
      const memory::dims dims = from.dims();
      at::Tensor plain = at::empty(dims, at::kFloat);
      memory through(memory::desc(dims, DataType::f32,
                                  memory::dims(plain.strides().begin(),
                                               plain.strides().end())),
                     cpu_engine(), plain.data_ptr());
      dnnl::reorder(source, through).execute(cpu_stream(), source, through);
      dnnl::reorder(through, to).execute(cpu_stream(), through, to);
      cpu_stream().wait();
      return out;
    }
    dnnl::reorder(direct).execute(cpu_stream(), source, to);
    cpu_stream().wait();
    return out;
  }

  // Drops every kept weight (made again at its next call).
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.clear();
  }

  static ReorderedWeights& instance() {
    static auto* weights = new ReorderedWeights();  // outlives every call
    return *weights;
  }

 private:
  struct Entry {
    c10::weak_intrusive_ptr<c10::StorageImpl> storage;
    uint32_t version;
    at::Tensor reordered;
  };
  std::mutex mutex_;
  absl::flat_hash_map<std::pair<const void*, std::string>, Entry> entries_;
};

// --- Convolution ------------------------------------------------------------
// A convolution's channels-last src and dst (in `compute` and `output`)
// and its float32 bias (none without one).
struct ActivationDescs {
  memory::desc src, dst, bias;
};
// src and dst channels-last, unless `src_layout` / `dst_layout` say
// otherwise (Tag::undef: channels-last).
ActivationDescs activation_descs(at::IntArrayRef input,
                                 at::IntArrayRef output_size, bool bias,
                                 DataType compute, DataType output,
                                 Tag src_layout = Tag::undef,
                                 Tag dst_layout = Tag::undef) {
  const Tag layout = channels_last_tag(static_cast<int64_t>(input.size()));
  return {memory::desc(dims_of(input), compute,
                       src_layout == Tag::undef ? layout : src_layout),
          memory::desc(dims_of(output_size), output,
                       dst_layout == Tag::undef ? layout : dst_layout),
          bias ? memory::desc({output_size[1]}, DataType::f32, Tag::x)
               : memory::desc()};
}

struct ConvGeometry {
  std::vector<int64_t> output_size;
  memory::dims strides, dilates, padding;
};

// A convolution's number of spatial dimensions (1 to 3), checked against
// its weight's rank and its per-dimension lists (named by `names`).
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

memory::desc conv_weight_desc(at::IntArrayRef weight, int64_t groups,
                              Tag tag, DataType type = DataType::f32) {
  memory::dims dims = dims_of(weight);
  if (groups > 1) {
    dims[0] /= groups;
    dims.insert(dims.begin(), groups);
  }
  return memory::desc(dims, type, tag);
}

// src in `compute` (the weights' type), dst in `output`, bias in float32.
dnnl::convolution_forward::primitive_desc conv_descriptor(
    at::IntArrayRef input, const ConvGeometry& g,
    const memory::desc& weight_desc, bool bias,
    const dnnl::primitive_attr& attr, DataType compute = DataType::f32,
    DataType output = DataType::f32, Tag src_layout = Tag::undef,
    Tag dst_layout = Tag::undef) {
  const ActivationDescs d = activation_descs(
      input, g.output_size, bias, compute, output, src_layout, dst_layout);
  dnnl::convolution_forward::desc desc(
      dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
      d.src, weight_desc, d.bias, d.dst, g.strides, g.dilates, g.padding,
      g.padding);
  return dnnl::convolution_forward::primitive_desc(desc, attr, cpu_engine());
}

// bfloat16 packing where oneDNN has no bfloat16 kernels: a clear error
// instead of oneDNN's "could not create a primitive descriptor iterator".
void check_bf16(const char* op, bool bf16) {
  TORCH_CHECK(!bf16 || bf16_supported(), op,
              ": bf16 needs a CPU with AVX-512 (avx512_core), where oneDNN "
              "has bfloat16 kernels; this one has none: pack in float32");
}

at::Tensor pack_conv_weight(const at::Tensor& weight,
                            at::IntArrayRef input_size, at::IntArrayRef stride,
                            at::IntArrayRef padding, at::IntArrayRef dilation,
                            int64_t groups, bool bf16) {
  const char* op = "fx_onednn::pack_conv_weight";
  TORCH_CHECK(weight.device().is_cpu() && weight.scalar_type() == at::kFloat,
              op, ": the weight must be a float32 CPU tensor, got ",
              weight.toString());
  check_bf16(op, bf16);
  const ConvGeometry g = conv_geometry(op, input_size, weight.sizes(), stride,
                                       padding, dilation, groups);
  const DataType type = bf16 ? DataType::bf16 : DataType::f32;
  const auto pd = conv_descriptor(
      input_size, g, conv_weight_desc(weight.sizes(), groups, Tag::any, type),
      /*bias=*/true, dnnl::primitive_attr(), type, type);
  return pack(weight, plain_weight_desc(PackKind::kConv, weight.sizes(), groups),
              pd.weights_desc(), weight.sizes(), PackKind::kConv);
}

struct Conv {
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward primitive;
  std::shared_ptr<const Reorder> weights_reorder;  // or null
  // A Winograd convolution reads and writes oneDNN's blocked layout: the
  // reorders of the channels-last src into it, of dst out of it, and (with
  // a residual) of dst into it.
  bool winograd = false;
  std::shared_ptr<const Reorder> src_in = nullptr, dst_in = nullptr,
                                 dst_out = nullptr;
};

// --- Winograd convolutions ----------------------------------------------------
// 3x3 convolutions of stride 1 on oneDNN's Winograd kernels (F(2x2, 3x3)
// and F(4x4, 3x3), float32): at 14x14 and larger outputs, in 0.45-0.8x the
// time of its direct ones, the reorders into their blocked layout and back
// included (64-256 channels, batch 1 and 8); at 7x7, slower (1.3-1.4x at
// batch 8), so not there. Their weights are reordered from the packed ones
// at the first call and kept (ReorderedWeights: 1.8x the weight's size for
// F(2x2), 4x for F(4x4)). They take relu (and the residual sum) as their
// only post-ops; a convolution fusing another activation stays direct.
std::atomic<bool> winograd_enabled{true};

bool winograd_candidate(at::IntArrayRef input, at::IntArrayRef weight,
                        const ConvGeometry& g, int64_t groups,
                        DataType compute, DataType output,
                        c10::string_view activation) {
  return winograd_enabled.load() && input.size() == 4 && groups == 1 &&
         weight[2] == 3 && weight[3] == 3 && g.strides == memory::dims{1, 1} &&
         g.dilates == memory::dims{0, 0} && compute == DataType::f32 &&
         output == DataType::f32 &&
         (activation == "none" || activation == "relu") &&
         g.output_size[2] >= 14 && g.output_size[3] >= 14;
}

// The Winograd convolution for a call, or null when oneDNN has none for it
// (an unsupported post-op, channel count or ISA).
std::shared_ptr<const Conv> make_winograd(at::IntArrayRef input,
                                          at::IntArrayRef weight,
                                          const ConvGeometry& g, bool bias,
                                          bool sum,
                                          const dnnl::primitive_attr& attr) {
  const ActivationDescs d = activation_descs(input, g.output_size, bias,
                                             DataType::f32, DataType::f32);
  try {
    dnnl::convolution_forward::desc desc(
        dnnl::prop_kind::forward_inference,
        dnnl::algorithm::convolution_winograd,
        memory::desc(d.src.dims(), DataType::f32, Tag::any),
        conv_weight_desc(weight, 1, Tag::any), d.bias,
        memory::desc(d.dst.dims(), DataType::f32, Tag::any), g.strides,
        g.dilates, g.padding, g.padding);
    dnnl::convolution_forward::primitive_desc pd(desc, attr, cpu_engine());
    if (is_reference(pd)) return nullptr;
    auto conv = std::make_shared<Conv>(
        Conv{pd, dnnl::convolution_forward(pd), nullptr});
    conv->winograd = true;
    conv->src_in = make_reorder(d.src, pd.src_desc());
    conv->dst_out = make_reorder(pd.dst_desc(), d.dst);
    if (sum) conv->dst_in = make_reorder(d.dst, pd.dst_desc());
    return conv;
  } catch (const dnnl::error&) {
    return nullptr;
  }
}

// A Winograd convolution from the channels-last `src` into `dst` (which
// holds the residual on entry with a sum post-op), through blocked copies.
void run_winograd(const char* op, const Conv& made, const at::Tensor& src,
                  const at::Tensor& weight, const Header& header,
                  const c10::optional<at::Tensor>& bias, int64_t channels,
                  const at::Tensor& dst, bool sum) {
  const at::Tensor bias_values = float_bias(op, bias, channels);
  const bool has_bias = bias_values.defined();
  at::Tensor keep;
  const memory weights = ReorderedWeights::instance().get(
      weight, memory::desc(header.desc), made.pd.weights_desc(), &keep);
  dnnl::engine& engine = cpu_engine();
  auto blocked = [&](const memory::desc& desc) {
    return empty_activation({static_cast<int64_t>(desc.get_size())},
                            at::TensorOptions(at::kByte));
  };
  const at::Tensor src_blocked = blocked(made.pd.src_desc());
  const at::Tensor dst_blocked = blocked(made.pd.dst_desc());
  const memory src_memory(made.pd.src_desc(), engine, src_blocked.data_ptr());
  const memory dst_memory(made.pd.dst_desc(), engine, dst_blocked.data_ptr());
  run_reorder(*made.src_in, src.data_ptr(), src_blocked.data_ptr());
  if (sum) run_reorder(*made.dst_in, dst.data_ptr(), dst_blocked.data_ptr());
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_memory},
                                       {DNNL_ARG_WEIGHTS, weights},
                                       {DNNL_ARG_DST, dst_memory}};
  if (has_bias) {
    args.emplace(DNNL_ARG_BIAS, memory(made.pd.bias_desc(), engine,
                                       bias_values.data_ptr()));
  }
  add_thread_scratchpad(made.pd, &args);
  last_kernel_name = made.pd.impl_info_str();
  made.primitive.execute(cpu_stream(), args);
  run_reorder(*made.dst_out, dst_blocked.data_ptr(), dst.data_ptr());
  cpu_stream().wait();
}

// --- Call sites --------------------------------------------------------------
// A lowered graph calls each convolution and linear layer on a packed
// weight of its own with the same arguments every time. This thread's last
// plan for a packed weight (its primitive, the output's sizes) is kept with
// the arguments it was made for and serves a call that repeats them: the
// primitive cache's key (the packed layout's 696-byte description in it)
// and the geometry cost more than a small convolution's oneDNN call (0.8
// against 1.4 us a call at one thread, 16 channels at 2x2).
struct SiteArgs {
  absl::InlinedVector<int64_t, 24> ints;  // sizes, lists, flags
  c10::string_view activation;
  double alpha = 0, beta = 0;
};

template <typename Plan, typename Make>
const Plan& plan_for_site(const at::Tensor& weight, const Header& header,
                          SiteArgs args, const Make& make) {
  struct Site {
    absl::InlinedVector<int64_t, 24> ints;
    std::string activation;
    double alpha = 0, beta = 0;
    dnnl_memory_desc_t weight_desc;
    Plan plan;
  };
  thread_local absl::flat_hash_map<const void*, Site> sites;
  args.ints.push_back(at::get_num_threads());
  auto same_bits = [](double a, double b) {
    return std::memcmp(&a, &b, sizeof(double)) == 0;
  };
  const void* key = packed_data(weight);
  auto it = sites.find(key);
  if (it != sites.end() && it->second.ints == args.ints &&
      it->second.activation == args.activation &&
      same_bits(it->second.alpha, args.alpha) &&
      same_bits(it->second.beta, args.beta) &&
      std::memcmp(&it->second.weight_desc, &header.desc,
                  sizeof(header.desc)) == 0) {
    return it->second.plan;
  }
  Plan plan = make();
  if (sites.size() >= 4096) sites.clear();  // the weights of graphs gone
  Site& site = sites[key];
  site.ints = std::move(args.ints);
  site.activation = std::string(args.activation);
  site.alpha = args.alpha;
  site.beta = args.beta;
  site.weight_desc = header.desc;
  site.plan = std::move(plan);
  return site.plan;
}

// What a convolution call runs: its primitive (and Winograd's reorders),
// the output's sizes, and whether SiLU runs as a pass after it.
struct ConvPlan {
  std::shared_ptr<const Conv> made;
  std::vector<int64_t> output_size, output_strides;  // channels-last
  at::ScalarType compute = at::kFloat;  // the input's, converted
  bool silu_pass = false;
  bool planar_src = false;  // reads the input as it is (planar_first_conv)
};

// --- A first convolution of 16 channels on a planar image ------------------
// The first convolution of a vision model reads an NCHW image of 3
// channels, which the others' channels-last layout would copy first
// (rgb_to_channels_last: 26 us at batch 1, 190 us at batch 8). With 16
// output channels (MobileNetV3's), oneDNN's first-layer kernel reads the
// planes themselves and writes nChw16c, which for 16 channels is the
// channels-last layout byte for byte: the copy goes (MobileNetV3-Small's
// first layer at batch 8 480 -> 320 us). With more channels its blocked
// output would need a copy of its own, larger than the image's.
bool planar_first_conv(const at::Tensor& input, at::IntArrayRef weight,
                       int64_t groups, DataType compute, DataType output) {
  return input.dim() == 4 && input.size(1) < 16 && weight[0] == 16 &&
         groups == 1 && compute == DataType::f32 &&
         output == DataType::f32 && input.is_contiguous() &&
         !is_channels_last_dense(input);
}

ConvPlan make_conv_plan(const char* op, const at::Tensor& input,
                        const at::Tensor& weight, const Header& header,
                        bool has_bias, at::IntArrayRef stride,
                        at::IntArrayRef padding, at::IntArrayRef dilation,
                        int64_t groups, bool sum, c10::string_view activation,
                        double alpha, double beta, DataType output) {
  const ConvGeometry g = conv_geometry(op, input.sizes(), weight.sizes(),
                                       stride, padding, dilation, groups);
  const DataType compute = compute_type(op, header, input);
  std::string key;
  absl::StrAppend(&key, static_cast<int>(compute), static_cast<int>(output),
                  "|");
  append_key(&key, input.sizes());
  append_key(&key, g.output_size);
  append_key(&key, stride);
  append_key(&key, padding);
  append_key(&key, dilation);
  absl::StrAppend(&key, groups, "|", has_bias, sum, "|",
                  std::string(activation), "|", at::get_num_threads(), "|");
  append_key(&key, alpha);
  append_key(&key, beta);
  key.append(reinterpret_cast<const char*>(&header.desc), sizeof(header.desc));
  const bool winograd =
      winograd_candidate(input.sizes(), weight.sizes(), g, groups, compute,
                         output, activation);
  key.push_back(winograd ? 'w' : 'd');
  const bool planar =
      planar_first_conv(input, weight.sizes(), groups, compute, output);

  ConvPlan plan;
  plan.compute = scalar_type_of(compute);
  plan.silu_pass = silu_as_pass(activation, output);
  plan.output_size = g.output_size;
  plan.output_strides = channels_last_strides(g.output_size);
  const dnnl::primitive_attr attr =
      post_ops(op, sum, plan.silu_pass ? "none" : activation, alpha, beta);
  // The direct convolution from src_layout into dst_layout (Tag::undef:
  // channels-last).
  auto direct = [&](Tag src_layout, Tag dst_layout) {
    std::shared_ptr<const Reorder> reorder;
    auto pd = for_packed_weights<dnnl::convolution_forward::primitive_desc>(
        [&](const memory::desc& weights) {
          return conv_descriptor(input.sizes(), g, weights, has_bias, attr,
                                 compute, output, src_layout, dst_layout);
        },
        memory::desc(header.desc),
        conv_weight_desc(weight.sizes(), groups, Tag::any, compute),
        &reorder);
    return std::make_shared<const Conv>(
        Conv{pd, dnnl::convolution_forward(pd), reorder});
  };
  static PrimitiveCache<std::shared_ptr<const Conv>> cache;
  if (planar) {
    plan.made = cache.get(key + "p", [&]() -> std::shared_ptr<const Conv> {
      auto conv = direct(Tag::nchw, Tag::nChw16c);
      return is_reference(conv->pd) ? nullptr : conv;
    });
    if (plan.made) {
      plan.planar_src = true;
      return plan;
    }
  }
  plan.made = cache.get(key, [&]() -> std::shared_ptr<const Conv> {
    if (winograd) {
      if (auto conv = make_winograd(input.sizes(), weight.sizes(), g,
                                    has_bias, sum, attr)) {
        return conv;
      }
    }
    return direct(Tag::undef, Tag::undef);
  });
  return plan;
}

const ConvPlan& conv_plan(const char* op, const at::Tensor& input,
                          const at::Tensor& weight, const Header& header,
                          bool has_bias, at::IntArrayRef stride,
                          at::IntArrayRef padding, at::IntArrayRef dilation,
                          int64_t groups, bool sum,
                          c10::string_view activation, double alpha,
                          double beta, DataType output) {
  SiteArgs args{{}, activation, alpha, beta};
  for (at::IntArrayRef list : {input.sizes(), stride, padding, dilation}) {
    args.ints.push_back(static_cast<int64_t>(list.size()));
    args.ints.insert(args.ints.end(), list.begin(), list.end());
  }
  args.ints.insert(args.ints.end(),
                   {static_cast<int64_t>(input.scalar_type()),
                    static_cast<int64_t>(output), groups, has_bias, sum,
                    winograd_enabled.load(), is_channels_last_dense(input),
                    input.is_contiguous()});
  return plan_for_site<ConvPlan>(weight, header, std::move(args), [&] {
    return make_conv_plan(op, input, weight, header, has_bias, stride,
                          padding, dilation, groups, sum, activation, alpha,
                          beta, output);
  });
}

// Runs the convolution planned for this call into `dst` (channels-last
// dense, of the output's sizes); with `sum`, dst holds the residual on
// entry.
void conv_into(const char* op, const at::Tensor& dst, const at::Tensor& input,
               const at::Tensor& weight, const Header& header,
               const c10::optional<at::Tensor>& bias, const ConvPlan& plan,
               bool sum) {
  at::Tensor src =
      input.scalar_type() == plan.compute ? input : input.to(plan.compute);
  if (!plan.planar_src) src = to_channels_last(src);
  const int64_t channels = plan.output_size[1];
  const Conv& made = *plan.made;
  if (made.winograd) {
    run_winograd(op, made, src, weight, header, bias, channels, dst, sum);
  } else {
    run_with_weights(op, plan.made, src, weight, header, bias, channels, dst);
  }
  if (plan.silu_pass) silu_in_place(dst.data_ptr<float>(), dst.numel());
}

void check_input(const char* op, const at::Tensor& input) {
  TORCH_CHECK(input.device().is_cpu(), op,
              ": the input must be a CPU tensor, got ", input.toString());
  data_type_of(op, input, "input");
}

void check_residual(const char* op, const at::Tensor& other,
                    at::IntArrayRef output_size) {
  TORCH_CHECK(other.sizes() == output_size, op, ": the residual has sizes ",
              other.sizes(), " but the convolution's output has ",
              output_size, "; the residual must match it exactly");
  TORCH_CHECK(other.device().is_cpu(), op,
              ": the residual must be a CPU tensor, got ", other.toString());
  data_type_of(op, other, "residual");
}

at::Tensor conv(const at::Tensor& input, const at::Tensor& weight,
                const c10::optional<at::Tensor>& bias, at::IntArrayRef stride,
                at::IntArrayRef padding, at::IntArrayRef dilation,
                int64_t groups, const c10::optional<at::Tensor>& other,
                c10::string_view activation, double alpha, double beta) {
  const char* op = "fx_onednn::conv";
  check_input(op, input);
  const Header& header =
      header_of(weight, op, "fx_onednn::pack_conv_weight");
  const bool has_other = other.has_value() && other->defined();
  const ConvPlan& plan = conv_plan(
      op, input, weight, header, bias.has_value() && bias->defined(), stride,
      padding, dilation, groups, has_other, activation, alpha, beta,
      data_type_of(op, input, "input"));
  at::Tensor dst = empty_activation(plan.output_size, plan.output_strides,
                                    input.options());
  if (has_other) {
    check_residual(op, *other, dst.sizes());
    dst.copy_(*other);
  }
  conv_into(op, dst, input, weight, header, bias, plan, has_other);
  return dst;
}

// self = activation(self + conv(input)), in self's memory.
at::Tensor& conv_add_(at::Tensor& self, const at::Tensor& input,
                      const at::Tensor& weight,
                      const c10::optional<at::Tensor>& bias,
                      at::IntArrayRef stride, at::IntArrayRef padding,
                      at::IntArrayRef dilation, int64_t groups,
                      c10::string_view activation, double alpha,
                      double beta) {
  const char* op = "fx_onednn::conv_add_";
  check_input(op, input);
  const Header& header =
      header_of(weight, op, "fx_onednn::pack_conv_weight");
  TORCH_CHECK(self.scalar_type() == input.scalar_type(), op,
              ": the residual (", self.toString(), ") and the input (",
              input.toString(), ") must have one dtype");
  const ConvPlan& plan = conv_plan(
      op, input, weight, header, bias.has_value() && bias->defined(), stride,
      padding, dilation, groups, true, activation, alpha, beta,
      data_type_of(op, self, "residual"));
  check_residual(op, self, plan.output_size);
  if (is_channels_last_dense(self) && self.numel() > 0) {
    conv_into(op, self, input, weight, header, bias, plan, true);
  } else {
    at::Tensor dst = to_channels_last(self).clone();
    conv_into(op, dst, input, weight, header, bias, plan, true);
    self.copy_(dst);
  }
  return self;
}

at::Tensor conv_meta(const at::Tensor& input, const at::Tensor& weight,
                     const c10::optional<at::Tensor>&, at::IntArrayRef stride,
                     at::IntArrayRef padding, at::IntArrayRef dilation,
                     int64_t groups, const c10::optional<at::Tensor>&,
                     c10::string_view, double, double) {
  const ConvGeometry g =
      conv_geometry("fx_onednn::conv", input.sizes(), weight.sizes(), stride,
                    padding, dilation, groups);
  return empty_channels_last(g.output_size, input.options());
}

at::Tensor& conv_add_meta(at::Tensor& self, const at::Tensor& input,
                          const at::Tensor& weight,
                          const c10::optional<at::Tensor>&,
                          at::IntArrayRef stride, at::IntArrayRef padding,
                          at::IntArrayRef dilation, int64_t groups,
                          c10::string_view, double, double) {
  const ConvGeometry g =
      conv_geometry("fx_onednn::conv_add_", input.sizes(), weight.sizes(),
                    stride, padding, dilation, groups);
  check_residual("fx_onednn::conv_add_", self, g.output_size);
  return self;
}

at::Tensor pack_conv_weight_meta(const at::Tensor& weight, at::IntArrayRef,
                                 at::IntArrayRef, at::IntArrayRef,
                                 at::IntArrayRef, int64_t, bool) {
  return at::empty(weight.sizes(), weight.options());
}

// --- Convolution chains ------------------------------------------------------
// A run of convolutions each reading the one before (MobileNetV2's 51 after
// its first) as one call: each thread of one parallel region takes the same
// rows of every layer's output and runs a one-thread primitive on them,
// waiting for the others only before a layer that reads rows another
// thread wrote (a k x k convolution's neighbouring rows) or that writes
// memory another thread may still read. Called one by one, every layer
// forks and joins the team: at batch 1 on two threads, a small layer's
// waits cost as much as its work (MobileNetV2's 51 layers: 0.94-0.96x the
// time as one region). The values between the layers live in a few
// buffers, reused once every thread is past their last reader.
constexpr int64_t kChainInts = 4;  // per layer: stride, padding, groups, residual

struct ChainLayer {
  int64_t stride, padding, groups, residual;  // residual: a value, or -1
  std::vector<int64_t> input_size, output_size;
  c10::string_view activation;
  double alpha, beta;
};

// One thread's part of one layer: its rows' primitive (null when it has
// none), where they read and write, and whether all threads wait first.
struct ChainStep {
  std::shared_ptr<const Conv> made;
  bool silu_pass = false;
  int64_t src_value = 0, dst_value = 0;
  int64_t src_offset = 0, dst_offset = 0, dst_floats = 0;  // floats
  bool barrier = false;
};

struct ChainPlan {
  int threads = 1;
  std::vector<std::vector<ChainStep>> steps;  // [thread][layer]
  std::vector<int64_t> value_slot;            // -1: the chain's input
  std::vector<int64_t> slot_floats;
};

// The layers of a chain, checked: one weight, bias, activation and two
// parameters per layer, kChainInts ints, and each residual an earlier
// layer's output of the same sizes.
std::vector<ChainLayer> chain_layers(const char* op, const at::Tensor& input,
                                     at::TensorList weights,
                                     at::TensorList biases,
                                     at::IntArrayRef layers,
                                     c10::string_view activation_list,
                                     at::ArrayRef<double> params) {
  const int64_t n = static_cast<int64_t>(weights.size());
  // The activations, one per layer, separated by commas.
  const std::vector<absl::string_view> activations = absl::StrSplit(
      absl::string_view(activation_list.data(), activation_list.size()), ',');
  TORCH_CHECK(n >= 1 && static_cast<int64_t>(biases.size()) == n &&
                  static_cast<int64_t>(layers.size()) == kChainInts * n &&
                  static_cast<int64_t>(activations.size()) == n &&
                  static_cast<int64_t>(params.size()) == 2 * n,
              op, ": a chain of n layers takes n weights, n biases, ",
              kChainInts, "n ints (stride, padding, groups, residual), n "
              "activations (separated by commas) and 2n parameters; got ", weights.size(), ", ",
              biases.size(), ", ", layers.size(), ", ", activations.size(),
              " and ", params.size());
  TORCH_CHECK(input.dim() == 4, op, ": the input must be 4-d, got ",
              input.sizes());
  std::vector<ChainLayer> out;
  std::vector<bool> overwritten(n + 1, false);
  std::vector<int64_t> size = input.sizes().vec();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t* l = layers.data() + kChainInts * i;
    ChainLayer layer{l[0], l[1], l[2], l[3], size, {},
                     c10::string_view(activations[i].data(),
                                      activations[i].size()),
                     params[2 * i], params[2 * i + 1]};
    const ConvGeometry g = conv_geometry(
        op, size, weights[i].sizes(), {layer.stride, layer.stride},
        {layer.padding, layer.padding}, {1, 1}, layer.groups);
    layer.output_size = g.output_size;
    // A value another layer added into since holds that sum now.
    TORCH_CHECK(layer.residual == -1 ||
                    (layer.residual >= 1 && layer.residual < i &&
                     out[layer.residual - 1].output_size == g.output_size &&
                     !overwritten[layer.residual]),
                op, ": layer ", i, "'s residual must be -1 or the output of "
                "a layer before its input's (1 to ", i - 1, "), of its "
                "output's sizes ", g.output_size, " and not added into by "
                "another layer since, got ", layer.residual);
    if (layer.residual >= 0) overwritten[layer.residual] = true;
    out.push_back(std::move(layer));
    size = g.output_size;
  }
  return out;
}

// Thread t's part of layer `l`'s output and the part of its input that
// part reads, in pixels: a 1x1 convolution of stride 1 takes an equal
// share of the pixels (at 7x7, rows would split 3:4), any other whole rows
// (`rows`; their input rows clamped to the input, the rest padding). A
// primitive needs at least one input row: where some thread's rows would
// read padding only (a padding larger than the kernel reaches, on a tiny
// image), thread 0 takes all the layer's rows.
struct ChainPart {
  int64_t first, last, in_first, in_last;
  bool pointwise;
  int64_t rows, in_rows, row;  // row: the first output row
};
ChainPart chain_rows(const ChainLayer& l, int64_t kernel, int64_t first,
                     int64_t last) {
  const int64_t width = l.input_size[3], out_width = l.output_size[3];
  const int64_t in_first =
      std::max<int64_t>(first * l.stride - l.padding, 0);
  const int64_t in_last = std::min<int64_t>(
      (last - 1) * l.stride - l.padding + kernel, l.input_size[2]);
  return {first * out_width, last * out_width, in_first * width,
          in_last * width, false, last - first, in_last - in_first, first};
}
ChainPart chain_part(const ChainLayer& l, int64_t kernel, int t, int threads) {
  const int64_t out_width = l.output_size[3];
  if (kernel == 1 && l.stride == 1 && l.padding == 0) {
    auto [first, last] =
        thread_share(l.output_size[2] * out_width, t, threads);
    return {first, last, first, last, true, 0, 0, 0};
  }
  for (int other = 0; other < threads; ++other) {
    auto [first, last] = thread_share(l.output_size[2], other, threads);
    if (first < last && chain_rows(l, kernel, first, last).in_rows <= 0) {
      return t == 0 ? chain_rows(l, kernel, 0, l.output_size[2])
                    : ChainPart{0, 0, 0, 0, false, 0, 0, 0};
    }
  }
  auto [first, last] = thread_share(l.output_size[2], t, threads);
  return chain_rows(l, kernel, first, last);
}

std::shared_ptr<const ChainPlan> make_chain_plan(
    const char* op, const std::vector<ChainLayer>& layers,
    at::TensorList weights, int threads) {
  const int64_t n = static_cast<int64_t>(layers.size());
  auto plan = std::make_shared<ChainPlan>();
  plan->threads = threads;
  // Which rows of each value each thread wrote (the input: all, before).
  auto kernel = [&](int64_t i) { return weights[i].size(2); };
  auto own = [&](int64_t value, int t, int64_t first, int64_t last) {
    if (value == 0) return true;
    const ChainPart r = chain_part(layers[value - 1], kernel(value - 1), t,
                                   threads);
    return first >= r.first && last <= r.last;
  };
  // The value whose memory each value is (a residual layer writes into
  // its residual's), and when each memory is last read or written.
  std::vector<int64_t> root(n + 1), last_use(n + 1, 0);
  for (int64_t v = 0; v <= n; ++v) {
    root[v] = v == 0 || layers[v - 1].residual < 0
                  ? v
                  : root[layers[v - 1].residual];
  }
  std::vector<bool> barrier(n, false);
  // Whether the threads wait before any layer in (after, upto].
  auto waited_between = [&](int64_t after, int64_t upto) {
    for (int64_t k = after + 1; k <= upto; ++k) {
      if (barrier[k]) return true;
    }
    return false;
  };
  // Per memory, the last layer that read rows of it another thread wrote.
  std::vector<int64_t> crossed_at(n + 1, -1);
  for (int64_t i = 0; i < n; ++i) {
    const ChainLayer& l = layers[i];
    bool crosses = false, residual_crosses = false;
    for (int t = 0; t < threads; ++t) {
      const ChainPart r = chain_part(l, kernel(i), t, threads);
      if (r.first == r.last) continue;
      crosses |= !own(i, t, r.in_first, r.in_last);
      if (l.residual >= 0) {
        residual_crosses |= !own(l.residual, t, r.first, r.last);
      }
    }
    // Writing in place where another thread still reads waits for it.
    const int64_t crossed = l.residual >= 0 ? crossed_at[root[l.residual]] : -1;
    barrier[i] = crosses || residual_crosses ||
                 (crossed >= 0 && !waited_between(crossed, i - 1));
    if (crosses) crossed_at[root[i]] = i;
    last_use[root[i]] = i;
    if (l.residual >= 0) last_use[root[l.residual]] = i;
  }
  last_use[root[n]] = n;  // the output outlives the chain
  // A memory per value that is not a residual's: a buffer another memory
  // left, once every thread is past its last use, or a new one.
  std::vector<int64_t> holder;  // per slot, the memory in it
  plan->value_slot.assign(n + 1, -1);
  for (int64_t v = 1; v <= n; ++v) {
    if (root[v] != v) {
      plan->value_slot[v] = plan->value_slot[root[v]];
      continue;
    }
    const int64_t floats = c10::multiply_integers(layers[v - 1].output_size);
    int64_t best = -1;
    if (root[n] != v) {
      for (size_t s = 0; s < holder.size(); ++s) {
        const int64_t held = holder[s];
        if (root[n] == held || last_use[held] >= v - 1 ||
            !waited_between(last_use[held], v - 1)) {
          continue;
        }
        if (best < 0 || std::abs(plan->slot_floats[s] - floats) <
                            std::abs(plan->slot_floats[best] - floats)) {
          best = static_cast<int64_t>(s);
        }
      }
    }
    if (best < 0) {
      best = static_cast<int64_t>(holder.size());
      holder.push_back(v);
      plan->slot_floats.push_back(floats);
    }
    holder[best] = v;
    plan->slot_floats[best] = std::max(plan->slot_floats[best], floats);
    plan->value_slot[v] = best;
  }
  // Each thread's one-thread primitives on its rows.
  plan->steps.assign(threads, std::vector<ChainStep>(n));
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);  // oneDNN plans its kernels for this many
  try {
    for (int64_t i = 0; i < n; ++i) {
      const ChainLayer& l = layers[i];
      const Header& header =
          header_of(weights[i], op, "fx_onednn::pack_conv_weight");
      const int64_t width = l.input_size[3], out_width = l.output_size[3];
      const int64_t in_channels = l.input_size[1],
                    out_channels = l.output_size[1];
      const bool silu = silu_as_pass(l.activation, DataType::f32);
      const dnnl::primitive_attr attr =
          post_ops(op, l.residual >= 0, silu ? "none" : l.activation, l.alpha,
                   l.beta);
      for (int t = 0; t < threads; ++t) {
        const ChainPart r = chain_part(l, kernel(i), t, threads);
        ChainStep& step = plan->steps[t][i];
        step.barrier = barrier[i];
        step.src_value = i;
        step.dst_value = i + 1;
        if (r.first == r.last) continue;
        std::vector<int64_t> in_size;
        ConvGeometry g;
        g.strides = {l.stride, l.stride};
        g.dilates = {0, 0};
        memory::dims padding_after;
        if (r.pointwise) {
          // The pixels as one row.
          in_size = {1, in_channels, 1, r.last - r.first};
          g.output_size = {1, out_channels, 1, r.last - r.first};
          g.padding = {0, 0};
          padding_after = {0, 0};
        } else {
          const int64_t top =
              std::max<int64_t>(l.padding - r.row * l.stride, 0);
          const int64_t bottom = std::max<int64_t>(
              (r.row + r.rows - 1) * l.stride - l.padding + kernel(i) -
                  l.input_size[2],
              0);
          in_size = {1, in_channels, r.in_rows, width};
          g.output_size = {1, out_channels, r.rows, out_width};
          g.padding = {top, l.padding};
          padding_after = {bottom, l.padding};
        }
        std::shared_ptr<const Reorder> reorder;
        auto make = [&](const memory::desc& weights_desc) {
          const ActivationDescs d = activation_descs(
              in_size, g.output_size, true, DataType::f32, DataType::f32);
          dnnl::convolution_forward::desc desc(
              dnnl::prop_kind::forward_inference,
              dnnl::algorithm::convolution_direct, d.src, weights_desc,
              d.bias, d.dst, g.strides, g.dilates, g.padding, padding_after);
          return dnnl::convolution_forward::primitive_desc(desc, attr,
                                                           cpu_engine());
        };
        auto pd = for_packed_weights<dnnl::convolution_forward::primitive_desc>(
            make, memory::desc(header.desc),
            conv_weight_desc(weights[i].sizes(), l.groups, Tag::any),
            &reorder);
        step.made = std::make_shared<const Conv>(
            Conv{pd, dnnl::convolution_forward(pd), reorder});
        step.silu_pass = silu;
        step.src_offset = r.in_first * in_channels;
        step.dst_offset = r.first * out_channels;
        step.dst_floats = (r.last - r.first) * out_channels;
      }
    }
  } catch (...) {
    omp_set_num_threads(saved);
    throw;
  }
  omp_set_num_threads(saved);
  return plan;
}

// This thread's plan for a chain's call, kept as a convolution's plan is
// (plan_for_site, on the first weight) with the arguments it was made for:
// the sizes, layers, parameters, thread count, and each other weight's
// address and packed layout.
std::shared_ptr<const ChainPlan> chain_plan(
    const char* op, const at::Tensor& input, at::TensorList weights,
    const std::vector<const Header*>& headers, at::IntArrayRef layers,
    c10::string_view activations, at::ArrayRef<double> params,
    const std::vector<ChainLayer>& checked) {
  SiteArgs args{{}, activations, 0, 0};
  for (at::IntArrayRef list : {input.sizes(), layers}) {
    args.ints.push_back(static_cast<int64_t>(list.size()));
    args.ints.insert(args.ints.end(), list.begin(), list.end());
  }
  for (double p : params) {
    int64_t bits;
    std::memcpy(&bits, &p, sizeof(bits));
    args.ints.push_back(bits);
  }
  constexpr size_t kDescWords =
      (sizeof(dnnl_memory_desc_t) + sizeof(int64_t) - 1) / sizeof(int64_t);
  for (size_t i = 1; i < weights.size(); ++i) {
    args.ints.push_back(reinterpret_cast<intptr_t>(packed_data(weights[i])));
    int64_t desc[kDescWords] = {};
    std::memcpy(desc, &headers[i]->desc, sizeof(dnnl_memory_desc_t));
    args.ints.insert(args.ints.end(), desc, desc + kDescWords);
  }
  return plan_for_site<std::shared_ptr<const ChainPlan>>(
      weights[0], *headers[0], std::move(args), [&] {
        return make_chain_plan(op, checked, weights,
                               std::max(1, at::get_num_threads()));
      });
}

// Runs thread t's steps of the chain; with `alone`, the calling thread
// runs every thread's steps, layer by layer, and nobody waits.
void run_chain_steps(const ChainPlan& plan, const std::vector<float*>& slots,
                     const float* input, at::TensorList weights,
                     const std::vector<const Header*>& headers,
                     const std::vector<at::Tensor>& biases, int t,
                     bool alone) {
  const size_t n = plan.steps[0].size();
  auto data = [&](int64_t value) -> float* {
    const int64_t slot = plan.value_slot[value];
    return slot < 0 ? const_cast<float*>(input) : slots[slot];
  };
  auto run = [&](const ChainStep& step, size_t i) {
    if (!step.made) return;
    float* dst = data(step.dst_value) + step.dst_offset;
    run_made(step.made, data(step.src_value) + step.src_offset, weights[i],
             *headers[i], biases[i].data_ptr(), dst);
    if (step.silu_pass) silu_in_place(dst, step.dst_floats);
  };
  for (size_t i = 0; i < n; ++i) {
    if (alone) {
      for (int u = 0; u < plan.threads; ++u) run(plan.steps[u][i], i);
      continue;
    }
    if (plan.steps[t][i].barrier) GOMP_barrier();
    run(plan.steps[t][i], i);
  }
}

at::Tensor conv_chain(const at::Tensor& input, at::TensorList weights,
                      at::TensorList biases, at::IntArrayRef layers,
                      c10::string_view activations,
                      at::ArrayRef<double> params) {
  const char* op = "fx_onednn::conv_chain";
  check_input(op, input);
  const std::vector<ChainLayer> checked =
      chain_layers(op, input, weights, biases, layers, activations, params);
  const int64_t n = static_cast<int64_t>(checked.size());
  std::vector<const Header*> headers;
  std::vector<at::Tensor> bias_values;
  bool f32 = input.scalar_type() == at::kFloat;
  for (int64_t i = 0; i < n; ++i) {
    headers.push_back(
        &header_of(weights[i], op, "fx_onednn::pack_conv_weight"));
    f32 &= memory::desc(headers.back()->desc).data_type() == DataType::f32;
    bias_values.push_back(
        float_bias(op, biases[i], checked[i].output_size[1]));
  }
  if (input.size(0) != 1 || !f32) {
    // Another batch or type: the layers one by one.
    std::vector<at::Tensor> values{input};
    for (int64_t i = 0; i < n; ++i) {
      const ChainLayer& l = checked[i];
      const std::vector<int64_t> s{l.stride, l.stride}, p{l.padding, l.padding};
      if (l.residual >= 0) {
        at::Tensor& self = values[l.residual];
        values.push_back(conv_add_(self, values[i], weights[i], biases[i], s,
                                   p, {1, 1}, l.groups, l.activation, l.alpha,
                                   l.beta));
      } else {
        values.push_back(conv(values[i], weights[i], biases[i], s, p, {1, 1},
                              l.groups, c10::nullopt, l.activation, l.alpha,
                              l.beta));
      }
    }
    return values.back();
  }
  const std::shared_ptr<const ChainPlan> plan = chain_plan(
      op, input, weights, headers, layers, activations, params, checked);
  const at::Tensor src = to_channels_last(input);
  std::vector<at::Tensor> buffers;
  std::vector<float*> slots;
  for (size_t s = 0; s < plan->slot_floats.size(); ++s) {
    buffers.push_back(
        empty_activation({plan->slot_floats[s]}, input.options()));
    slots.push_back(buffers.back().data_ptr<float>());
  }
  const float* in = src.data_ptr<float>();
  run_on_threads(plan->threads, [&](int t, int team) {
    if (team == plan->threads) {
      run_chain_steps(*plan, slots, in, weights, headers, bias_values, t,
                      false);
    } else if (t == 0) {
      run_chain_steps(*plan, slots, in, weights, headers, bias_values, 0,
                      true);
    }
  });
  const std::vector<int64_t>& size = checked.back().output_size;
  const at::Tensor& out = buffers[plan->value_slot[n]];
  return out.as_strided(size, channels_last_strides(size));
}

at::Tensor conv_chain_meta(const at::Tensor& input, at::TensorList weights,
                           at::TensorList biases, at::IntArrayRef layers,
                           c10::string_view activations,
                           at::ArrayRef<double> params) {
  const std::vector<ChainLayer> checked =
      chain_layers("fx_onednn::conv_chain", input, weights, biases, layers,
                   activations, params);
  return empty_channels_last(checked.back().output_size, input.options());
}

// --- Transposed convolution (oneDNN's deconvolution) -------------------------
// The weight is aten's: [in, out / groups, kernel...].
struct DeconvGeometry {
  std::vector<int64_t> output_size;
  memory::dims strides, dilates, padding_l, padding_r;
};

DeconvGeometry deconv_geometry(const char* op, at::IntArrayRef input,
                               at::IntArrayRef weight, at::IntArrayRef stride,
                               at::IntArrayRef padding,
                               at::IntArrayRef output_padding,
                               at::IntArrayRef dilation, int64_t groups) {
  const int64_t spatial = spatial_dims_of(
      op, input, weight, {stride, padding, output_padding, dilation},
      "stride, padding, output_padding and dilation");
  TORCH_CHECK(groups >= 1 && weight[0] % groups == 0 && input[1] == weight[0],
              op, ": the input has ", input[1], " channels, but the weight ",
              weight, " (in, out / groups, ...) with ", groups, " groups takes ",
              weight[0]);
  DeconvGeometry g;
  g.output_size = {input[0], weight[1] * groups};
  for (int64_t i = 0; i < spatial; ++i) {
    TORCH_CHECK(stride[i] >= 1 && dilation[i] >= 1 && padding[i] >= 0 &&
                    output_padding[i] >= 0,
                op, ": stride and dilation must be positive, padding and "
                "output_padding not negative");
    TORCH_CHECK(output_padding[i] < stride[i] ||
                    output_padding[i] < dilation[i],
                op, ": output_padding must be smaller than the stride or the "
                "dilation, got output_padding ", output_padding, ", stride ",
                stride, ", dilation ", dilation);
    const int64_t out = (input[2 + i] - 1) * stride[i] - 2 * padding[i] +
                        dilation[i] * (weight[2 + i] - 1) +
                        output_padding[i] + 1;
    TORCH_CHECK(out >= 1, op, ": the input's spatial size ", input,
                " gives an empty output for the weight ", weight);
    g.output_size.push_back(out);
    g.strides.push_back(stride[i]);
    g.dilates.push_back(dilation[i] - 1);
    g.padding_l.push_back(padding[i]);
    // output_padding's extra rows: less padding on the right.
    g.padding_r.push_back(padding[i] - output_padding[i]);
  }
  return g;
}

memory::desc deconv_weight_desc(at::IntArrayRef weight, int64_t groups,
                                Tag tag, DataType type = DataType::f32) {
  memory::dims dims = dims_of(weight);
  std::swap(dims[0], dims[1]);  // oneDNN's (out, in, ...)
  if (groups > 1) {
    dims[1] /= groups;
    dims.insert(dims.begin(), groups);
  }
  return memory::desc(dims, type, tag);
}

// aten's [in, out / groups, kernel...] order of oneDNN's dimensions.
Tag plain_deconv_weight_tag(int64_t dim, bool grouped) {
  switch (dim) {
    case 3: return grouped ? Tag::acbd : Tag::bac;
    case 4: return grouped ? Tag::acbde : Tag::bacd;
    default: return grouped ? Tag::acbdef : Tag::bacde;
  }
}

dnnl::deconvolution_forward::primitive_desc deconv_descriptor(
    at::IntArrayRef input, const DeconvGeometry& g,
    const memory::desc& weight_desc, bool bias,
    const dnnl::primitive_attr& attr) {
  const ActivationDescs d = activation_descs(input, g.output_size, bias,
                                             DataType::f32, DataType::f32);
  dnnl::deconvolution_forward::desc desc(
      dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct,
      d.src, weight_desc, d.bias, d.dst, g.strides, g.dilates, g.padding_l,
      g.padding_r);
  return dnnl::deconvolution_forward::primitive_desc(desc, attr, cpu_engine());
}

at::Tensor pack_conv_transpose_weight(const at::Tensor& weight,
                                      at::IntArrayRef input_size,
                                      at::IntArrayRef stride,
                                      at::IntArrayRef padding,
                                      at::IntArrayRef output_padding,
                                      at::IntArrayRef dilation,
                                      int64_t groups) {
  const char* op = "fx_onednn::pack_conv_transpose_weight";
  TORCH_CHECK(weight.device().is_cpu() && weight.scalar_type() == at::kFloat,
              op, ": the weight must be a float32 CPU tensor, got ",
              weight.toString());
  const DeconvGeometry g =
      deconv_geometry(op, input_size, weight.sizes(), stride, padding,
                      output_padding, dilation, groups);
  const auto pd = deconv_descriptor(
      input_size, g, deconv_weight_desc(weight.sizes(), groups, Tag::any),
      /*bias=*/true, dnnl::primitive_attr());
  return pack(weight,
              plain_weight_desc(PackKind::kConvTranspose, weight.sizes(),
                                groups),
              pd.weights_desc(), weight.sizes(), PackKind::kConvTranspose);
}

struct Deconv {
  dnnl::deconvolution_forward::primitive_desc pd;
  dnnl::deconvolution_forward primitive;
  std::shared_ptr<const Reorder> weights_reorder;  // or null
};

at::Tensor conv_transpose(const at::Tensor& input, const at::Tensor& weight,
                          const c10::optional<at::Tensor>& bias,
                          at::IntArrayRef stride, at::IntArrayRef padding,
                          at::IntArrayRef output_padding,
                          at::IntArrayRef dilation, int64_t groups,
                          c10::string_view activation, double alpha,
                          double beta) {
  const char* op = "fx_onednn::conv_transpose";
  TORCH_CHECK(input.device().is_cpu() && input.scalar_type() == at::kFloat,
              op, ": the input must be a float32 CPU tensor, got ",
              input.toString());
  const Header& header =
      header_of(weight, op, "fx_onednn::pack_conv_transpose_weight");
  TORCH_CHECK(memory::desc(header.desc).data_type() == DataType::f32, op,
              ": the weight was packed in another dtype than float32");
  const DeconvGeometry g =
      deconv_geometry(op, input.sizes(), weight.sizes(), stride, padding,
                      output_padding, dilation, groups);
  const bool has_bias = bias.has_value() && bias->defined();
  std::string key;
  append_key(&key, input.sizes());
  append_key(&key, g.output_size);
  for (const memory::dims* d :
       {&g.strides, &g.dilates, &g.padding_l, &g.padding_r}) {
    append_key(&key, *d);
  }
  absl::StrAppend(&key, groups, "|", has_bias, "|", std::string(activation),
                  "|", at::get_num_threads(), "|");
  append_key(&key, alpha);
  append_key(&key, beta);
  key.append(reinterpret_cast<const char*>(&header.desc), sizeof(header.desc));
  static PrimitiveCache<std::shared_ptr<const Deconv>> cache;
  const auto made = cache.get(key, [&] {
    const dnnl::primitive_attr attr =
        post_ops(op, false, activation, alpha, beta);
    std::shared_ptr<const Reorder> reorder;
    auto pd = for_packed_weights<dnnl::deconvolution_forward::primitive_desc>(
        [&](const memory::desc& weights) {
          return deconv_descriptor(input.sizes(), g, weights, has_bias, attr);
        },
        memory::desc(header.desc),
        deconv_weight_desc(weight.sizes(), groups, Tag::any), &reorder);
    return std::make_shared<const Deconv>(
        Deconv{pd, dnnl::deconvolution_forward(pd), reorder});
  });
  const at::Tensor src = to_channels_last(input);
  at::Tensor dst = empty_channels_last(g.output_size, input.options());
  if (dst.numel() == 0) return dst;
  run_with_weights(op, made, src, weight, header, bias, g.output_size[1], dst);
  return dst;
}

at::Tensor conv_transpose_meta(const at::Tensor& input,
                               const at::Tensor& weight,
                               const c10::optional<at::Tensor>&,
                               at::IntArrayRef stride, at::IntArrayRef padding,
                               at::IntArrayRef output_padding,
                               at::IntArrayRef dilation, int64_t groups,
                               c10::string_view, double, double) {
  return empty_channels_last(
      deconv_geometry("fx_onednn::conv_transpose", input.sizes(),
                      weight.sizes(), stride, padding, output_padding,
                      dilation, groups)
          .output_size,
      input.options());
}

at::Tensor pack_conv_transpose_weight_meta(const at::Tensor& weight,
                                           at::IntArrayRef, at::IntArrayRef,
                                           at::IntArrayRef, at::IntArrayRef,
                                           at::IntArrayRef, int64_t) {
  return at::empty(weight.sizes(), weight.options());
}

// --- Linear (oneDNN's matmul) --------------------------------------------
// [rows, in] @ weight^T, the weight [in, out] in the matmul's packed layout:
// oneDNN 2.6's matmul ran transformer shapes (197 x 768 @ 768 x 2304, ...)
// 1.2-1.3x as fast as its inner product here, and others alike.
dnnl::matmul::primitive_desc linear_descriptor(
    int64_t rows, int64_t in_features, int64_t out_features,
    const memory::desc& weight_desc, bool bias,
    const dnnl::primitive_attr& attr, DataType compute = DataType::f32,
    DataType output = DataType::f32) {
  memory::desc src({rows, in_features}, compute, Tag::ab);
  memory::desc dst({rows, out_features}, output, Tag::ab);
  memory::desc bias_desc =
      bias ? memory::desc({1, out_features}, DataType::f32, Tag::ab)
           : memory::desc();
  dnnl::matmul::desc desc(src, weight_desc, bias_desc, dst);
  return dnnl::matmul::primitive_desc(desc, attr, cpu_engine());
}

// A linear weight [out, in] as the matmul reads it: [in, out].
memory::dims linear_weight_dims(at::IntArrayRef weight) {
  return {weight[1], weight[0]};
}

memory::desc plain_weight_desc(PackKind kind, at::IntArrayRef sizes,
                               int64_t groups) {
  const int64_t dim = static_cast<int64_t>(sizes.size());
  switch (kind) {
    case PackKind::kConv:
      return conv_weight_desc(sizes, groups, plain_weight_tag(dim, groups > 1));
    case PackKind::kConvTranspose:
      return deconv_weight_desc(sizes, groups,
                                plain_deconv_weight_tag(dim, groups > 1));
    case PackKind::kLinear:
      // [out, in] row-major is [in, out] with the second dimension outer.
      return memory::desc(linear_weight_dims(sizes), DataType::f32, Tag::ba);
  }
  TORCH_INTERNAL_ASSERT(false, "unknown PackKind");
}

int64_t rows_of(const char* op, at::IntArrayRef input, int64_t in_features) {
  TORCH_CHECK(!input.empty() && input.back() == in_features, op,
              ": the input's last size must be the weight's in_features (",
              in_features, "), got sizes ", input);
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < input.size(); ++i) rows *= input[i];
  return rows;
}

at::Tensor pack_linear_weight(const at::Tensor& weight,
                              at::IntArrayRef input_size, bool bf16) {
  const char* op = "fx_onednn::pack_linear_weight";
  TORCH_CHECK(weight.dim() == 2 && weight.device().is_cpu() &&
                  weight.scalar_type() == at::kFloat,
              op, ": the weight must be a 2-d float32 CPU tensor, got ",
              weight.toString(), " ", weight.sizes());
  check_bf16(op, bf16);
  const int64_t rows = std::max<int64_t>(rows_of(op, input_size, weight.size(1)), 1);
  const memory::dims dims = linear_weight_dims(weight.sizes());
  const DataType type = bf16 ? DataType::bf16 : DataType::f32;
  const auto pd = linear_descriptor(
      rows, weight.size(1), weight.size(0), memory::desc(dims, type, Tag::any),
      /*bias=*/true, dnnl::primitive_attr(), type, type);
  return pack(weight, plain_weight_desc(PackKind::kLinear, weight.sizes(), 1),
              pd.weights_desc(), weight.sizes(), PackKind::kLinear);
}

struct Linear {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul primitive;
  std::shared_ptr<const Reorder> weights_reorder;  // or null
};

// What a linear call runs (plan_for_site keeps it per packed weight).
struct LinearPlan {
  std::shared_ptr<const Linear> made;
  at::ScalarType compute = at::kFloat;  // the input's, converted
  bool silu_pass = false;
};

std::vector<int64_t> linear_output_size(at::IntArrayRef input,
                                        int64_t out_features) {
  std::vector<int64_t> sizes(input.begin(), input.end());
  sizes.back() = out_features;
  return sizes;
}

at::Tensor linear(const at::Tensor& input, const at::Tensor& weight,
                  const c10::optional<at::Tensor>& bias,
                  c10::string_view activation, double alpha, double beta) {
  const char* op = "fx_onednn::linear";
  const Header& header =
      header_of(weight, op, "fx_onednn::pack_linear_weight");
  check_input(op, input);
  const DataType output = data_type_of(op, input, "input");
  const int64_t in_features = weight.size(1);
  const int64_t out_features = weight.size(0);
  const int64_t rows = rows_of(op, input.sizes(), in_features);
  const bool has_bias = bias.has_value() && bias->defined();
  at::Tensor dst = empty_activation(
      linear_output_size(input.sizes(), out_features), input.options());
  if (rows == 0) return dst;

  SiteArgs args{{rows, static_cast<int64_t>(input.scalar_type()), has_bias},
                activation, alpha, beta};
  const LinearPlan& plan = plan_for_site<LinearPlan>(weight, header, args, [&] {
    const DataType compute = compute_type(op, header, input);
    std::string key;
    absl::StrAppend(&key, static_cast<int>(compute), static_cast<int>(output),
                    "|");
    const int64_t shape[] = {rows, in_features, out_features};
    append_key(&key, shape);
    absl::StrAppend(&key, has_bias, "|", std::string(activation), "|",
                    at::get_num_threads(), "|");
    append_key(&key, alpha);
    append_key(&key, beta);
    key.append(reinterpret_cast<const char*>(&header.desc),
               sizeof(header.desc));
    LinearPlan made_plan;
    made_plan.compute = scalar_type_of(compute);
    made_plan.silu_pass = silu_as_pass(activation, output);
    static PrimitiveCache<std::shared_ptr<const Linear>> cache;
    made_plan.made = cache.get(key, [&] {
      const dnnl::primitive_attr attr = post_ops(
          op, false, made_plan.silu_pass ? "none" : activation, alpha, beta);
      std::shared_ptr<const Reorder> reorder;
      auto pd = for_packed_weights<dnnl::matmul::primitive_desc>(
          [&](const memory::desc& weights) {
            return linear_descriptor(rows, in_features, out_features, weights,
                                     has_bias, attr, compute, output);
          },
          memory::desc(header.desc),
          memory::desc(linear_weight_dims(weight.sizes()), compute, Tag::any),
          &reorder);
      return std::make_shared<const Linear>(
          Linear{pd, dnnl::matmul(pd), reorder});
    });
    return made_plan;
  });

  const at::Tensor src =
      input.scalar_type() == plan.compute && input.is_contiguous()
          ? input
          : input.to(plan.compute).contiguous();
  run_with_weights(op, plan.made, src, weight, header, bias, out_features,
                   dst);
  if (plan.silu_pass) silu_in_place(dst.data_ptr<float>(), dst.numel());
  return dst;
}

at::Tensor linear_meta(const at::Tensor& input, const at::Tensor& weight,
                       const c10::optional<at::Tensor>&, c10::string_view,
                       double, double) {
  rows_of("fx_onednn::linear", input.sizes(), weight.size(1));
  return at::empty(linear_output_size(input.sizes(), weight.size(0)),
                   input.options());
}

at::Tensor pack_linear_weight_meta(const at::Tensor& weight, at::IntArrayRef,
                                   bool) {
  return at::empty(weight.sizes(), weight.options());
}

// --- Batched matrix products (attention) ------------------------------------
// self [..., M, K] @ other [..., K, N] of activations (attention's q @ k^T
// and weights @ v), batch dimensions equal or 1 (broadcast), read in place
// through their strides (the heads' views of a projection, a transposed
// key), scaled by `scale` (an eltwise post-op).
struct Matmul {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul primitive;
  bool contiguous_inputs = false;  // strided ones had only the reference kernel
};

std::vector<int64_t> matmul_output_size(const char* op, at::IntArrayRef a,
                                        at::IntArrayRef b) {
  TORCH_CHECK(a.size() >= 2 && a.size() == b.size(), op,
              ": self and other must have the same rank, 2 or more, got sizes ",
              a, " and ", b);
  const size_t rank = a.size();
  TORCH_CHECK(a[rank - 1] == b[rank - 2], op, ": self's last size (",
              a[rank - 1], ") must be other's second last (", b[rank - 2],
              "), got sizes ", a, " and ", b);
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i + 2 < rank; ++i) {
    TORCH_CHECK(a[i] == b[i] || a[i] == 1 || b[i] == 1, op,
                ": batch sizes must be equal or 1, got sizes ", a, " and ", b);
    out[i] = std::max(a[i], b[i]);
  }
  out[rank - 2] = a[rank - 2];
  out[rank - 1] = b[rank - 1];
  return out;
}

// A plain strided description of `t`, its size-1 dimensions given the
// stride a dense tensor would have (any is right; oneDNN checks them).
memory::desc strided_desc(const at::Tensor& t) {
  memory::dims strides(t.strides().begin(), t.strides().end());
  int64_t dense = 1;
  for (int64_t i = t.dim() - 1; i >= 0; --i) {
    if (t.size(i) == 1) strides[i] = dense;
    dense *= t.size(i);
  }
  return memory::desc(dims_of(t.sizes()), DataType::f32, strides);
}

at::Tensor matmul(const at::Tensor& self, const at::Tensor& other,
                  double scale) {
  const char* op = "fx_onednn::matmul";
  for (const at::Tensor* t : {&self, &other}) {
    TORCH_CHECK(t->device().is_cpu() && t->scalar_type() == at::kFloat, op,
                ": self and other must be float32 CPU tensors, got ",
                t->toString());
  }
  const std::vector<int64_t> out_size =
      matmul_output_size(op, self.sizes(), other.sizes());
  at::Tensor dst = empty_activation(out_size, self.options());
  if (dst.numel() == 0) return dst;
  if (self.size(-1) == 0) return dst.zero_();

  std::string key;
  for (const at::Tensor* t : {&self, &other}) {
    append_key(&key, t->sizes());
    append_key(&key, t->strides());
  }
  absl::StrAppend(&key, at::get_num_threads(), "|");
  append_key(&key, scale);
  static PrimitiveCache<std::shared_ptr<const Matmul>> cache;
  const auto made = cache.get(key, [&] {
    dnnl::post_ops ops;
    if (scale != 1.0) {
      ops.append_eltwise(1.f, dnnl::algorithm::eltwise_linear,
                         static_cast<float>(scale), 0.f);
    }
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    auto make = [&](const memory::desc& a, const memory::desc& b) {
      return dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(a, b, strided_desc(dst)), attr, cpu_engine());
    };
    dnnl::matmul::primitive_desc pd =
        make(strided_desc(self), strided_desc(other));
    bool contiguous_inputs = false;
    if (is_reference(pd)) {
      dnnl::matmul::primitive_desc dense = make(
          strided_desc(self.contiguous()), strided_desc(other.contiguous()));
      if (!is_reference(dense)) {
        pd = dense;
        contiguous_inputs = true;
      }
    }
    return std::make_shared<const Matmul>(
        Matmul{pd, dnnl::matmul(pd), contiguous_inputs});
  });
  const at::Tensor a = made->contiguous_inputs ? self.contiguous() : self;
  const at::Tensor b = made->contiguous_inputs ? other.contiguous() : other;
  dnnl::engine& engine = cpu_engine();
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, memory(made->pd.src_desc(), engine, a.data_ptr())},
      {DNNL_ARG_WEIGHTS, memory(made->pd.weights_desc(), engine, b.data_ptr())},
      {DNNL_ARG_DST, memory(made->pd.dst_desc(), engine, dst.data_ptr())}};
  add_thread_scratchpad(made->pd, &args);
  last_kernel_name = made->pd.impl_info_str();
  made->primitive.execute(cpu_stream(), args);
  cpu_stream().wait();
  return dst;
}

at::Tensor matmul_meta(const at::Tensor& self, const at::Tensor& other,
                       double) {
  return at::empty(
      matmul_output_size("fx_onednn::matmul", self.sizes(), other.sizes()),
      self.options());
}

// --- Recurrent layers (LSTM, GRU) --------------------------------------------
// aten::lstm of layers without projections, in eval mode, on oneDNN's LSTM
// primitive, one layer after another; a bidirectional layer's directions
// each on its own, the reverse one reading the steps from the last
// (oneDNN's right-to-left), their outputs side by side. A layer's weights
// come as aten holds them transposed ([in, 4 * hidden] and [hidden, 4 *
// hidden] contiguous: oneDNN's ldigo, gates i, f, g, o as aten orders them)
// and one bias (b_ih + b_hh), made once by init steps: three per layer and
// direction, the forward direction's first.
struct RnnSizes {
  int64_t steps = 0, batch = 0, hidden = 0, directions = 1;
};

// `gates`: 4 for an LSTM (hx = [h0, c0]), 3 for a GRU (hx = [h0]); the
// bias then holds 4 gates' values (linear before reset: oneDNN's u, r, o
// and u').
RnnSizes rnn_sizes(const char* op, const at::Tensor& input,
                   at::TensorList hx, at::TensorList weights,
                   int64_t num_layers, bool batch_first, bool bidirectional,
                   int64_t gates = 4) {
  TORCH_CHECK(input.dim() == 3, op,
              ": the input must be 3-d ([T, N, C], or [N, T, C] with "
              "batch_first), got sizes ", input.sizes());
  RnnSizes z;
  z.directions = bidirectional ? 2 : 1;
  const int64_t layers = num_layers * z.directions;
  TORCH_CHECK(num_layers >= 1 &&
                  weights.size() == 3 * static_cast<size_t>(layers),
              op, ": expected 3 weights per layer", bidirectional ? " and direction" : "",
              " (input and hidden weights transposed, the summed bias) for ",
              num_layers, " layers", bidirectional ? " in 2 directions" : "",
              ", got ", weights.size());
  const size_t states = gates == 4 ? 2 : 1;
  TORCH_CHECK(hx.size() == states, op, ": hx must be ",
              states == 2 ? "[h0, c0]" : "[h0]", ", got ", hx.size(),
              " tensors");
  z.steps = input.size(batch_first ? 1 : 0);
  z.batch = input.size(batch_first ? 0 : 1);
  TORCH_CHECK(z.steps > 0, op, ": the input's sequence has no steps (sizes ",
              input.sizes(), batch_first ? ", batch first" : "",
              "); give it one or more, as aten's LSTM and GRU require");
  z.hidden = hx[0].dim() == 3 ? hx[0].size(2) : -1;
  for (const at::Tensor& h : hx) {
    TORCH_CHECK(h.dim() == 3 && h.size(0) == layers &&
                    h.size(1) == z.batch && h.size(2) == z.hidden,
                op, ": ", states == 2 ? "h0 and c0" : "h0", " must be [",
                bidirectional ? "2 * num_layers" : "num_layers",
                ", N, hidden] = [", layers, ", ", z.batch, ", ", z.hidden,
                "], got sizes ", h.sizes());
  }
  int64_t in = input.size(2);
  for (int64_t l = 0; l < layers; ++l) {
    const at::Tensor& w_layer = weights[3 * l];
    const at::Tensor& w_iter = weights[3 * l + 1];
    const at::Tensor& bias = weights[3 * l + 2];
    const int64_t width = gates * z.hidden;
    TORCH_CHECK(w_layer.sizes() == at::IntArrayRef({in, width}) &&
                    w_iter.sizes() == at::IntArrayRef({z.hidden, width}) &&
                    bias.numel() == 4 * z.hidden,
                op, ": layer ", l / z.directions,
                bidirectional ? (l % 2 == 0 ? " (forward)" : " (reverse)") : "",
                "'s weights must be [", in, ", ", width,
                "], [", z.hidden, ", ", width, "] and a bias of ",
                4 * z.hidden, " values, got sizes ", w_layer.sizes(), ", ",
                w_iter.sizes(), " and ", bias.sizes());
    if (l % z.directions == z.directions - 1) in = z.directions * z.hidden;
  }
  return z;
}

std::vector<int64_t> rnn_output_size(const at::Tensor& input,
                                     const RnnSizes& z) {
  return {input.size(0), input.size(1), z.directions * z.hidden};
}

// One primitive and its descriptor, per layer shape: an LSTM's
// (dnnl::lstm_forward) or a GRU's (dnnl::lbr_gru_forward).
template <typename Primitive>
struct Rnn {
  typename Primitive::primitive_desc pd;
  Primitive primitive;
};

// A layer's weight (aten's transposed one: ldigo) in the layout its kernel
// wants: oneDNN 2.6's brgemm RNN kernels' blocked one (the LSTM language
// model's layers ran in 0.7x the time of its reference driver on aten's
// layout at batch 1), or run_recurrences'; kept (ReorderedWeights). A
// weight that is not contiguous is reordered from its contiguous copy, for
// the call only.
memory rnn_weights(const at::Tensor& weight, const memory::desc& wanted,
                   at::Tensor* keep) {
  const at::Tensor plain = weight.contiguous();
  const memory::desc plain_desc(wanted.dims(), DataType::f32, Tag::ldigo);
  if (wanted == plain_desc) {
    *keep = plain;
  } else if (!weight.is_contiguous()) {
    *keep = ReorderedWeights::reordered(plain, plain_desc, wanted);
  } else {
    return ReorderedWeights::instance().get(plain, plain_desc, wanted, keep);
  }
  return memory(wanted, cpu_engine(), keep->data_ptr());
}

// run_recurrences' layout of the recurrent weights (packed[j / 16][k][g]
// [j % 16] of w[k][g * hidden + j]) as oneDNN describes blocked layouts, so
// that rnn_weights reorders and keeps them as it does the primitives': the
// dims of ldigo, the unit dimension (o) in blocks of 16 outermost.
memory::desc recurrence_weight_desc(int64_t hidden, int64_t gates) {
  memory::desc desc({1, 1, hidden, gates, hidden}, DataType::f32, Tag::ldigo);
  dnnl_blocking_desc_t& blocking = desc.data.format_desc.blocking;
  const int64_t strides[] = {gates * hidden * hidden, gates * hidden * hidden,
                             16 * gates, 16, 16 * gates * hidden};
  std::copy(std::begin(strides), std::end(strides), blocking.strides);
  blocking.inner_nblks = 1;
  blocking.inner_blks[0] = 16;
  blocking.inner_idxs[0] = 4;
  return desc;
}

// The states of layer and direction `index` ([layers * directions, N,
// hidden] tensors): h0 and c0 in, h_n and c_n out (c0 and c_n null for a
// GRU).
struct RnnStates {
  const float* h0;
  const float* c0;
  float* h_n;
  float* c_n;
};

// One LSTM or GRU layer at batch 1 by run_recurrences, both directions of a
// bidirectional one at once (run_recurrences: a thread group each): every
// step's input projection at once (a oneDNN matmul of the [steps, in]
// input and aten's transposed weight), then the steps. `weights` and
// `states` are the layer's directions'.
at::Tensor layer_at_batch_1(bool lstm, const at::Tensor& x,
                            at::TensorList weights, const RnnSizes& z,
                            const std::vector<RnnStates>& states) {
  const int64_t directions = z.directions;
  at::Tensor y = empty_activation(rnn_output_size(x, z), x.options());
  std::vector<at::Tensor> input_gates, bias, keep(directions);
  std::vector<Recurrence> layers(directions);
  for (int64_t d = 0; d < directions; ++d) {
    input_gates.push_back(
        matmul(x.view({z.steps, x.size(2)}), weights[3 * d], 1.0));
    bias.push_back(weights[3 * d + 2].contiguous());
    const memory packed =
        rnn_weights(weights[3 * d + 1],
                    recurrence_weight_desc(z.hidden, lstm ? 4 : 3), &keep[d]);
    Recurrence& layer = layers[d];
    layer.lstm = lstm;
    layer.steps = z.steps;
    layer.hidden = z.hidden;
    layer.input_gates = input_gates.back().data_ptr<float>();
    layer.bias = bias.back().data_ptr<float>();
    layer.packed_weights = static_cast<const float*>(packed.get_data_handle());
    layer.h0 = states[d].h0;
    layer.c0 = states[d].c0;
    layer.output = y.data_ptr<float>() + d * z.hidden;
    layer.output_stride = directions * z.hidden;
    layer.c_n = states[d].c_n;
    layer.reverse = d == 1;
  }
  run_recurrences(layers.data(), static_cast<int>(directions));
  for (int64_t d = 0; d < directions; ++d) {
    // h_n: the last step's output (the reverse direction's is row 0).
    const int64_t last = d == 1 ? 0 : z.steps - 1;
    std::memcpy(states[d].h_n,
                layers[d].output + last * layers[d].output_stride,
                z.hidden * sizeof(float));
  }
  last_kernel_name = "fx:recurrence:avx512f";
  return y;
}

// One direction of a layer on oneDNN's primitive, made for `threads`
// threads, ready to run: its output [steps, N, hidden] (batch_first: [N,
// steps, hidden]) and arguments but the scratchpad (the running thread's).
template <typename Primitive>
struct DirectionCall {
  std::shared_ptr<const Rnn<Primitive>> made;
  at::Tensor y, bias, keep_layer, keep_iter;
  std::unordered_map<int, memory> args;

  void run() {
    add_thread_scratchpad(made->pd, &args);
    made->primitive.execute(cpu_stream(), args);
    cpu_stream().wait();
  }
};

template <typename Primitive>
DirectionCall<Primitive> direction_call(const at::Tensor& x,
                                        at::TensorList weights,
                                        const RnnSizes& z, bool batch_first,
                                        bool reverse, int threads,
                                        const RnnStates& states) {
  constexpr bool kLstm = std::is_same_v<Primitive, dnnl::lstm_forward>;
  constexpr int64_t kGates = kLstm ? 4 : 3;
  const Tag layer_tag = batch_first ? Tag::ntc : Tag::tnc;
  dnnl::engine& engine = cpu_engine();
  const int64_t in = x.size(2);
  DirectionCall<Primitive> call;
  call.y = empty_activation({x.size(0), x.size(1), z.hidden}, x.options());
  std::string key;
  const int64_t shape[] = {z.steps, z.batch, in, z.hidden, batch_first,
                           reverse, threads};
  append_key(&key, shape);
  static PrimitiveCache<std::shared_ptr<const Rnn<Primitive>>> cache;
  call.made = cache.get(key, [&] {
    const memory::desc layer({z.steps, z.batch, in}, DataType::f32,
                             layer_tag);
    const memory::desc iter({1, 1, z.batch, z.hidden}, DataType::f32,
                            Tag::ldnc);
    // Weights in the layout the primitive prefers (rnn_weights).
    const memory::desc w_layer({1, 1, in, kGates, z.hidden}, DataType::f32,
                               Tag::any);
    const memory::desc w_iter({1, 1, z.hidden, kGates, z.hidden},
                              DataType::f32, Tag::any);
    const memory::desc bias({1, 1, 4, z.hidden}, DataType::f32, Tag::ldgo);
    const memory::desc dst({z.steps, z.batch, z.hidden}, DataType::f32,
                           layer_tag);
    const auto inference = dnnl::prop_kind::forward_inference;
    const auto direction = reverse
                               ? dnnl::rnn_direction::unidirectional_right2left
                               : dnnl::rnn_direction::unidirectional_left2right;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    // oneDNN splits a primitive's work for the threads OpenMP offers this
    // thread when it is made (the offer restored however making ends).
    struct Offer {
      const int before = omp_get_max_threads();
      explicit Offer(int threads) { omp_set_num_threads(threads); }
      ~Offer() { omp_set_num_threads(before); }
    } offer(threads);
    typename Primitive::primitive_desc pd = [&] {
      if constexpr (kLstm) {
        return typename Primitive::primitive_desc(
            typename Primitive::desc(inference, direction, layer, iter, iter,
                                     w_layer, w_iter, bias, dst, iter, iter),
            attr, engine);
      } else {
        return typename Primitive::primitive_desc(
            typename Primitive::desc(inference, direction, layer, iter,
                                     w_layer, w_iter, bias, dst, iter),
            attr, engine);
      }
    }();
    return std::make_shared<const Rnn<Primitive>>(
        Rnn<Primitive>{pd, Primitive(pd)});
  });
  const auto& pd = call.made->pd;
  call.bias = weights[2].contiguous();
  call.args = {
      {DNNL_ARG_SRC_LAYER, memory(pd.src_layer_desc(), engine, x.data_ptr())},
      {DNNL_ARG_SRC_ITER,
       memory(pd.src_iter_desc(), engine, const_cast<float*>(states.h0))},
      {DNNL_ARG_WEIGHTS_LAYER,
       rnn_weights(weights[0], pd.weights_layer_desc(), &call.keep_layer)},
      {DNNL_ARG_WEIGHTS_ITER,
       rnn_weights(weights[1], pd.weights_iter_desc(), &call.keep_iter)},
      {DNNL_ARG_BIAS, memory(pd.bias_desc(), engine, call.bias.data_ptr())},
      {DNNL_ARG_DST_LAYER,
       memory(pd.dst_layer_desc(), engine, call.y.data_ptr())},
      {DNNL_ARG_DST_ITER, memory(pd.dst_iter_desc(), engine, states.h_n)}};
  if constexpr (kLstm) {
    call.args.emplace(DNNL_ARG_SRC_ITER_C,
                      memory(pd.src_iter_c_desc(), engine,
                             const_cast<float*>(states.c0)));
    call.args.emplace(DNNL_ARG_DST_ITER_C,
                      memory(pd.dst_iter_c_desc(), engine, states.c_n));
  }
  last_kernel_name = pd.impl_info_str();
  return call;
}

// A layer's directions on oneDNN's primitives. On two threads a
// bidirectional layer's directions run at once, a one-thread primitive
// each (an LSTM layer of 256 units at batch 8: 0.70-0.79x the time of
// both threads on one direction after the other, whose steps each meet at
// a barrier); else one after another on the whole team.
template <typename Primitive>
at::Tensor layer_on_primitives(const at::Tensor& x, at::TensorList weights,
                               const RnnSizes& z, bool batch_first,
                               const std::vector<RnnStates>& states) {
  const int team = at::get_num_threads();
  const bool at_once = z.directions == 2 && team == 2;
  std::vector<DirectionCall<Primitive>> calls;
  for (int64_t d = 0; d < z.directions; ++d) {
    calls.push_back(direction_call<Primitive>(
        x, weights.slice(3 * d, 3), z, batch_first, d == 1,
        at_once ? 1 : team, states[d]));
  }
  if (at_once) {
    GOMP_parallel(
        [](void* data) {
          auto& calls = *static_cast<std::vector<DirectionCall<Primitive>>*>(data);
          // A team of one (inside another parallel region) runs both.
          if (omp_get_num_threads() < 2) {
            for (DirectionCall<Primitive>& call : calls) call.run();
          } else if (omp_get_thread_num() < 2) {
            calls[omp_get_thread_num()].run();
          }
        },
        &calls, 2, 0);
  } else {
    for (DirectionCall<Primitive>& call : calls) call.run();
  }
  if (calls.size() == 1) return calls[0].y;
  return at::cat({calls[0].y, calls[1].y}, 2);
}

// The layers of an LSTM (hx = [h0, c0]) or a GRU (hx = [h0]) one after
// another: the output, then the final states.
template <typename Primitive>
std::vector<at::Tensor> run_rnn(const char* op, const at::Tensor& input,
                                at::TensorList hx, at::TensorList weights,
                                int64_t num_layers, bool batch_first,
                                bool bidirectional) {
  constexpr bool kLstm = std::is_same_v<Primitive, dnnl::lstm_forward>;
  constexpr int64_t kGates = kLstm ? 4 : 3;
  // Every tensor is read as float32 data.
  for (at::TensorList list : {at::TensorList(input), hx, weights}) {
    for (const at::Tensor& t : list) {
      TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kFloat, op,
                  ": the input, states and weights must be float32 CPU "
                  "tensors, got ", t.toString());
    }
  }
  const RnnSizes z = rnn_sizes(op, input, hx, weights, num_layers,
                               batch_first, bidirectional, kGates);
  std::vector<at::Tensor> first, out = {at::Tensor()};
  for (const at::Tensor& h : hx) {
    first.push_back(h.contiguous());
    out.push_back(at::empty_like(first.back()));
  }
  at::Tensor x = input.contiguous();
  // A batch of none (rnn_sizes refuses a sequence of no steps): empty
  // outputs, the states as they came.
  if (z.batch == 0) {
    for (size_t i = 0; i < first.size(); ++i) out[i + 1].copy_(first[i]);
    out[0] = empty_activation(rnn_output_size(input, z), input.options());
    return out;
  }
  const int64_t state = z.batch * z.hidden;
  auto at_layer = [&](const at::Tensor& t, int64_t l) {
    return static_cast<float*>(t.data_ptr()) + l * state;
  };
  for (int64_t l = 0; l < num_layers; ++l) {
    std::vector<RnnStates> states;
    for (int64_t d = 0; d < z.directions; ++d) {
      const int64_t index = l * z.directions + d;
      states.push_back(
          {at_layer(first[0], index), kLstm ? at_layer(first[1], index) : nullptr,
           at_layer(out[1], index), kLstm ? at_layer(out[2], index) : nullptr});
    }
    const at::TensorList layer_weights =
        weights.slice(3 * l * z.directions, 3 * z.directions);
    if (recurrence_runs(z.batch, z.hidden)) {
      x = layer_at_batch_1(kLstm, x, layer_weights, z, states);
      continue;
    }
    x = layer_on_primitives<Primitive>(x, layer_weights, z, batch_first,
                                       states);
  }
  out[0] = x;
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm(
    const at::Tensor& input, at::TensorList hx, at::TensorList weights,
    int64_t num_layers, bool batch_first, bool bidirectional) {
  std::vector<at::Tensor> out =
      run_rnn<dnnl::lstm_forward>("fx_onednn::lstm", input, hx, weights,
                                  num_layers, batch_first, bidirectional);
  return {out[0], out[1], out[2]};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_meta(
    const at::Tensor& input, at::TensorList hx, at::TensorList weights,
    int64_t num_layers, bool batch_first, bool bidirectional) {
  const RnnSizes z = rnn_sizes("fx_onednn::lstm", input, hx, weights,
                               num_layers, batch_first, bidirectional);
  return {at::empty(rnn_output_size(input, z), input.options()),
          at::empty_like(hx[0]), at::empty_like(hx[1])};
}

// aten::gru likewise, on oneDNN's linear-before-reset GRU (PyTorch's): a
// layer's weights transposed with the gates reordered to oneDNN's (u, r, o:
// aten's z, r, n) and the bias [b_iz + b_hz, b_ir + b_hr, b_in, b_hn].
std::tuple<at::Tensor, at::Tensor> gru(const at::Tensor& input,
                                       const at::Tensor& hx,
                                       at::TensorList weights,
                                       int64_t num_layers, bool batch_first,
                                       bool bidirectional) {
  std::vector<at::Tensor> out =
      run_rnn<dnnl::lbr_gru_forward>("fx_onednn::gru", input, {hx}, weights,
                                     num_layers, batch_first, bidirectional);
  return {out[0], out[1]};
}

std::tuple<at::Tensor, at::Tensor> gru_meta(const at::Tensor& input,
                                            const at::Tensor& hx,
                                            at::TensorList weights,
                                            int64_t num_layers,
                                            bool batch_first,
                                            bool bidirectional) {
  const RnnSizes z = rnn_sizes("fx_onednn::gru", input, {hx}, weights,
                               num_layers, batch_first, bidirectional, 3);
  return {at::empty(rnn_output_size(input, z), input.options()),
          at::empty_like(hx)};
}

// --- Batch normalization (inference) ------------------------------------------
// aten::batch_norm in eval mode (the running statistics) of a channels-last
// 4-d activation, the relu after it fused, in one pass (channel_affine):
// the batch norms no convolution before them absorbs (DenseNet's, before
// each layer's convolutions, on the concatenation of the block so far).
// Its output comes from the activation cache: aten's, from the system, took
// twice the time at batch 8 for mapping fresh pages.

// A statistic or affine parameter: `channels` float32 values.
at::Tensor channel_values(const char* op, const at::Tensor& t,
                          const char* what, int64_t channels) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kFloat &&
                  t.numel() == channels,
              op, ": ", what, " must be a float32 CPU tensor of ", channels,
              " values (one per channel), got ", t.toString(), " of sizes ",
              t.sizes());
  return t.contiguous();
}

// ... or undefined for none.
at::Tensor optional_channel_values(const char* op,
                                   const c10::optional<at::Tensor>& t,
                                   const char* what, int64_t channels) {
  if (!t.has_value() || !t->defined()) return at::Tensor();
  return channel_values(op, *t, what, channels);
}

// Checks that `input` is what batch_norm and squeeze_excite take: a 4-d
// float32 CPU tensor.
void check_image(const char* op, const at::Tensor& input) {
  TORCH_CHECK(input.device().is_cpu() && input.scalar_type() == at::kFloat &&
                  input.dim() == 4,
              op, ": the input must be a 4-d float32 CPU tensor, got ",
              input.toString(), " of sizes ", input.sizes());
}

// Their output's shape: the input's, channels-last.
at::Tensor image_meta(const char* op, const at::Tensor& input) {
  TORCH_CHECK(input.dim() == 4, op, ": the input must be 4-d, got sizes ",
              input.sizes());
  return at::empty(input.sizes(), input.options())
      .contiguous(at::MemoryFormat::ChannelsLast);
}

at::Tensor batch_norm(const at::Tensor& input,
                      const c10::optional<at::Tensor>& weight,
                      const c10::optional<at::Tensor>& bias,
                      const at::Tensor& running_mean,
                      const at::Tensor& running_var, double eps,
                      c10::string_view activation) {
  const char* op = "fx_onednn::batch_norm";
  check_image(op, input);
  TORCH_CHECK(activation == "none" || activation == "relu", op,
              ": the activation must be none or relu, got '",
              std::string(activation), "'");
  TORCH_CHECK(eps >= 0, op, ": eps must not be negative, got ", eps);
  const int64_t channels = input.size(1);
  const at::Tensor mean =
      channel_values(op, running_mean, "running_mean", channels);
  const at::Tensor var = channel_values(op, running_var, "running_var", channels);
  const at::Tensor w = optional_channel_values(op, weight, "weight", channels);
  const at::Tensor b = optional_channel_values(op, bias, "bias", channels);
  const bool has_weight = w.defined(), has_bias = b.defined();
  // y = x * scale + shift: scale = weight / sqrt(var + eps), shift =
  // bias - mean * scale, aten's formula (the scale computed in double), in
  // one loop over the channels (a dozen aten calls on these small tensors
  // cost more than the pass over a small activation).
  const float* m = mean.data_ptr<float>();
  const float* v = var.data_ptr<float>();
  std::vector<float> scale(channels), shift(channels);
  for (int64_t c = 0; c < channels; ++c) {
    double s = 1.0 / std::sqrt(static_cast<double>(v[c]) + eps);
    if (has_weight) s *= w.data_ptr<float>()[c];
    scale[c] = static_cast<float>(s);
    shift[c] = static_cast<float>(
        (has_bias ? b.data_ptr<float>()[c] : 0.0) - m[c] * s);
  }
  at::Tensor dst = empty_channels_last(input.sizes(), input.options());
  if (dst.numel() == 0) return dst;
  // The first channels of a wider tensor (a concat_buffer's view) are read
  // where they are.
  const int64_t pitch = channels_last_pitch(input);
  const at::Tensor src = pitch > 0 ? input : to_channels_last(input);
  ChannelAffine affine;
  affine.pixels = src.numel() / channels;
  affine.channels = channels;
  affine.input_pitch = pitch > 0 ? pitch : channels;
  affine.input = src.data_ptr<float>();
  affine.scale = scale.data();
  affine.shift = shift.data();
  affine.output = dst.data_ptr<float>();
  affine.relu = activation == "relu";
  channel_affine(affine);
  return dst;
}

at::Tensor batch_norm_meta(const at::Tensor& input,
                           const c10::optional<at::Tensor>&,
                           const c10::optional<at::Tensor>&, const at::Tensor&,
                           const at::Tensor&, double, c10::string_view) {
  return image_meta("fx_onednn::batch_norm", input);
}

// --- Concatenation into one buffer -----------------------------------------
// A chain of concatenations along the channels, each extending the last
// (DenseNet's blocks), on one channels-last buffer (lowering/concat.h):
// concat_buffer makes it with the first pieces in its first channels,
// concat_write_ writes each later piece once, and each concatenation is a
// view of the buffer's first channels (aten::slice), which later writes
// leave as they are.

// The pieces of a concatenation into `buffer` from channel `offset` on,
// checked to fit.
ChannelCopies channel_copies(const char* op, const at::Tensor& buffer,
                             at::TensorList tensors, int64_t offset,
                             std::vector<at::Tensor>* keep) {
  TORCH_CHECK(!tensors.empty(), op, ": no tensors to concatenate");
  ChannelCopies copies;
  copies.pixels = buffer.size(0) * buffer.size(2) * buffer.size(3);
  copies.output = buffer.data_ptr<float>();
  copies.output_pitch = buffer.size(1);
  int64_t channel = offset;
  for (const at::Tensor& t : tensors) {
    TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kFloat &&
                    t.dim() == 4 && t.size(0) == buffer.size(0) &&
                    t.size(2) == buffer.size(2) && t.size(3) == buffer.size(3),
                op, ": every tensor must be a 4-d float32 CPU tensor of ",
                buffer.size(0), " x C x ", buffer.size(2), " x ",
                buffer.size(3), ", got ", t.toString(), " of sizes ",
                t.sizes());
    keep->push_back(to_channels_last(t));
    copies.pieces.push_back({keep->back().data_ptr<float>(), t.size(1),
                             channel});
    channel += t.size(1);
  }
  TORCH_CHECK(offset >= 0 && channel <= buffer.size(1), op,
              ": channels ", offset, " to ", channel,
              " do not fit in a buffer of ", buffer.size(1), " channels");
  return copies;
}

at::Tensor concat_buffer(at::TensorList tensors, int64_t channels) {
  const char* op = "fx_onednn::concat_buffer";
  TORCH_CHECK(!tensors.empty() && tensors[0].dim() == 4, op,
              ": the first tensor must be 4-d");
  const at::Tensor& first = tensors[0];
  TORCH_CHECK(channels >= 0, op, ": channels must not be negative, got ",
              channels);
  at::Tensor buffer = empty_channels_last(
      {first.size(0), channels, first.size(2), first.size(3)},
      first.options());
  std::vector<at::Tensor> keep;
  const ChannelCopies copies = channel_copies(op, buffer, tensors, 0, &keep);
  if (buffer.numel() > 0) copy_channels(copies);
  return buffer;
}

at::Tensor& concat_write_(at::Tensor& self, at::TensorList tensors,
                          int64_t offset) {
  const char* op = "fx_onednn::concat_write_";
  TORCH_CHECK(self.device().is_cpu() && self.scalar_type() == at::kFloat &&
                  self.dim() == 4 && is_channels_last_dense(self),
              op, ": self must be a 4-d float32 channels-last CPU tensor "
              "(a concat_buffer), got ", self.toString(), " of sizes ",
              self.sizes(), " and strides ", self.strides());
  std::vector<at::Tensor> keep;
  const ChannelCopies copies =
      channel_copies(op, self, tensors, offset, &keep);
  if (self.numel() > 0) copy_channels(copies);
  return self;
}

at::Tensor concat_buffer_meta(at::TensorList tensors, int64_t channels) {
  TORCH_CHECK(!tensors.empty() && tensors[0].dim() == 4,
              "fx_onednn::concat_buffer: the first tensor must be 4-d");
  const at::Tensor& first = tensors[0];
  return at::empty({first.size(0), channels, first.size(2), first.size(3)},
                   first.options())
      .contiguous(at::MemoryFormat::ChannelsLast);
}

at::Tensor& concat_write_meta(at::Tensor& self, at::TensorList, int64_t) {
  return self;
}

// --- Squeeze-and-excitation ----------------------------------------------------
// torchvision's SqueezeExcitation block (MobileNetV3, EfficientNet) in one
// call (lowering/squeeze_excite.h): input * gate(conv(act(conv(
// global_avg_pool(input), w1, b1)), w2, b2)), the convolutions 1x1 on the
// pooled 1x1 image. W2 is read transposed, made once per weight
// (ReorderedWeights).

// A 1x1 convolution's weight [out, in, 1, 1] (or [out, in]) as a float32
// CPU matrix of `out` x `in`.
at::Tensor squeeze_weight(const char* op, const at::Tensor& w, const char* what,
                          int64_t out, int64_t in) {
  bool one_by_one = w.dim() == 2 || w.dim() == 4;
  for (int64_t d = 2; d < w.dim(); ++d) one_by_one &= w.size(d) == 1;
  TORCH_CHECK(w.device().is_cpu() && w.scalar_type() == at::kFloat &&
                  one_by_one && w.size(0) == out && w.size(1) == in,
              op, ": ", what, " must be a float32 CPU 1x1 convolution weight of ",
              out, " x ", in, " (sizes [", out, ", ", in, ", 1, 1]), got ",
              w.toString(), " of sizes ", w.sizes());
  return w.reshape({out, in}).contiguous();
}

at::Tensor squeeze_excite(const at::Tensor& input, const at::Tensor& w1,
                          const c10::optional<at::Tensor>& b1,
                          const at::Tensor& w2,
                          const c10::optional<at::Tensor>& b2,
                          c10::string_view activation,
                          c10::string_view gate) {
  const char* op = "fx_onednn::squeeze_excite";
  check_image(op, input);
  using Kernel = SqueezeExcite;
  Kernel kernel;
  if (activation == "none") {
    kernel.activation = Kernel::Activation::kNone;
  } else if (activation == "relu") {
    kernel.activation = Kernel::Activation::kRelu;
  } else if (activation == "silu") {
    kernel.activation = Kernel::Activation::kSilu;
  } else {
    TORCH_CHECK(false, op, ": the activation must be none, relu or silu, got '",
                std::string(activation), "'");
  }
  if (gate == "sigmoid") {
    kernel.gate = Kernel::Gate::kSigmoid;
  } else if (gate == "hardsigmoid") {
    kernel.gate = Kernel::Gate::kHardsigmoid;
  } else {
    TORCH_CHECK(false, op, ": the gate must be sigmoid or hardsigmoid, got '",
                std::string(gate), "'");
  }
  const int64_t channels = input.size(1);
  TORCH_CHECK(w1.dim() >= 2, op, ": w1 must be a 1x1 convolution weight, got "
              "sizes ", w1.sizes());
  const int64_t squeezed = w1.size(0);
  const at::Tensor first = squeeze_weight(op, w1, "w1", squeezed, channels);
  const at::Tensor second = squeeze_weight(op, w2, "w2", channels, squeezed);
  const at::Tensor bias1 = optional_channel_values(op, b1, "b1", squeezed);
  const at::Tensor bias2 = optional_channel_values(op, b2, "b2", channels);
  at::Tensor dst = empty_channels_last(input.sizes(), input.options());
  if (dst.numel() == 0) return dst;
  const at::Tensor src = to_channels_last(input);
  at::Tensor second_t;
  const memory transposed = ReorderedWeights::instance().get(
      second, memory::desc({channels, squeezed}, DataType::f32, Tag::ab),
      memory::desc({channels, squeezed}, DataType::f32, Tag::ba), &second_t);
  kernel.batch = input.size(0);
  kernel.pixels = input.size(2) * input.size(3);
  kernel.channels = channels;
  kernel.squeezed = squeezed;
  kernel.input = src.data_ptr<float>();
  kernel.w1 = first.data_ptr<float>();
  kernel.b1 = bias1.defined() ? bias1.data_ptr<float>() : nullptr;
  kernel.w2_t = static_cast<const float*>(transposed.get_data_handle());
  kernel.b2 = bias2.defined() ? bias2.data_ptr<float>() : nullptr;
  kernel.output = dst.data_ptr<float>();
  run_squeeze_excite(kernel);
  return dst;
}

at::Tensor squeeze_excite_meta(const at::Tensor& input, const at::Tensor&,
                               const c10::optional<at::Tensor>&,
                               const at::Tensor&,
                               const c10::optional<at::Tensor>&,
                               c10::string_view, c10::string_view) {
  return image_meta("fx_onednn::squeeze_excite", input);
}

// --- Pooling (2-d, max and average) -----------------------------------------
// aten's max_pool2d and avg_pool2d, to the element, on channels-last
// activations: oneDNN's pooling reads them in place where aten's
// channels-last kernels take 2-3x as long.
struct PoolGeometry {
  std::vector<int64_t> output_size;
  memory::dims kernel, strides, dilates, padding_l, padding_r;
  // ceil_mode padded the right or bottom edge beyond `padding`.
  bool ceil_padded = false;
  // A window has no element inside the input (dilation skips over it):
  // aten's max is -inf there, oneDNN's the lowest finite float.
  bool empty_window = false;
};

// An int[2] argument as aten reads it: one value stands for both, and an
// empty stride is the kernel's size.
std::vector<int64_t> pair_of(const char* op, const char* name,
                             at::IntArrayRef values,
                             at::IntArrayRef if_empty = {}) {
  if (values.empty() && !if_empty.empty()) return if_empty.vec();
  TORCH_CHECK(values.size() == 1 || values.size() == 2, op, ": ", name,
              " needs 1 or 2 values, got ", values);
  return {values.front(), values.back()};
}

// PyTorch's pooling_output_shape.
int64_t pool_output_size(int64_t in, int64_t kernel, int64_t pad,
                         int64_t stride, int64_t dilation, bool ceil_mode) {
  const int64_t numerator = in + 2 * pad - dilation * (kernel - 1) - 1 +
                            (ceil_mode ? stride - 1 : 0);
  // Division rounding toward negative infinity.
  int64_t out = numerator / stride - (numerator % stride != 0 && numerator < 0);
  out += 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

PoolGeometry pool_geometry(const char* op, at::IntArrayRef input,
                           at::IntArrayRef kernel_size,
                           at::IntArrayRef stride_size,
                           at::IntArrayRef padding_size,
                           at::IntArrayRef dilation_size, bool ceil_mode) {
  TORCH_CHECK(input.size() == 4 && input[1] > 0 && input[2] > 0 &&
                  input[3] > 0,
              op, ": the input must be 4-dimensional (N, C, H, W) with C, H "
              "and W not 0, got sizes ", input);
  const std::vector<int64_t> kernel = pair_of(op, "kernel_size", kernel_size);
  const std::vector<int64_t> stride =
      pair_of(op, "stride", stride_size, kernel);
  const std::vector<int64_t> padding = pair_of(op, "padding", padding_size);
  const std::vector<int64_t> dilation =
      pair_of(op, "dilation", dilation_size);
  PoolGeometry g;
  g.output_size = {input[0], input[1]};
  for (size_t i = 0; i < 2; ++i) {
    TORCH_CHECK(kernel[i] >= 1 && stride[i] >= 1 && dilation[i] >= 1, op,
                ": kernel_size, stride and dilation must be positive, got ",
                kernel, ", ", stride, ", ", dilation);
    TORCH_CHECK(padding[i] >= 0 && padding[i] <= kernel[i] / 2, op,
                ": padding must be at most half the kernel size, got padding ",
                padding, " for kernel_size ", kernel);
    const int64_t out = pool_output_size(input[2 + i], kernel[i], padding[i],
                                         stride[i], dilation[i], ceil_mode);
    TORCH_CHECK(out >= 1, op, ": the input's sizes ", input,
                " give an empty output for kernel_size ", kernel,
                ", stride ", stride, ", padding ", padding, " and dilation ",
                dilation);
    g.output_size.push_back(out);
    g.kernel.push_back(kernel[i]);
    g.strides.push_back(stride[i]);
    g.dilates.push_back(dilation[i] - 1);
    g.padding_l.push_back(padding[i]);
    // oneDNN counts outputs rounding down: ceil_mode's extra output is
    // padding on the right, up to the end of its last window.
    const int64_t extent = dilation[i] * (kernel[i] - 1) + 1;
    const int64_t right =
        std::max(padding[i], (out - 1) * stride[i] + extent - input[2 + i] -
                                 padding[i]);
    g.padding_r.push_back(right);
    g.ceil_padded = g.ceil_padded || right > padding[i];
    for (int64_t o = 0; o < out && dilation[i] > 1; ++o) {
      bool inside = false;
      for (int64_t k = 0; k < kernel[i] && !inside; ++k) {
        const int64_t at = o * stride[i] - padding[i] + k * dilation[i];
        inside = at >= 0 && at < input[2 + i];
      }
      g.empty_window = g.empty_window || !inside;
    }
  }
  return g;
}

struct Pool {
  dnnl::pooling_v2_forward::primitive_desc pd;
  dnnl::pooling_v2_forward primitive;
};

at::Tensor pool(const char* op, const at::Tensor& input, dnnl::algorithm kind,
                const PoolGeometry& g) {
  check_input(op, input);
  const DataType type = data_type_of(op, input, "input");
  at::Tensor dst = empty_channels_last(g.output_size, input.options());
  if (dst.numel() == 0) return dst;
  std::string key;
  absl::StrAppend(&key, static_cast<int>(kind), "|", static_cast<int>(type),
                  "|");
  append_key(&key, input.sizes());
  append_key(&key, g.output_size);
  for (const memory::dims* d :
       {&g.kernel, &g.strides, &g.dilates, &g.padding_l, &g.padding_r}) {
    append_key(&key, *d);
  }
  absl::StrAppend(&key, at::get_num_threads());
  static PrimitiveCache<std::shared_ptr<const Pool>> cache;
  const auto made = cache.get(key, [&] {
    const Tag layout = Tag::nhwc;
    dnnl::pooling_v2_forward::desc desc(
        dnnl::prop_kind::forward_inference, kind,
        memory::desc(dims_of(input.sizes()), type, layout),
        memory::desc(dims_of(g.output_size), type, layout), g.strides,
        g.kernel, g.dilates, g.padding_l, g.padding_r);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::pooling_v2_forward::primitive_desc pd(desc, attr, cpu_engine());
    return std::make_shared<const Pool>(
        Pool{pd, dnnl::pooling_v2_forward(pd)});
  });
  const at::Tensor src = to_channels_last(input);
  dnnl::engine& engine = cpu_engine();
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, memory(made->pd.src_desc(), engine, src.data_ptr())},
      {DNNL_ARG_DST, memory(made->pd.dst_desc(), engine, dst.data_ptr())}};
  add_thread_scratchpad(made->pd, &args);
  made->primitive.execute(cpu_stream(), args);
  cpu_stream().wait();
  return dst;
}

at::Tensor max_pool2d(const at::Tensor& input, at::IntArrayRef kernel_size,
                      at::IntArrayRef stride, at::IntArrayRef padding,
                      at::IntArrayRef dilation, bool ceil_mode) {
  const char* op = "fx_onednn::max_pool2d";
  const PoolGeometry g = pool_geometry(op, input.sizes(), kernel_size, stride,
                                       padding, dilation, ceil_mode);
  if (g.empty_window) {
    check_input(op, input);
    return to_channels_last(at::max_pool2d(input, kernel_size, stride, padding,
                                           dilation, ceil_mode));
  }
  return pool(op, input, dnnl::algorithm::pooling_max, g);
}

at::Tensor avg_pool2d(const at::Tensor& input, at::IntArrayRef kernel_size,
                      at::IntArrayRef stride, at::IntArrayRef padding,
                      bool ceil_mode, bool count_include_pad) {
  const char* op = "fx_onednn::avg_pool2d";
  const std::vector<int64_t> no_dilation = {1, 1};
  const PoolGeometry g = pool_geometry(op, input.sizes(), kernel_size, stride,
                                       padding, no_dilation, ceil_mode);
  if (count_include_pad && g.ceil_padded) {
    // aten divides a window reaching past the padding by its part inside
    // input and padding; oneDNN would divide by the whole kernel.
    check_input(op, input);
    return to_channels_last(at::avg_pool2d(input, kernel_size, stride, padding,
                                           ceil_mode, count_include_pad));
  }
  return pool(op, input,
              count_include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                : dnnl::algorithm::pooling_avg_exclude_padding,
              g);
}

at::Tensor max_pool2d_meta(const at::Tensor& input, at::IntArrayRef kernel_size,
                           at::IntArrayRef stride, at::IntArrayRef padding,
                           at::IntArrayRef dilation, bool ceil_mode) {
  return empty_channels_last(
      pool_geometry("fx_onednn::max_pool2d", input.sizes(), kernel_size,
                    stride, padding, dilation, ceil_mode)
          .output_size,
      input.options());
}

at::Tensor avg_pool2d_meta(const at::Tensor& input, at::IntArrayRef kernel_size,
                           at::IntArrayRef stride, at::IntArrayRef padding,
                           bool ceil_mode, bool) {
  return empty_channels_last(
      pool_geometry("fx_onednn::avg_pool2d", input.sizes(), kernel_size,
                    stride, padding, {1, 1}, ceil_mode)
          .output_size,
      input.options());
}

}  // namespace

const std::vector<std::string>& activation_names() {
  static const auto* names = [] {
    auto* v = new std::vector<std::string>{"none"};
    for (const Activation& a : kActivations) v->push_back(a.name);
    return v;
  }();
  return *names;
}

std::string last_kernel() { return last_kernel_name; }

bool bf16_supported() {
  static const bool supported =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return supported;
}

void set_winograd_convolutions(bool enabled) { winograd_enabled = enabled; }

void release_reordered_weights() { ReorderedWeights::instance().clear(); }
bool winograd_convolutions() { return winograd_enabled; }

void register_operators() {}

// The float32 weight a pack_*_weight call was given, in aten's layout:
// the packed data reordered back (bfloat16 packings widened).
at::Tensor unpack_weight(const at::Tensor& packed, c10::string_view kind,
                         int64_t groups) {
  const char* op = "fx_onednn::unpack_weight";
  struct Packer {
    const char* kind;
    PackKind pack_kind;
    const char* name;
  };
  static constexpr Packer kPackers[] = {
      {"conv", PackKind::kConv, "fx_onednn::pack_conv_weight"},
      {"conv_transpose", PackKind::kConvTranspose,
       "fx_onednn::pack_conv_transpose_weight"},
      {"linear", PackKind::kLinear, "fx_onednn::pack_linear_weight"}};
  const Packer* packer = nullptr;
  for (const Packer& p : kPackers) {
    if (kind == p.kind) packer = &p;
  }
  TORCH_CHECK(packer != nullptr, op, ": kind must be conv, conv_transpose or "
              "linear, got '", std::string(kind), "'");
  TORCH_CHECK(groups >= 1, op, ": groups must be 1 or more, got ", groups);
  const Header& header = header_of(packed, op, packer->name);
  TORCH_CHECK(header.kind == packer->pack_kind, op,
              ": the weight was not made by ", packer->name,
              "; give the kind of the pack operator that made it");
  const at::IntArrayRef sizes = packed.sizes();
  TORCH_CHECK(packer->pack_kind != PackKind::kLinear || packed.dim() == 2, op,
              ": a linear weight is 2-d, got ", sizes);
  const memory::desc plain =
      plain_weight_desc(packer->pack_kind, sizes, groups);
  const memory::desc from_desc(header.desc);
  TORCH_CHECK(from_desc.dims() == plain.dims(), op, ": the weight was packed "
              "for other sizes or groups than ", sizes, " in ", groups,
              " groups (kind ", std::string(kind), ")");
  at::Tensor weight = at::empty(sizes, packed.options());
  memory from(from_desc, cpu_engine(), const_cast<void*>(packed_data(packed)));
  memory to(plain, cpu_engine(), weight.data_ptr());
  dnnl::reorder(from, to).execute(cpu_stream(), from, to);
  cpu_stream().wait();
  return weight;
}

TORCH_LIBRARY(fx_onednn, m) {
  m.def(
      "pack_conv_weight(Tensor weight, int[] input_size, int[] stride, "
      "int[] padding, int[] dilation, int groups, bool bf16=False) -> "
      "Tensor");
  m.def(
      "conv(Tensor input, Tensor weight, Tensor? bias, int[] stride, "
      "int[] padding, int[] dilation, int groups, Tensor? other=None, "
      "str activation=\"none\", float alpha=0., float beta=0.) -> Tensor");
  m.def(
      "conv_add_(Tensor(a!) self, Tensor input, Tensor weight, Tensor? bias, "
      "int[] stride, int[] padding, int[] dilation, int groups, "
      "str activation=\"none\", float alpha=0., float beta=0.) -> "
      "Tensor(a!)");
  m.def(
      "pack_linear_weight(Tensor weight, int[] input_size, bool bf16=False) "
      "-> Tensor");
  m.def(
      "linear(Tensor input, Tensor weight, Tensor? bias, "
      "str activation=\"none\", float alpha=0., float beta=0.) -> Tensor");
  m.def(
      "pack_conv_transpose_weight(Tensor weight, int[] input_size, "
      "int[] stride, int[] padding, int[] output_padding, int[] dilation, "
      "int groups) -> Tensor");
  m.def(
      "conv_transpose(Tensor input, Tensor weight, Tensor? bias, "
      "int[] stride, int[] padding, int[] output_padding, int[] dilation, "
      "int groups, str activation=\"none\", float alpha=0., float beta=0.) "
      "-> Tensor");
  m.def(
      "conv_chain(Tensor input, Tensor[] weights, Tensor[] biases, "
      "int[] layers, str activations, float[] params) -> Tensor");
  m.def("matmul(Tensor self, Tensor other, float scale=1.) -> Tensor");
  m.def("unpack_weight(Tensor packed, str kind, int groups=1) -> Tensor");
  m.def(
      "lstm(Tensor input, Tensor[] hx, Tensor[] params, int num_layers, "
      "bool batch_first, bool bidirectional=False) -> (Tensor, Tensor, "
      "Tensor)");
  m.def(
      "gru(Tensor input, Tensor hx, Tensor[] params, int num_layers, "
      "bool batch_first, bool bidirectional=False) -> (Tensor, Tensor)");
  m.def(
      "batch_norm(Tensor input, Tensor? weight, Tensor? bias, "
      "Tensor running_mean, Tensor running_var, float eps, "
      "str activation=\"none\") -> Tensor");
  m.def("concat_buffer(Tensor[] tensors, int channels) -> Tensor");
  m.def(
      "concat_write_(Tensor(a!) self, Tensor[] tensors, int offset) -> "
      "Tensor(a!)");
  m.def(
      "squeeze_excite(Tensor input, Tensor w1, Tensor? b1, Tensor w2, "
      "Tensor? b2, str activation=\"relu\", str gate=\"sigmoid\") -> Tensor");
  m.def(
      "max_pool2d(Tensor self, int[2] kernel_size, int[2] stride, "
      "int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> Tensor");
  m.def(
      "avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride, "
      "int[2] padding=0, bool ceil_mode=False, bool count_include_pad=True) "
      "-> Tensor");
}

TORCH_LIBRARY_IMPL(fx_onednn, CPU, m) {
  m.impl("pack_conv_weight", &pack_conv_weight);
  m.impl("conv", &conv);
  m.impl("conv_add_", &conv_add_);
  m.impl("conv_chain", &conv_chain);
  m.impl("pack_linear_weight", &pack_linear_weight);
  m.impl("linear", &linear);
  m.impl("pack_conv_transpose_weight", &pack_conv_transpose_weight);
  m.impl("conv_transpose", &conv_transpose);
  m.impl("matmul", &matmul);
  m.impl("unpack_weight", &unpack_weight);
  m.impl("lstm", &lstm);
  m.impl("gru", &gru);
  m.impl("batch_norm", &batch_norm);
  m.impl("concat_buffer", &concat_buffer);
  m.impl("concat_write_", &concat_write_);
  m.impl("squeeze_excite", &squeeze_excite);
  m.impl("max_pool2d", &max_pool2d);
  m.impl("avg_pool2d", &avg_pool2d);
}

// Inference only: no gradient flows through these operators.
TORCH_LIBRARY_IMPL(fx_onednn, Autograd, m) {
  for (const char* name :
       {"pack_conv_weight", "conv", "conv_add_", "conv_chain",
       "pack_linear_weight",
        "linear", "pack_conv_transpose_weight", "conv_transpose",
        "matmul", "unpack_weight", "lstm", "gru", "batch_norm",
        "concat_buffer", "concat_write_", "squeeze_excite", "max_pool2d",
        "avg_pool2d"}) {
    m.impl(name, torch::CppFunction::makeFallthrough());
  }
}

TORCH_LIBRARY_IMPL(fx_onednn, Meta, m) {
  m.impl("pack_conv_weight", &pack_conv_weight_meta);
  m.impl("conv", &conv_meta);
  m.impl("conv_add_", &conv_add_meta);
  m.impl("conv_chain", &conv_chain_meta);
  m.impl("pack_linear_weight", &pack_linear_weight_meta);
  m.impl("linear", &linear_meta);
  m.impl("pack_conv_transpose_weight", &pack_conv_transpose_weight_meta);
  m.impl("conv_transpose", &conv_transpose_meta);
  m.impl("matmul", &matmul_meta);
  m.impl("lstm", &lstm_meta);
  m.impl("gru", &gru_meta);
  m.impl("batch_norm", &batch_norm_meta);
  m.impl("concat_buffer", &concat_buffer_meta);
  m.impl("concat_write_", &concat_write_meta);
  m.impl("squeeze_excite", &squeeze_excite_meta);
  m.impl("max_pool2d", &max_pool2d_meta);
  m.impl("avg_pool2d", &avg_pool2d_meta);
}

std::vector<int64_t> channels_last_strides(const std::vector<int64_t>& sizes) {
  switch (sizes.size()) {
    case 3: {
      const std::vector<int64_t> s =
          c10::get_channels_last_strides_2d({sizes[0], sizes[1], 1, sizes[2]});
      return {s[0], s[1], s[3]};
    }
    case 4:
      return c10::get_channels_last_strides_2d(sizes);
    default:
      return c10::get_channels_last_strides_3d(sizes);
  }
}

}  // namespace fx::onednn
