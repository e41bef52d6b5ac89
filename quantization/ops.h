// The fx_quant operators (registered with the dispatcher when this library
// is linked): what prepared and converted graphs call besides aten's and
// quantized::'s own.
//
//   fx_quant::observe(Tensor(a) self, Tensor(b!) state, str observer,
//       ScalarType dtype, str qscheme, int quant_min, int quant_max,
//       float eps, float averaging_constant=0.01, int ch_axis=0,
//       str role="output") -> Tensor(a)
//     records self's range into state (quantization/observer.h); returns
//     self. role tells convert_fx why it is there: "output" (the operator
//     making self is quantized), "input" (self is quantized for the
//     quantized operators reading it), "weight".
//   fx_quant::fake_quantize(Tensor self, Tensor observer_enabled,
//       Tensor fake_quant_enabled, Tensor(a!) min_val, Tensor(b!) max_val,
//       Tensor(c!) scale, Tensor(d!) zero_point, ScalarType dtype,
//       str qscheme, int quant_min, int quant_max,
//       float averaging_constant=0.01, int ch_axis=0, str role="output")
//       -> Tensor
//     quantization-aware training's fake quantizer (quantization/qat.h):
//     torch.ao's FusedMovingAvgObsFakeQuantize, i.e. aten's
//     fused_moving_avg_obs_fake_quant on the state buffers: while
//     observer_enabled, min_val / max_val follow the value's range by a
//     moving average and scale / zero_point are recomputed; while
//     fake_quant_enabled, the value is quantized and dequantized. The
//     gradient is the straight-through estimator's (1 inside the clamping
//     range, 0 outside). role as observe's.
//   fx_quant::quantize_weight(Tensor weight, str observer, ScalarType dtype,
//       str qscheme, int quant_min, int quant_max, float eps,
//       int ch_axis=0, Tensor? state=None) -> Tensor
//     observes and quantizes a weight in one step; with `state`, an
//     observer's (a QAT module's weight fake quantizer's scale and zero
//     point, as a fixed_qparams observer holds them), by that instead.
//   fx_quant::conv1d_prepack / conv2d_prepack (Tensor weight, Tensor? bias,
//       int[] stride, int[] padding, int[] dilation, int groups,
//       str engine) -> __torch__.torch.classes.quantized.Conv2dPackedParamsBase
//   fx_quant::conv3d_prepack(...) -> ...Conv3dPackedParamsBase
//   fx_quant::linear_prepack(Tensor weight, Tensor? bias, str engine)
//       -> __torch__.torch.classes.quantized.LinearPackedParamsBase
//     quantized::*_prepack for the named engine ("onednn", "qnnpack"),
//     whatever the global one is, so that a converted module packs for the
//     engine it was converted for when fx::load packs again.
#pragma once

namespace fx::quantization {

// A no-op: linking this library registers the operators; calling it keeps
// the linker from dropping them.
void register_operators();

}  // namespace fx::quantization
