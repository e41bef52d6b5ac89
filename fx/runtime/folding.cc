#include "fx/runtime/folding.h"

#include <vector>

#include <ATen/ATen.h>
#include <torch/library.h>

#include "absl/strings/str_cat.h"
#include "fx/ir/errors.h"

namespace fx {
namespace {

bool defined(const c10::optional<at::Tensor>& t) {
  return t.has_value() && t->defined();
}

c10::optional<at::IntArrayRef> sizes_if_defined(
    const c10::optional<at::Tensor>& t) {
  if (!defined(t)) return c10::nullopt;
  return t->sizes();
}

}  // namespace

std::string fuse_conv_bn_refusal(at::IntArrayRef conv_w,
                                 c10::optional<at::IntArrayRef> conv_b,
                                 at::IntArrayRef bn_rm, at::IntArrayRef bn_rv,
                                 c10::optional<at::IntArrayRef> bn_w,
                                 c10::optional<at::IntArrayRef> bn_b,
                                 bool transpose, int64_t groups) {
  if (conv_w.size() < 2) {
    return absl::StrCat(
        "the weight must have at least 2 dimensions (output and input "
        "channels), got ",
        c10::str(conv_w));
  }
  if (groups < 1) return absl::StrCat("groups must be at least 1, got ", groups);
  if (transpose && conv_w[0] % groups != 0) {
    return absl::StrCat(
        "a transposed weight's first dimension (input channels) must divide "
        "into groups, got ",
        c10::str(conv_w), " in ", groups,
        " groups: pass the groups of the transposed convolution");
  }
  const int64_t channels = transpose ? conv_w[1] * groups : conv_w[0];
  const char* not_after =
      "the batch norm does not follow this layer (fold only a batch norm "
      "of as many channels as the layer's output)";
  struct Checked {
    const char* name;
    c10::optional<at::IntArrayRef> sizes;
    const char* hint;
  };
  const Checked checked[] = {
      {"bn_rm (the running mean)", bn_rm, not_after},
      {"bn_rv (the running variance)", bn_rv, not_after},
      {"bn_w (the batch norm's weight)", bn_w, not_after},
      {"bn_b (the batch norm's bias)", bn_b, not_after},
      {"conv_b (the layer's bias)", conv_b,
       "pass the layer's own bias, of one value per output channel (or "
       "None)"}};
  for (const Checked& c : checked) {
    if (!c.sizes || (c.sizes->size() == 1 && (*c.sizes)[0] == channels)) {
      continue;
    }
    return absl::StrCat(
        c.name, " must hold one value per output channel (", channels,
        " for a weight of ", c10::str(conv_w),
        transpose ? absl::StrCat(", transposed, groups = ", groups) : "",
        "), got ", c10::str(*c.sizes), ": ", c.hint);
  }
  return "";
}

std::tuple<at::Tensor, at::Tensor> fuse_conv_bn_weights(
    const at::Tensor& conv_w, const c10::optional<at::Tensor>& conv_b,
    const at::Tensor& bn_rm, const at::Tensor& bn_rv, double bn_eps,
    const c10::optional<at::Tensor>& bn_w,
    const c10::optional<at::Tensor>& bn_b, bool transpose, int64_t groups) {
  const std::string refusal = fuse_conv_bn_refusal(
      conv_w.sizes(), sizes_if_defined(conv_b), bn_rm.sizes(), bn_rv.sizes(),
      sizes_if_defined(bn_w), sizes_if_defined(bn_b), transpose, groups);
  if (!refusal.empty()) {
    throw GraphError(absl::StrCat(kFuseConvBnWeights, ": ", refusal));
  }
  const int64_t channel_dim = transpose ? 1 : 0;

  const at::Tensor inv_std = at::rsqrt(at::add(bn_rv, bn_eps));
  const at::Tensor scale = defined(bn_w) ? at::mul(*bn_w, inv_std) : inv_std;
  at::Tensor weight;
  if (transpose && groups > 1) {
    const at::IntArrayRef sizes = conv_w.sizes();
    std::vector<int64_t> grouped = {groups, sizes[0] / groups, sizes[1]};
    std::vector<int64_t> scale_shape = {groups, 1, sizes[1]};
    for (size_t i = 2; i < sizes.size(); ++i) {
      grouped.push_back(sizes[i]);
      scale_shape.push_back(1);
    }
    weight = at::mul(at::reshape(conv_w, grouped),
                     at::reshape(scale, scale_shape))
                 .reshape(sizes);
  } else {
    std::vector<int64_t> shape(conv_w.dim(), 1);
    shape[channel_dim] = -1;
    weight = at::mul(conv_w, at::reshape(scale, shape));
  }
  const at::Tensor shifted =
      defined(conv_b) ? at::sub(*conv_b, bn_rm) : at::neg(bn_rm);
  at::Tensor bias = defined(bn_b) ? at::addcmul(*bn_b, shifted, scale)
                                  : at::mul(shifted, scale);
  return {std::move(weight), std::move(bias)};
}

}  // namespace fx

TORCH_LIBRARY(fx_fold, m) {
  m.def(
      "fuse_conv_bn_weights(Tensor conv_w, Tensor? conv_b, Tensor bn_rm, "
      "Tensor bn_rv, float bn_eps, Tensor? bn_w, Tensor? bn_b, "
      "bool transpose=False, int groups=1) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(fx_fold, CompositeImplicitAutograd, m) {
  m.impl("fuse_conv_bn_weights", &fx::fuse_conv_bn_weights);
}
