// Operators that init steps (GraphModuleImpl::add_init_step) call to
// compute folded parameters. They live beside the runtime, not beside the
// passes that create them, so that any program that loads or runs a
// GraphModule (fx::load, generated C++) can run its init steps again.
//
//   fx_fold::fuse_conv_bn_weights(Tensor conv_w, Tensor? conv_b,
//       Tensor bn_rm, Tensor bn_rv, float bn_eps, Tensor? bn_w,
//       Tensor? bn_b, bool transpose=False, int groups=1)
//       -> (Tensor, Tensor)
//
// torch.nn.utils.fusion.fuse_conv_bn_weights as one operator: a
// convolution's (or linear layer's) weight and bias with the eval-mode
// batch norm after it folded in,
//
//   scale = bn_w / sqrt(bn_rv + bn_eps)      (1 / sqrt(...) without bn_w)
//   W'    = W * scale                        (per output channel)
//   b'    = (b - bn_rm) * scale + bn_b       (b = 0 without conv_b)
//
// The output channels are dimension 0 of W (a convolution or a linear
// layer: torch's fuse_linear_bn_weights is this with transpose false), or
// dimension 1 for a transposed convolution, whose `groups` > 1 lays W out
// as [in, out / groups, k...]: output channel g * (out / groups) + j is
// W[g * (in / groups) + i, j]. The arithmetic is aten's, in the order
// above (rsqrt of the sum, products, addcmul), so a fold is bitwise the
// same whether one operator or the steps it stands for compute it.
#pragma once

#include <string>
#include <tuple>

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

namespace fx {

// The operator's qualified name, as a call_function's target.
inline constexpr const char* kFuseConvBnWeights =
    "fx_fold::fuse_conv_bn_weights";

// Why fuse_conv_bn_weights refuses parameters of these sizes (the text of
// its error, after the operator's name), or "" when it takes them: a
// weight of at least 2 dimensions, groups of at least 1 (dividing a
// transposed weight's dimension 0), and every statistic and the layer's
// bias 1-d, of one value per output channel. fuse_conv_bn asks before it
// rewrites a pair, so that a pair the operator would refuse stays as it is.
std::string fuse_conv_bn_refusal(at::IntArrayRef conv_w,
                                 c10::optional<at::IntArrayRef> conv_b,
                                 at::IntArrayRef bn_rm, at::IntArrayRef bn_rv,
                                 c10::optional<at::IntArrayRef> bn_w,
                                 c10::optional<at::IntArrayRef> bn_b,
                                 bool transpose, int64_t groups);

std::tuple<at::Tensor, at::Tensor> fuse_conv_bn_weights(
    const at::Tensor& conv_w, const c10::optional<at::Tensor>& conv_b,
    const at::Tensor& bn_rm, const at::Tensor& bn_rv, double bn_eps,
    const c10::optional<at::Tensor>& bn_w,
    const c10::optional<at::Tensor>& bn_b, bool transpose, int64_t groups);

}  // namespace fx
