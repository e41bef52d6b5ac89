// Observers: what prepare_fx inserts to record the range of each value
// while calibration data runs, and the step from that record to a scale
// and zero point (torch.ao.quantization.observer).
//
// An observer is a graph node calling the operator fx_quant::observe, which
// returns its input unchanged and updates a state tensor, a buffer of the
// prepared GraphModule, in place; its arguments say which observer it is,
// so a saved prepared module keeps calibrating after fx::load:
//
//   %conv2d_observer = get_attr[target=conv2d_observer]
//   %observe = call_function[target=fx_quant::observe](args = (%conv2d, %conv2d_observer), kwargs = {observer: 'histogram', dtype: torch.quint8, qscheme: 'per_tensor_affine', quant_min: 0, quant_max: 255, eps: 1.1920928955078125e-07})
//
// Converted modules quantize weights with fx_quant::quantize_weight, which
// observes and quantizes in one step (quantization/ops.h).
//
// Observing is not thread-safe: calibrate a prepared module on one thread.
#pragma once

#include <ATen/core/Tensor.h>

#include "fx/ir/argument.h"
#include "quantization/qconfig.h"

namespace fx {

// A scale and zero point: 0-dim tensors per tensor, 1-d per channel.
struct QParams {
  at::Tensor scale;        // float64
  at::Tensor zero_point;   // int64
  bool per_channel() const { return scale.dim() == 1; }
  double scale_value() const;          // per tensor only
  int64_t zero_point_value() const;    // per tensor only
};

// The state an observer of `spec` keeps for a value of sizes `sizes`
// (float32: min and max, a histogram's bins, per-channel minima and
// maxima), as before any data.
at::Tensor make_observer_state(const ObserverSpec& spec,
                               at::IntArrayRef sizes);
// Records `x` into `state` (what fx_quant::observe does).
void observe(const ObserverSpec& spec, const at::Tensor& x,
             const at::Tensor& state);
// A fixed_qparams observer's state: [scale, zero point] per tensor (from
// one-element `scale` and `zero_point`), [2, C] per channel.
at::Tensor fixed_qparams_state(const at::Tensor& scale,
                               const at::Tensor& zero_point, bool per_channel);
// Whether `state` has seen any value.
bool observed(const ObserverSpec& spec, const at::Tensor& state);
// The scale and zero point (torch.ao's calculate_qparams: the histogram
// observer searches the range that minimizes the L2 quantization error).
QParams calculate_qparams(const ObserverSpec& spec, const at::Tensor& state);
// Quantizes `x` with `qparams` to spec.dtype.
at::Tensor quantize(const ObserverSpec& spec, const at::Tensor& x,
                    const QParams& qparams);

// The keyword arguments of fx_quant::observe / quantize_weight for `spec`,
// and back. spec_from_kwargs throws QuantizationError naming a bad value.
Kwargs observer_kwargs(const ObserverSpec& spec);
ObserverSpec spec_from_arguments(const std::string& observer,
                                 c10::ScalarType dtype,
                                 const std::string& qscheme,
                                 int64_t quant_min, int64_t quant_max,
                                 double eps, double averaging_constant,
                                 int64_t ch_axis);

}  // namespace fx
