#include "quantization/observer.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/torch.h>

#include <cmath>

#include "quantization/numeric_suite.h"
#include "quantization/ops.h"
#include "quantization/qconfig.h"
#include "third_party/catch.h"

namespace {

// Calls "namespace::name[.overload]" boxed.
c10::IValue call(const std::string& qualified, std::vector<c10::IValue> stack) {
  const size_t dot = qualified.find('.');
  const std::string name = qualified.substr(0, dot);
  const std::string overload =
      dot == std::string::npos ? "" : qualified.substr(dot + 1);
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(
      name.c_str(), overload.c_str());
  op.callBoxed(&stack);
  return stack.empty() ? c10::IValue() : stack[0];
}

}  // namespace

TEST_CASE("min/max qparams follow torch.ao's formulas") {
  fx::ObserverSpec spec = fx::min_max_observer();
  at::Tensor state = fx::make_observer_state(spec, {4});
  CHECK_FALSE(fx::observed(spec, state));
  fx::observe(spec, torch::tensor({-1.0f, 0.5f, 3.0f}), state);
  fx::observe(spec, torch::tensor({0.0f, 2.0f}), state);
  CHECK(fx::observed(spec, state));
  fx::QParams q = fx::calculate_qparams(spec, state);
  CHECK(q.scale_value() == Approx(4.0 / 255));
  CHECK(q.zero_point_value() == 64);  // 0 - round(-1 / (4 / 255))

  // Symmetric qint8 (the default weight observer): zero point 0,
  // scale max|x| / 127.5.
  fx::ObserverSpec w = fx::default_weight_observer();
  at::Tensor ws = fx::make_observer_state(w, {3});
  fx::observe(w, torch::tensor({-2.0f, 1.0f, 0.5f}), ws);
  q = fx::calculate_qparams(w, ws);
  CHECK(q.scale_value() == Approx(2.0 / 127.5));
  CHECK(q.zero_point_value() == 0);

  // Symmetric quint8 puts zero at 128.
  fx::ObserverSpec su = fx::min_max_observer();
  su.qscheme = fx::QScheme::kPerTensorSymmetric;
  at::Tensor ss = fx::make_observer_state(su, {3});
  fx::observe(su, torch::tensor({-1.0f, 1.0f}), ss);
  CHECK(fx::calculate_qparams(su, ss).zero_point_value() == 128);

  // reduce_range halves the range.
  fx::ObserverSpec r = fx::min_max_observer();
  r.reduce_range = true;
  CHECK(r.range() == std::make_pair<int64_t, int64_t>(0, 127));
}

TEST_CASE("per-channel observers keep one range per channel") {
  fx::ObserverSpec spec = fx::default_per_channel_weight_observer();
  at::Tensor w = torch::tensor({{1.0f, -3.0f}, {0.5f, 0.25f}, {-8.0f, 2.0f}});
  at::Tensor state = fx::make_observer_state(spec, w.sizes());
  fx::observe(spec, w, state);
  fx::QParams q = fx::calculate_qparams(spec, state);
  REQUIRE(q.per_channel());
  CHECK(q.scale[0].item<double>() == Approx(3.0 / 127.5));
  CHECK(q.scale[1].item<double>() == Approx(0.5 / 127.5));
  CHECK(q.scale[2].item<double>() == Approx(8.0 / 127.5));
  CHECK(q.zero_point.abs().sum().item<int64_t>() == 0);
  at::Tensor quantized = fx::quantize(spec, w, q);
  CHECK(quantized.qscheme() == at::kPerChannelAffine);
  CHECK((quantized.dequantize() - w).abs().max().item<double>() < 0.04);
  // A value with another number of channels is refused.
  CHECK_THROWS_WITH(fx::observe(spec, torch::zeros({4, 2}), state),
                    Catch::Contains("4 channels"));
}

