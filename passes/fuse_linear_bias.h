// Linear layers put back together: the product of a value by a constant 2-d
// weight followed by the add of a constant bias becomes one aten::linear.
//
// LibTorch's linear is a composite operator: on an input of 3 or more
// dimensions that is not contiguous, and under the tracer (whose proxies
// answer is_contiguous() with false), it calls matmul(input, weight.t())
// and then adds the bias in place, and the trace records those two calls
// (a C++ transformer block's every linear layer traced on LibTorch 2.13):
//
//   before:  %t = call_function[target=aten::t](args = (%fc_weight,), kwargs = {})
//            %matmul = call_function[target=aten::matmul](args = (%x, %t), kwargs = {})
//            %add_ = call_function[target=aten::add_.Tensor](args = (%matmul, %fc_bias), kwargs = {})
//   after:   %linear = call_function[target=aten::linear](args = (%x, %fc_weight, %fc_bias), kwargs = {})
//
// so that what follows sees one linear layer: fuse_conv_bn, the lowering's
// linear fusions (the bias, an activation and a residual add in one oneDNN
// call), quantization, ONNX's Gemm. Only when the product (the pattern
// library's match_linear: aten::matmul of a constant 2-d weight, through
// aten::t or not) has the add as its one user, the add's alpha is 1, and
// the bias is a constant 1-d tensor of the output's features in the
// weight's dtype and device; the add may be in place (on the product) or
// not (either operand). The result equals the two calls' within rounding
// (aten::linear adds the bias inside its matrix multiply), not bitwise.
#pragma once

#include "passes/pass.h"

namespace fx {

// Returns how many linear layers were put back together.
int64_t fuse_linear_bias(GraphModuleImpl& module);

class FuseLinearBias : public Pass {
 public:
  std::string name() const override { return "fuse_linear_bias"; }
  Bodies bodies() const override { return Bodies::kEachGraph; }
  bool run(GraphModuleImpl& module) override {
    return fuse_linear_bias(module) > 0;
  }
};

}  // namespace fx
