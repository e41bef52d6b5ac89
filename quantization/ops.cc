#include "quantization/ops.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <string>

#include "quantization/observer.h"
#include "quantization/qconfig.h"

namespace fx {
namespace quantization {
void register_operators() {}
}  // namespace quantization

namespace {

at::Tensor observe_op(const at::Tensor& self, const at::Tensor& state,
                      c10::string_view observer, c10::ScalarType dtype,
                      c10::string_view qscheme, int64_t quant_min,
                      int64_t quant_max, double eps, double averaging_constant,
                      int64_t ch_axis, c10::string_view /*role*/) {
  const ObserverSpec spec = spec_from_arguments(
      std::string(observer), dtype, std::string(qscheme), quant_min, quant_max,
      eps, averaging_constant, ch_axis);
  observe(spec, self, state);
  return self;
}

at::Tensor observe_meta(const at::Tensor& self, const at::Tensor&,
                        c10::string_view, c10::ScalarType, c10::string_view,
                        int64_t, int64_t, double, double, int64_t,
                        c10::string_view) {
  return self;
}

at::Tensor quantize_weight_op(const at::Tensor& weight,
                              c10::string_view observer, c10::ScalarType dtype,
                              c10::string_view qscheme, int64_t quant_min,
                              int64_t quant_max, double eps, int64_t ch_axis,
                              const c10::optional<at::Tensor>& state) {
  const ObserverSpec spec =
      spec_from_arguments(std::string(observer), dtype, std::string(qscheme),
                          quant_min, quant_max, eps, 0.01, ch_axis);
  TORCH_CHECK(weight.scalar_type() == at::kFloat,
              "fx_quant::quantize_weight: the weight must be float32, got ",
              weight.toString());
  if (state && state->defined()) {
    TORCH_CHECK(observed(spec, *state) &&
                    (!spec.per_channel() || state->size(1) == weight.size(ch_axis)),
                "fx_quant::quantize_weight: the observer state given is not "
                "one of ", spec.per_channel() ? "this weight's channels" : "a tensor",
                " (", state->sizes(), ")");
    return quantize(spec, weight, calculate_qparams(spec, *state));
  }
  at::Tensor own = make_observer_state(spec, weight.sizes());
  observe(spec, weight, own);
  return quantize(spec, weight, calculate_qparams(spec, own));
}

// Quantization-aware training's fake quantizer: torch.ao's
// FusedMovingAvgObsFakeQuantize, which is aten's fused operator on the
// state it keeps as buffers. Composite: autograd differentiates the aten
// operator (the straight-through estimator inside the clamping range).
at::Tensor fake_quantize_op(const at::Tensor& self,
                            const at::Tensor& observer_enabled,
                            const at::Tensor& fake_quant_enabled,
                            at::Tensor& min_val, at::Tensor& max_val,
                            at::Tensor& scale, at::Tensor& zero_point,
                            c10::ScalarType dtype, c10::string_view qscheme,
                            int64_t quant_min, int64_t quant_max,
                            double averaging_constant, int64_t ch_axis,
                            c10::string_view /*role*/) {
  const std::string scheme(qscheme);
  const ObserverSpec spec = spec_from_arguments(
      scheme.rfind("per_channel", 0) == 0 ? "moving_average_per_channel_min_max"
                                          : "moving_average_min_max",
      dtype, scheme, quant_min, quant_max, ObserverSpec().eps,
      averaging_constant, ch_axis);
  TORCH_CHECK(self.scalar_type() == at::kFloat,
              "fx_quant::fake_quantize: the value must be float32, got ",
              self.toString());
  TORCH_CHECK(min_val.scalar_type() == at::kFloat &&
                  max_val.scalar_type() == at::kFloat &&
                  scale.scalar_type() == at::kFloat &&
                  zero_point.scalar_type() == at::kInt,
              "fx_quant::fake_quantize: its state is float32 min_val, max_val "
              "and scale and an int32 zero_point, as prepare_qat_fx makes them");
  if (spec.per_channel()) {
    TORCH_CHECK(ch_axis >= 0 && ch_axis < self.dim() &&
                    min_val.dim() == 1 &&
                    min_val.size(0) == self.size(ch_axis),
                "fx_quant::fake_quantize: a per-channel state of ",
                min_val.numel(), " channels for a value of sizes ",
                self.sizes(), " on axis ", ch_axis);
  }
  if (spec.per_channel() && ch_axis != 0) {
    // aten's fused fake quantizer takes channels on axis 0 only: a linear
    // layer's transposed weight [in, out] is quantized per column.
    return at::fused_moving_avg_obs_fake_quant(
               self.transpose(0, ch_axis), observer_enabled, fake_quant_enabled,
               min_val, max_val, scale, zero_point, averaging_constant, quant_min,
               quant_max, 0, true, spec.symmetric())
        .transpose(0, ch_axis);
  }
  return at::fused_moving_avg_obs_fake_quant(
      self, observer_enabled, fake_quant_enabled, min_val, max_val, scale,
      zero_point, averaging_constant, quant_min, quant_max, ch_axis,
      spec.per_channel(), spec.symmetric());
}

// Sets the global quantized engine for one call.
class EngineGuard {
 public:
  explicit EngineGuard(const std::string& engine)
      : saved_(at::globalContext().qEngine()) {
    set_quantized_engine(engine);
  }
  ~EngineGuard() { at::globalContext().setQEngine(saved_); }
  EngineGuard(const EngineGuard&) = delete;
  EngineGuard& operator=(const EngineGuard&) = delete;