TEST_CASE("the moving average follows later batches by its constant") {
  fx::ObserverSpec spec = fx::moving_average_min_max_observer();
  spec.averaging_constant = 0.5;
  at::Tensor state = fx::make_observer_state(spec, {2});
  fx::observe(spec, torch::tensor({0.0f, 2.0f}), state);
  fx::observe(spec, torch::tensor({-2.0f, 4.0f}), state);
  CHECK(state[0].item<float>() == Approx(-1.0));
  CHECK(state[1].item<float>() == Approx(3.0));
}

TEST_CASE("the histogram observer searches the range of least L2 error") {
  // torch.ao's search (HistogramObserver._non_linear_param_search) narrows
  // [min, max] from the side of fewer values while the L2 error falls: on
  // many normal values it trims the sparse tail and beats min/max.
  torch::manual_seed(0);
  at::Tensor x = torch::randn({200000});
  fx::ObserverSpec hist = fx::histogram_observer();
  at::Tensor hs = fx::make_observer_state(hist, x.sizes());
  // In two batches of different ranges, so that the histogram is re-binned.
  fx::observe(hist, x.slice(0, 100000), hs);
  fx::observe(hist, x.slice(0, 0, 100000), hs);
  CHECK(hs.slice(0, 2).sum().item<double>() == Approx(200000));
  CHECK(hs[0].item<float>() == x.min().item<float>());
  CHECK(hs[1].item<float>() == x.max().item<float>());
  fx::QParams qh = fx::calculate_qparams(hist, hs);

  fx::ObserverSpec mm = fx::min_max_observer();
  at::Tensor ms = fx::make_observer_state(mm, x.sizes());
  fx::observe(mm, x, ms);
  fx::QParams qm = fx::calculate_qparams(mm, ms);
  CHECK(qh.scale_value() < qm.scale_value() * 0.97);
  CHECK(fx::sqnr_db(x, fx::quantize(hist, x, qh)) > fx::sqnr_db(x, fx::quantize(mm, x, qm)));

  // One far outlier: cutting it would cost more (its squared error) than
  // the coarser steps do, so the range stays, as in torch.ao.
  at::Tensor y = torch::randn({20000});
  y[0] = 40.0;
  at::Tensor ys = fx::make_observer_state(hist, y.sizes());
  fx::observe(hist, y, ys);
  CHECK(fx::calculate_qparams(hist, ys).scale_value() ==
        Approx((40.0 - y.min().item<double>()) / 255).epsilon(0.01));
}

TEST_CASE("a constant value gives a usable scale") {
  fx::ObserverSpec hist = fx::histogram_observer();
  at::Tensor s = fx::make_observer_state(hist, {3});
  fx::observe(hist, torch::full({3}, 2.0f), s);
  fx::QParams q = fx::calculate_qparams(hist, s);
  CHECK(q.scale_value() > 0);
  CHECK(std::isfinite(q.scale_value()));
  // A later batch with a range re-bins the first.
  fx::observe(hist, torch::tensor({0.0f, 4.0f}), s);
  CHECK(s.slice(0, 2).sum().item<double>() == Approx(5));
  CHECK(s[0].item<float>() == 0.0f);
  CHECK(s[1].item<float>() == 4.0f);
}

