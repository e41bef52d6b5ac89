#include "lowering/onednn_ops.h"

#include <torch/library.h>

#include <ATen/ATen.h>

#include <string>
#include <vector>
#include <oneapi/dnnl/dnnl.hpp>

#include "lowering/onednn_support.h"

// The operators' kernels are registered beside them: onednn_conv.cc,
// onednn_matmul.cc, onednn_image.cc.
namespace fx::onednn {

using namespace internal;  // NOLINT: the operators' shared layer

bool bf16_supported() {
  static const bool supported =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return supported;
}

void release_reordered_weights() {
  internal::ReorderedWeights::instance().clear();
}

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

// The schemas, as lowering/operators.def declares them.
TORCH_LIBRARY(fx_onednn, m) {
#define FX_ONEDNN_OPERATOR(name, schema, cost, traits) m.def(schema);
#include "lowering/operators.def"
#undef FX_ONEDNN_OPERATOR
}

TORCH_LIBRARY_IMPL(fx_onednn, CPU, m) {
  m.impl("unpack_weight", &unpack_weight);
}

// Inference only: no gradient flows through these operators.
TORCH_LIBRARY_IMPL(fx_onednn, Autograd, m) {
#define FX_ONEDNN_OPERATOR(name, schema, cost, traits) \
  m.impl(#name, torch::CppFunction::makeFallthrough());
#include "lowering/operators.def"
#undef FX_ONEDNN_OPERATOR
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