 private:
  at::QEngine saved_;
};

// fx_quant::<name>(..., str engine): quantized::<name>(...) under `engine`.
template <const char* kName>
void prepack_boxed(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  const std::string engine = stack->back().toStringRef();
  stack->pop_back();
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow(kName, "");
  EngineGuard guard(engine);
  op.callBoxed(stack);
}

constexpr char kConv1d[] = "quantized::conv1d_prepack";
constexpr char kConv2d[] = "quantized::conv2d_prepack";
constexpr char kConv3d[] = "quantized::conv3d_prepack";
constexpr char kLinear[] = "quantized::linear_prepack";

}  // namespace

TORCH_LIBRARY(fx_quant, m) {
  m.def(
      "observe(Tensor(a) self, Tensor(b!) state, str observer, "
      "ScalarType dtype, str qscheme, int quant_min, int quant_max, "
      "float eps, float averaging_constant=0.01, int ch_axis=0, "
      "str role=\"output\") -> Tensor(a)");
  m.def(
      "fake_quantize(Tensor self, Tensor observer_enabled, "
      "Tensor fake_quant_enabled, Tensor(a!) min_val, Tensor(b!) max_val, "
      "Tensor(c!) scale, Tensor(d!) zero_point, ScalarType dtype, "
      "str qscheme, int quant_min, int quant_max, "
      "float averaging_constant=0.01, int ch_axis=0, str role=\"output\") "
      "-> Tensor");
  m.def(
      "quantize_weight(Tensor weight, str observer, ScalarType dtype, "
      "str qscheme, int quant_min, int quant_max, float eps, int ch_axis=0, "
      "Tensor? state=None) -> Tensor");
  const std::string conv_args =
      "(Tensor weight, Tensor? bias, int[] stride, int[] padding, "
      "int[] dilation, int groups, str engine) -> "
      "__torch__.torch.classes.quantized.";
  m.def(("conv1d_prepack" + conv_args + "Conv2dPackedParamsBase").c_str(),
        torch::CppFunction::makeFromBoxedFunction<&prepack_boxed<kConv1d>>());
  m.def(("conv2d_prepack" + conv_args + "Conv2dPackedParamsBase").c_str(),
        torch::CppFunction::makeFromBoxedFunction<&prepack_boxed<kConv2d>>());
  m.def(("conv3d_prepack" + conv_args + "Conv3dPackedParamsBase").c_str(),
        torch::CppFunction::makeFromBoxedFunction<&prepack_boxed<kConv3d>>());
  m.def(
      "linear_prepack(Tensor weight, Tensor? bias, str engine) -> "
      "__torch__.torch.classes.quantized.LinearPackedParamsBase",
      torch::CppFunction::makeFromBoxedFunction<&prepack_boxed<kLinear>>());
}

TORCH_LIBRARY_IMPL(fx_quant, CPU, m) {
  m.impl("observe", &observe_op);
  m.impl("quantize_weight", &quantize_weight_op);
}

TORCH_LIBRARY_IMPL(fx_quant, Meta, m) { m.impl("observe", &observe_meta); }

TORCH_LIBRARY_IMPL(fx_quant, CompositeImplicitAutograd, m) {
  m.impl("fake_quantize", &fake_quantize_op);
}

// Calibration records values; no gradient flows through it.
TORCH_LIBRARY_IMPL(fx_quant, Autograd, m) {
  m.impl("observe", torch::CppFunction::makeFallthrough());
  m.impl("quantize_weight", torch::CppFunction::makeFallthrough());
}

}  // namespace fx
