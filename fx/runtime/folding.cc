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

std::string sizes_of(const at::Tensor& t) {
  return c10::str(t.sizes());
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> fuse_conv_bn_weights(
    const at::Tensor& conv_w, const c10::optional<at::Tensor>& conv_b,
    const at::Tensor& bn_rm, const at::Tensor& bn_rv, double bn_eps,
    const c10::optional<at::Tensor>& bn_w,
    const c10::optional<at::Tensor>& bn_b, bool transpose, int64_t groups) {
  const char* what = kFuseConvBnWeights;
  if (conv_w.dim() < 2) {
    throw GraphError(absl::StrCat(
        what, ": the weight must have at least 2 dimensions (output and "
              "input channels), got ",
        sizes_of(conv_w)));
  }
  if (groups < 1) {
    throw GraphError(absl::StrCat(what, ": groups must be at least 1, got ",
                                  groups));
  }
  if (transpose && conv_w.size(0) % groups != 0) {
    throw GraphError(absl::StrCat(
        what, ": a transposed weight's first dimension (input channels) "
              "must divide into groups, got ",
        sizes_of(conv_w), " in ", groups,
        " groups: pass the groups of the transposed convolution"));
  }
  const int64_t channel_dim = transpose ? 1 : 0;
  const int64_t channels = conv_w.size(channel_dim) * (transpose ? groups : 1);
  auto check_channels = [&](const at::Tensor& t, const char* name,
                            const char* hint) {
    if (t.dim() != 1 || t.size(0) != channels) {
      throw GraphError(absl::StrCat(
          what, ": ", name, " must hold one value per output channel (",
          channels, " for a weight of ", sizes_of(conv_w),
          transpose ? absl::StrCat(", transposed, groups = ", groups) : "",
          "), got ", sizes_of(t), ": ", hint));
    }
  };
  const char* not_after =
      "the batch norm does not follow this layer (fold only a batch norm "
      "of as many channels as the layer's output)";
  check_channels(bn_rm, "bn_rm (the running mean)", not_after);
  check_channels(bn_rv, "bn_rv (the running variance)", not_after);
  if (defined(bn_w)) {
    check_channels(*bn_w, "bn_w (the batch norm's weight)", not_after);
  }
  if (defined(bn_b)) {
    check_channels(*bn_b, "bn_b (the batch norm's bias)", not_after);
  }
  if (defined(conv_b)) {
    check_channels(*conv_b, "conv_b (the layer's bias)",
                   "pass the layer's own bias, of one value per output "
                   "channel (or None)");
  }

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
