// Quantization-aware training (torch.ao.quantization's prepare_qat_fx):
// a module traced in training mode gets fake quantizers where prepare_fx
// would put observers, is trained (or fine-tuned) with them, and
// convert_fx turns it into the same int8 graph post-training quantization
// makes.
//
//   model->train();
//   fx::GraphModule gm = fx::symbolic_trace(model, example);
//   fx::GraphModule qat = fx::prepare_qat_fx(gm, fx::get_default_qat_qconfig_mapping("qnnpack"));
//   torch::optim::SGD sgd(qat->parameters(), 1e-3);
//   for (...) { sgd.zero_grad(); loss(qat(x).toTensor(), y).backward(); sgd.step(); }
//   fx::freeze_bn_stats(qat);                       // late in training, as torch.ao's recipes do
//   qat->eval();
//   fx::GraphModule int8 = fx::convert_fx(qat);     // batch norms folded, kernels int8
//
// A fake quantizer is a call of fx_quant::fake_quantize (quantization/ops.h:
// torch.ao's FusedMovingAvgObsFakeQuantize, values and gradients), its
// state buffers of the module under <name>.observer_enabled,
// .fake_quant_enabled, .min_val, .max_val, .scale, .zero_point. A
// convolution followed by a batch norm in training mode (+ relu) becomes
// the block torch.ao's ConvBn2d runs: the weight scaled by the batch
// norm's gamma / sqrt(running_var + eps) is fake-quantized, the
// convolution's output scaled back, and the batch norm still normalizes
// by the batch's statistics and updates its running ones until
// freeze_bn_stats:
//
//   before (traced in training mode):
//       %conv2d = aten::conv2d(%x, %conv1_weight, None, [1, 1], [1, 1])
//       %batch_norm = aten::batch_norm(%conv2d, %bn1_weight, %bn1_bias, %bn1_running_mean, %bn1_running_var, True, 0.1, 1e-05, True)
//       %relu = aten::relu(%batch_norm)
//   after:
//       %x_fake_quant = fx_quant::fake_quantize(%x, %...observer_enabled, ..., torch.quint8, 'per_tensor_affine', 0, 255, role='input')
//       %add = aten::add.Scalar(%bn1_running_var, 1e-05)
//       %sqrt = aten::sqrt(%add)
//       %div = aten::div.Tensor(%bn1_weight, %sqrt)                  # gamma / std
//       %mul = aten::mul.Tensor(%conv1_weight, aten::reshape(%div, [-1, 1, 1, 1]))
//       %weight_fake_quant = fx_quant::fake_quantize(%mul, ..., torch.qint8, 'per_channel_symmetric', -128, 127, role='weight')
//       %conv2d = aten::conv2d(%x_fake_quant, %weight_fake_quant, None, [1, 1], [1, 1])
//       %div_1 = aten::div.Tensor(%conv2d, aten::reshape(%div, [1, -1, 1, 1]))
//       %batch_norm = aten::batch_norm(%div_1, ..., True, 0.1, 1e-05, True)
//       %relu = aten::relu(%batch_norm)
//       %relu_fake_quant = fx_quant::fake_quantize(%relu, ..., role='output')
//
// A linear layer's batch norm is not folded: it stays its own operation,
// in the QAT module and in the int8 graph.
//
// The module given is never modified: the prepared one trains copies of
// its parameters and buffers (a leaf module's, opaque C++, are shared). Traced in training mode, it runs in training
// mode (and refuses eval mode, as any module traced in training mode
// does). Traced in eval mode (a TorchScript file, say), it fine-tunes in
// eval mode: batch norms frozen from the start, no dropout, what
// distillation from the float model wants (`fx quantize --qat`).
// convert_fx takes it in either. Errors are QuantizationErrors naming what to do.
#pragma once

#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "fx/runtime/graph_module.h"
#include "quantization/qconfig.h"

namespace fx {

// Fake quantizers and conv/batch-norm blocks (see above), for the mapping's
// QConfigs: get_default_qat_qconfig_mapping(engine) as torch.ao's, or any
// mapping whose observers are moving averages (min_max and histogram
// observers cannot run inside training: QuantizationError). Quantized are
// what prepare_fx quantizes, in the same places.
GraphModule prepare_qat_fx(const GraphModule& module,
                           const QConfigMapping& mapping,
                           const std::vector<c10::IValue>& example_inputs = {});

// The controls torch.ao's users rely on, for the whole module or, with
// `scope`, the fake quantizers and batch norms of one module path (and
// everything below it) or of one node name. Each returns how many it
// changed; a scope that names nothing is a QuantizationError.
//   enable_observer / disable_observer: whether ranges keep being observed
//     (and scales recomputed);
//   enable_fake_quant / disable_fake_quant: whether values are quantized
//     and dequantized (off: the float model);
//   freeze_bn_stats / update_bn_stats: whether the conv/batch-norm blocks'
//     batch norms normalize by the batch and update their running
//     statistics (update), or use the running statistics as they are
//     (frozen), as torch.ao's ConvBn modules' freeze_bn.
int enable_observer(GraphModule& module, const std::string& scope = "");
int disable_observer(GraphModule& module, const std::string& scope = "");
int enable_fake_quant(GraphModule& module, const std::string& scope = "");
int disable_fake_quant(GraphModule& module, const std::string& scope = "");
int freeze_bn_stats(GraphModule& module, const std::string& scope = "");
int update_bn_stats(GraphModule& module, const std::string& scope = "");

// Quantization-aware training by distillation from the float model, for
// when there are inputs but no labels (what `fx quantize --qat` runs):
// `steps` Adam steps, each on the next of `batches` in turn, minimizing
// the squared error of `qat`'s output against `teacher`'s relative to the
// teacher's energy (so the output's scale does not set the step); the
// observers are disabled halfway. `qat` is prepare_qat_fx's result for
// `teacher` (traced in eval mode: batch norms frozen). Both must return one
// tensor; anything else, or no batches, is a QuantizationError.
struct DistillationOptions {
  int64_t steps = 100;
  double lr = 1e-5;
};
struct DistillationReport {
  double first_loss = 0, last_loss = 0;
  std::vector<double> step_ms;  // each step's time
};
DistillationReport distill_qat(GraphModule& qat, GraphModule& teacher,
                               const std::vector<std::vector<c10::IValue>>& batches,
                               const DistillationOptions& options = {});

}  // namespace fx