TEST_CASE("the fx_quant operators run through the dispatcher") {
  fx::quantization::register_operators();
  fx::ObserverSpec spec = fx::histogram_observer();
  at::Tensor state = fx::make_observer_state(spec, {5});
  at::Tensor x = torch::randn({5});
  auto kwargs = fx::observer_kwargs(spec);
  c10::IValue out = call("fx_quant::observe",
                         {x, state, "histogram", c10::ScalarType::QUInt8,
                          "per_tensor_affine", int64_t{0}, int64_t{255},
                          spec.eps, 0.01, int64_t{0}, "output"});
  CHECK(out.toTensor().is_same(x));
  CHECK(state[0].item<float>() == x.min().item<float>());
  CHECK_THROWS_WITH(call("fx_quant::observe",
                         {x, state, "histogramm", c10::ScalarType::QUInt8,
                          "per_tensor_affine", int64_t{0}, int64_t{255},
                          spec.eps, 0.01, int64_t{0}, "output"}),
                    Catch::Contains("unknown observer 'histogramm'"));

  at::Tensor w = torch::randn({8, 4, 3, 3});
  at::Tensor wq =
      call("fx_quant::quantize_weight",
           {w, "per_channel_min_max", c10::ScalarType::QInt8,
            "per_channel_symmetric", int64_t{-128}, int64_t{127}, spec.eps,
            int64_t{0}, c10::IValue()})
          .toTensor();
  CHECK(wq.is_quantized());
  CHECK(wq.q_per_channel_scales().size(0) == 8);
  // Given a fixed_qparams observer's state, by that.
  const at::Tensor scales = torch::linspace(0.01, 0.08, 8);
  const at::Tensor fixed = fx::fixed_qparams_state(
      scales, torch::zeros({8}, torch::kInt), /*per_channel=*/true);
  at::Tensor wf =
      call("fx_quant::quantize_weight",
           {w, "fixed_qparams", c10::ScalarType::QInt8, "per_channel_symmetric",
            int64_t{-128}, int64_t{127}, spec.eps, int64_t{0}, fixed})
          .toTensor();
  CHECK(torch::allclose(wf.q_per_channel_scales().to(torch::kFloat), scales));

  for (const std::string& engine : fx::available_engines()) {
    CAPTURE(engine);
    c10::IValue packed =
        call("fx_quant::conv2d_prepack",
             {wq, torch::zeros({8}), std::vector<int64_t>{1, 1},
              std::vector<int64_t>{1, 1}, std::vector<int64_t>{1, 1},
              int64_t{1}, engine});
    CHECK(packed.isObject());
    fx::set_quantized_engine(engine);
    at::Tensor input = torch::rand({1, 4, 6, 6});
    // onednn without VNNI is exact for 7-bit activations only (its int8
    // kernels add pairs of products in 16 bits).
    const double levels =
        engine == "onednn" && !fx::cpu_has_vnni() ? 127 : 255;
    at::Tensor qx = at::quantize_per_tensor(input, 1.0 / levels, 0, at::kQUInt8);
    at::Tensor want = at::conv2d(qx.dequantize(), wq.dequantize(), {}, 1, 1);
    const double lo = std::min(want.min().item<double>(), 0.0);
    const double hi = std::max(want.max().item<double>(), 0.0);
    const double scale = (hi - lo) / 255;
    const int64_t zero_point = static_cast<int64_t>(std::round(-lo / scale));
    at::Tensor y = call("quantized::conv2d.new", {qx, packed, scale, zero_point})
                       .toTensor();
    CHECK((y.dequantize() - want).abs().max().item<double>() < scale);
  }
  fx::set_quantized_engine("onednn");
}

TEST_CASE("bad engines and specs name what is wrong") {
  CHECK_THROWS_WITH(fx::set_quantized_engine("fbgemm"),
                    Catch::Contains("unknown quantization engine 'fbgemm'") &&
                        Catch::Contains("onednn"));
  CHECK_THROWS_WITH(fx::get_default_qconfig_mapping("x86"),
                    Catch::Contains("'x86'"));
  CHECK_THROWS_WITH(
      fx::spec_from_arguments("min_max", c10::ScalarType::QInt8,
                              "per_channel_symmetric", -128, 127, 1e-7, 0.01, 0),
      Catch::Contains("per_channel_min_max"));
  CHECK_THROWS_WITH(
      fx::spec_from_arguments("min_max", c10::ScalarType::Float,
                              "per_tensor_affine", 0, 255, 1e-7, 0.01, 0),
      Catch::Contains("torch.quint8 or torch.qint8"));
}
