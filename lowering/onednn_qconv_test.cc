// fx_onednn's int8 operators against LibTorch's quantized engine
// (quantized::conv2d.new, quantized::add_relu), called through the
// dispatcher as a lowered graph calls it.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "lowering/onednn_ops.h"
#include "testdata/test_helpers.h"
#include "third_party/catch.h"

namespace {

std::vector<c10::IValue> call_boxed(const char* name, const char* overload,
                                    std::vector<c10::IValue> args) {
  fx::onednn::register_operators();
  c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  const auto& params = op.schema().arguments();
  for (size_t i = args.size(); i < params.size(); ++i) {
    args.push_back(*params[i].default_value());
  }
  torch::jit::Stack stack(args.begin(), args.end());
  op.callBoxed(&stack);
  return stack;
}

at::Tensor call(const char* name, std::vector<c10::IValue> args,
                const char* overload = "") {
  return call_boxed(name, overload, std::move(args)).at(0).toTensor();
}

struct QConvCase {
  std::vector<int64_t> input, weight, stride, padding, dilation;
  int64_t groups;
  bool bias;
  int64_t input_zero_point, output_zero_point;
};

struct Made {
  c10::IValue packed;  // LibTorch's
  at::Tensor qx;
};

Made make(const QConvCase& c, bool per_channel) {
  const at::Tensor x = at::randn(c.input);
  const at::Tensor w = at::randn(c.weight) * 0.2;
  const int64_t channels = c.weight[0];
  at::Tensor qw;
  if (per_channel) {
    const at::Tensor scales =
        std::get<0>(w.abs().reshape({channels, -1}).max(1)).to(at::kDouble) /
        127.0;
    qw = at::quantize_per_channel(w, scales, at::zeros({channels}, at::kLong),
                                  0, at::kQInt8);
  } else {
    qw = at::quantize_per_tensor(w, w.abs().max().item<double>() / 127.0, 0,
                                 at::kQInt8);
  }
  c10::IValue bias;
  if (c.bias) bias = at::randn({channels});
  Made m;
  m.packed = call_boxed("quantized::conv2d_prepack", "",
                        {qw, bias, c.stride, c.padding, c.dilation, c.groups})
                 .at(0);
  m.qx = at::quantize_per_tensor(x, 4.0 / 255, c.input_zero_point,
                                 at::kQUInt8);
  return m;
}

at::Tensor reference(const Made& m, double scale, int64_t zero_point,
                     bool relu) {
  return call(relu ? "quantized::conv2d_relu" : "quantized::conv2d",
              {m.qx, m.packed, scale, zero_point}, "new");
}

at::Tensor lowered(const Made& m, double scale, int64_t zero_point,
                   const QConvCase& c, c10::IValue other = {},
                   const std::string& activation = "none") {
  const at::Tensor packed =
      call("fx_onednn::pack_qconv_weight",
           {m.packed, c.input, m.qx.q_zero_point()});
  return call("fx_onednn::qconv",
              {m.qx, packed, c10::IValue(), c.stride, c.padding, c.dilation,
               c.groups, scale, zero_point, std::move(other), activation});
}

// At most one step apart (a rounding of an int32 sum scaled in float).
void check_int8_close(const at::Tensor& got, const at::Tensor& want) {
  REQUIRE(got.is_quantized());
  REQUIRE(got.sizes() == want.sizes());
  CHECK(got.q_scale() == want.q_scale());
  CHECK(got.q_zero_point() == want.q_zero_point());
  if (want.numel() == 0) return;
  const at::Tensor diff = (got.int_repr().to(at::kInt) -
                           want.int_repr().to(at::kInt)).abs();
  CHECK(diff.max().item<int>() <= 1);
  // Nearly all equal.
  CHECK(diff.gt(0).sum().item<int64_t>() <= want.numel() / 50 + 1);
}

}  // namespace

TEST_CASE("qconv matches LibTorch's int8 convolution") {
  // Without VNNI (AVX2 alone) the pass leaves int8 graphs on LibTorch's
  // engine, and oneDNN has int8 kernels for some of these convolutions
  // only: the operator refuses the others by name rather than run oneDNN's
  // reference kernel, and computes the rest as with VNNI.
  const bool vnni = fx::onednn::int8_supported();
  int refused = 0;
  at::globalContext().setQEngine(at::QEngine::ONEDNN);
  at::manual_seed(0);
  const std::vector<QConvCase> cases = {
      {{1, 3, 17, 19}, {8, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true, 128, 0},
      {{2, 16, 14, 14}, {32, 16, 1, 1}, {2, 2}, {0, 0}, {1, 1}, 1, true, 0, 97},
      {{1, 32, 12, 12}, {32, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 32, true, 5, 0},
      {{1, 8, 10, 10}, {12, 2, 3, 3}, {1, 2}, {2, 1}, {2, 1}, 4, false, 0, 3},
      {{3, 64, 7, 7}, {64, 64, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true, 0, 0},
  };
  for (bool per_channel : {true, false}) {
    for (const QConvCase& c : cases) {
      CAPTURE(c.input, c.weight, c.groups, per_channel);
      const Made m = make(c, per_channel);
      const at::Tensor want = reference(m, 0.05, c.output_zero_point, false);
      if (!vnni) {
        try {
          lowered(m, 0.05, c.output_zero_point, c);
        } catch (const c10::Error& e) {
          CHECK_THAT(e.what(),
                     Catch::Contains("has only its reference kernel for this "
                                     "int8 convolution"));
          ++refused;
          continue;
        }
      }
      const at::Tensor got = lowered(m, 0.05, c.output_zero_point, c);
      CHECK(got.is_contiguous(at::MemoryFormat::ChannelsLast));
      check_int8_close(got, want);
      check_int8_close(lowered(m, 0.03, 0, c, {}, "relu"),
                       reference(m, 0.03, 0, true));
    }
  }
  if (vnni) {
    CHECK(refused == 0);
  } else {
    CHECK(refused < static_cast<int>(2 * cases.size()));  // some computed
  }
}

TEST_CASE("qconv adds a residual at its own scale before the relu") {
  at::globalContext().setQEngine(at::QEngine::ONEDNN);
  at::manual_seed(1);
  const QConvCase c{{2, 16, 9, 9}, {16, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1},
                    1, true, 0, 0};
  const Made m = make(c, true);
  for (int64_t residual_zero_point : {0, 77}) {
    CAPTURE(residual_zero_point);
    const at::Tensor residual = at::quantize_per_tensor(
        at::randn({2, 16, 9, 9}), 0.04, residual_zero_point, at::kQUInt8);
    // The float sum, quantized once, is what qconv computes; LibTorch's
    // conv then add_relu round twice.
    const at::Tensor conv = reference(m, 0.05, 120, false);
    const std::vector<c10::IValue> parts =
        call_boxed("quantized::conv2d_unpack", "", {m.packed});
    const at::Tensor conv_float = at::conv2d(
        m.qx.dequantize(), parts.at(0).toTensor().dequantize(),
        parts.at(1).toTensor(), c.stride, c.padding, c.dilation, c.groups);
    const at::Tensor want = at::quantize_per_tensor(
        at::relu(conv_float + residual.dequantize()), 0.06, 0, at::kQUInt8);
    const at::Tensor got =
        lowered(m, 0.06, 0, c, residual, "relu");
    check_int8_close(got, want);
    // Within a step of LibTorch's two roundings too, nearly everywhere.
    const at::Tensor twice = call("quantized::add_relu",
                                  {conv, residual, 0.06, int64_t{0}});
    CHECK((got.int_repr().to(at::kInt) - twice.int_repr().to(at::kInt))
              .abs()
              .max()
              .item<int>() <= 2);
  }
}

TEST_CASE("qconv refuses what it cannot compute, by name") {
  at::globalContext().setQEngine(at::QEngine::ONEDNN);
  const QConvCase c{{1, 4, 6, 6}, {4, 4, 3, 3}, {1, 1}, {1, 1}, {1, 1},
                    1, true, 0, 0};
  const Made m = make(c, true);
  const at::Tensor packed =
      call("fx_onednn::pack_qconv_weight", {m.packed, c.input, int64_t{0}});
  auto run = [&](c10::IValue input, double scale, int64_t zero_point,
                 c10::IValue other, std::string activation,
                 at::Tensor weight) {
    return call("fx_onednn::qconv",
                {std::move(input), std::move(weight), c10::IValue(), c.stride,
                 c.padding, c.dilation, c.groups, scale, zero_point,
                 std::move(other), std::move(activation)});
  };
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(run(at::randn({1, 4, 6, 6}), 0.1, 0, {}, "none", packed),
                    Contains("the input must be a quint8 CPU tensor"));
  CHECK_THROWS_WITH(run(m.qx, 0.0, 0, {}, "none", packed),
                    Contains("output_scale must be positive"));
  CHECK_THROWS_WITH(run(m.qx, 0.1, 256, {}, "none", packed),
                    Contains("output_zero_point must be within 0 to 255"));
  CHECK_THROWS_WITH(run(m.qx, 0.1, 0, {}, "clip", packed),
                    Contains("activation must be one of"));
  CHECK_THROWS_WITH(
      run(m.qx, 0.1, 0, {}, "none", at::randn({4, 4, 3, 3})),
      Contains("the weight is not one that fx_onednn::pack_qconv_weight"));
  const at::Tensor small = at::quantize_per_tensor(
      at::randn({1, 4, 5, 6}), 0.1, 0, at::kQUInt8);
  CHECK_THROWS_WITH(run(m.qx, 0.1, 0, small, "none", packed),
                    Contains("other (the residual) has sizes"));
  // Size 0 and 1.
  const at::Tensor empty =
      at::quantize_per_tensor(at::randn({0, 4, 6, 6}), 0.1, 0, at::kQUInt8);
  CHECK(run(empty, 0.1, 0, {}, "none", packed).sizes() ==
        at::IntArrayRef({0, 4, 6, 6}));
  const at::Tensor one =
      at::quantize_per_tensor(at::randn({1, 4, 1, 1}), 0.1, 0, at::kQUInt8);
  CHECK(run(one, 0.1, 0, {}, "none", packed).sizes() ==
        at::IntArrayRef({1, 4, 1, 1}));
}

TEST_CASE("unpack_qconv_weight and packed_qconv_bias give back what was packed") {
  at::globalContext().setQEngine(at::QEngine::ONEDNN);
  const QConvCase c{{1, 8, 6, 6}, {8, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1},
                    4, true, 0, 0};
  const Made m = make(c, true);
  const std::vector<c10::IValue> parts =
      call_boxed("quantized::conv2d_unpack", "", {m.packed});
  const at::Tensor w = parts.at(0).toTensor();
  const at::Tensor packed =
      call("fx_onednn::pack_qconv_weight", {m.packed, c.input, int64_t{0}});
  const at::Tensor back =
      call("fx_onednn::unpack_qconv_weight", {packed, int64_t{4}});
  CHECK(at::equal(back.int_repr(), w.int_repr()));
  CHECK(at::allclose(back.q_per_channel_scales(),
                     w.q_per_channel_scales().to(at::kDouble)));
  CHECK(at::allclose(call("fx_onednn::packed_qconv_bias", {packed}),
                     parts.at(1).toTensor()));
}

TEST_CASE("max_pool2d of a quint8 tensor is LibTorch's, to the element") {
  at::manual_seed(3);
  struct PoolCase {
    std::vector<int64_t> input, kernel, stride, padding;
    bool ceil_mode;
  };
  for (const PoolCase& c : std::vector<PoolCase>{
           {{1, 16, 14, 14}, {3, 3}, {2, 2}, {1, 1}, false},
           {{2, 8, 9, 9}, {3, 3}, {1, 1}, {1, 1}, true},
           {{1, 3, 7, 6}, {2, 2}, {2, 2}, {0, 0}, true},
           {{1, 4, 1, 1}, {1, 1}, {1, 1}, {0, 0}, false}}) {
    CAPTURE(c.input, c.kernel, c.ceil_mode);
    for (bool channels_last : {true, false}) {
      at::Tensor q = at::quantize_per_tensor(at::randn(c.input), 0.05, 60,
                                             at::kQUInt8);
      if (channels_last) q = q.contiguous(at::MemoryFormat::ChannelsLast);
      const at::Tensor want = at::max_pool2d(q, c.kernel, c.stride, c.padding,
                                             {1, 1}, c.ceil_mode);
      const at::Tensor got =
          call("fx_onednn::max_pool2d", {q, c.kernel, c.stride, c.padding,
                                         std::vector<int64_t>{1, 1},
                                         c.ceil_mode});
      REQUIRE(got.is_quantized());
      CHECK(got.q_scale() == q.q_scale());
      CHECK(got.q_zero_point() == q.q_zero_point());
      CHECK(got.is_contiguous(at::MemoryFormat::ChannelsLast));
      CHECK(at::equal(got.int_repr(), want.int_repr()));
    }
  }
  const at::Tensor q =
      at::quantize_per_tensor(at::randn({1, 4, 6, 6}), 0.05, 0, at::kQUInt8);
  CHECK_THROWS_WITH(
      call("fx_onednn::avg_pool2d", {q, std::vector<int64_t>{2, 2},
                                     std::vector<int64_t>{2, 2}}),
      Catch::Matchers::Contains("a quantized input must be quint8 per "
                                "tensor, and max pooled"));
}

TEST_CASE("qconv_add_ writes qconv's result over its residual") {
  at::globalContext().setQEngine(at::QEngine::ONEDNN);
  at::manual_seed(4);
  const QConvCase c{{2, 16, 9, 9}, {16, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1},
                    1, true, 0, 0};
  const Made m = make(c, true);
  const at::Tensor packed =
      call("fx_onednn::pack_qconv_weight", {m.packed, c.input, int64_t{0}});
  const at::Tensor residual =
      at::quantize_per_tensor(at::randn({2, 16, 9, 9}), 0.04, 77, at::kQUInt8)
          .contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor want = call(
      "fx_onednn::qconv",
      {m.qx, packed, c10::IValue(), c.stride, c.padding, c.dilation, c.groups,
       0.06, int64_t{3}, residual, std::string("relu")});
  at::Tensor self =
      residual.clone().contiguous(at::MemoryFormat::ChannelsLast);
  const void* data = self.data_ptr();
  const at::Tensor got = call(
      "fx_onednn::qconv_add_",
      {self, m.qx, packed, c10::IValue(), c.stride, c.padding, c.dilation,
       c.groups, 0.06, int64_t{3}, std::string("relu")});
  CHECK(got.data_ptr() == data);
  CHECK(self.q_scale() == 0.06);
  CHECK(self.q_zero_point() == 3);
  CHECK(at::equal(self.int_repr(), want.int_repr()));
  // A residual in another layout is refused, not read wrong.
  at::Tensor planar = residual.contiguous();
  CHECK_THROWS_WITH(
      call("fx_onednn::qconv_add_",
           {planar, m.qx, packed, c10::IValue(), c.stride, c.padding,
            c.dilation, c.groups, 0.06, int64_t{3}, std::string("relu")}),
      Catch::Matchers::Contains("self (the residual) must be channels-last"));
}

TEST_CASE("qconv from several threads at once computes what it does alone") {
  at::globalContext().setQEngine(at::QEngine::ONEDNN);
  at::manual_seed(5);
  const QConvCase c{{1, 32, 14, 14}, {64, 32, 3, 3}, {1, 1}, {1, 1}, {1, 1},
                    1, true, 0, 0};
  const Made m = make(c, true);
  const at::Tensor want = lowered(m, 0.05, 10, c);
  std::vector<at::Tensor> got(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        const at::Tensor y = lowered(m, 0.05, 10, c);
        if (i == 0 || !at::equal(y.int_repr(), want.int_repr())) got[t] = y;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const at::Tensor& y : got) {
    CHECK(at::equal(y.int_repr(), want.int_repr()));
  }
}

TEST_CASE("qconv fuses hardswish, hardsigmoid and sigmoid on the real values") {
  if (!fx::onednn::int8_supported()) return;  // qconv is not what runs
  at::globalContext().setQEngine(at::QEngine::ONEDNN);
  at::manual_seed(3);
  const QConvCase c{{1, 16, 9, 11}, {24, 16, 1, 1}, {1, 1}, {0, 0}, {1, 1},
                    1, true, 128, 64};
  const Made m = make(c, true);
  // The convolution in float32 (of the int8 input and weight), the
  // activation, quantized once: qconv's one rounding.
  const std::vector<c10::IValue> parts =
      call_boxed("quantized::conv2d_unpack", "", {m.packed});
  const at::Tensor real = at::conv2d(
      at::dequantize(m.qx), at::dequantize(parts.at(0).toTensor()),
      parts.at(1).toOptional<at::Tensor>(), c.stride, c.padding, c.dilation,
      c.groups);
  auto quantized = [](const at::Tensor& t, double scale, int64_t zero_point) {
    return at::quantize_per_tensor(t, scale, zero_point, at::kQUInt8);
  };
  check_int8_close(lowered(m, 0.015, 24, c, {}, "hardswish"),
                   quantized(at::hardswish(real), 0.015, 24));
  check_int8_close(lowered(m, 1.0 / 256, 0, c, {}, "hardsigmoid"),
                   quantized(at::hardsigmoid(real), 1.0 / 256, 0));
  check_int8_close(lowered(m, 1.0 / 256, 0, c, {}, "sigmoid"),
                   quantized(at::sigmoid(real), 1.0 / 256, 0));
  check_int8_close(lowered(m, 0.02, 20, c, {}, "silu"),
                   quantized(at::silu(real), 0.02, 20));
  CHECK_THROWS_WITH(lowered(m, 0.02, 0, c, {}, "clip"),
                    Catch::Contains("activation must be one of") &&
                        Catch::Contains("hardswish"));
}

TEST_CASE("qactivation is aten's dequantize, activation and quantize, bitwise") {
  at::manual_seed(4);
  for (const std::string& activation : fx::onednn::qconv_activations()) {
    // Lengths around the 64-byte vectors; channels-last and contiguous.
    for (const std::vector<int64_t>& sizes :
         std::vector<std::vector<int64_t>>{{0, 3, 2, 2}, {1, 1, 1, 1},
                                           {1, 63, 1, 1}, {2, 16, 2, 2},
                                           {1, 65, 3, 1}, {3, 24, 17, 19}}) {
      for (bool channels_last : {false, true}) {
        CAPTURE(activation, sizes, channels_last);
        at::Tensor x = at::randn(sizes) * 3;
        if (channels_last) x = x.contiguous(at::MemoryFormat::ChannelsLast);
        const at::Tensor q = at::quantize_per_tensor(x, 0.05, 120, at::kQUInt8);
        const at::Tensor got =
            call("fx_onednn::qactivation", {q, activation, 0.03, 17});
        at::Tensor real = at::dequantize(q);
        if (activation == "relu") real = at::relu(real);
        else if (activation == "hardswish") real = at::hardswish(real);
        else if (activation == "hardsigmoid") real = at::hardsigmoid(real);
        else if (activation == "silu") real = at::silu(real);
        else if (activation == "sigmoid") real = at::sigmoid(real);
        else if (activation == "tanh") real = at::tanh(real);
        else if (activation == "gelu") real = at::gelu(real);
        else if (activation == "gelu_tanh") real = at::gelu(real, "tanh");
        const at::Tensor want =
            at::quantize_per_tensor(real, 0.03, 17, at::kQUInt8);
        REQUIRE(got.sizes() == want.sizes());
        CHECK(got.q_scale() == 0.03);
        CHECK(got.q_zero_point() == 17);
        CHECK(got.strides() == q.strides());
        CHECK(at::equal(got.int_repr(), want.int_repr()));
      }
    }
  }
  const at::Tensor q =
      at::quantize_per_tensor(at::randn({1, 4, 2, 2}), 0.05, 120, at::kQUInt8);
  CHECK_THROWS_WITH(call("fx_onednn::qactivation", {q, "clip", 0.03, 17}),
                    Catch::Contains("fx_onednn::qactivation") &&
                        Catch::Contains("activation must be one of"));
  CHECK_THROWS_WITH(
      call("fx_onednn::qactivation", {at::randn({4}), "silu", 0.03, 17}),
      Catch::Contains("quint8"));
  CHECK_THROWS_WITH(call("fx_onednn::qactivation", {q, "silu", 0.0, 17}),
                    Catch::Contains("output_scale must be positive"));
  CHECK_THROWS_WITH(call("fx_onednn::qactivation", {q, "silu", 0.03, 256}),
                    Catch::Contains("output_zero_point must be within 0 to 255"));
}

TEST_CASE("qmul_channels is quantized::mul of an image by a per-channel gate") {
  at::globalContext().setQEngine(at::QEngine::ONEDNN);
  at::manual_seed(5);
  struct Case {
    std::vector<int64_t> input;
    int64_t gate_batch;
  };
  for (const Case& c : {Case{{1, 1, 1, 2}, 1}, Case{{1, 15, 3, 3}, 1},
                        Case{{2, 17, 5, 4}, 2}, Case{{3, 33, 2, 7}, 1},
                        Case{{2, 96, 28, 28}, 2}, Case{{0, 8, 2, 2}, 1}}) {
    CAPTURE(c.input, c.gate_batch);
    const at::Tensor x = at::quantize_per_tensor(
        at::randn(c.input).contiguous(at::MemoryFormat::ChannelsLast), 0.04,
        100, at::kQUInt8);
    const at::Tensor g = at::quantize_per_tensor(
        at::rand({c.gate_batch, c.input[1], 1, 1}), 1.0 / 256, 0, at::kQUInt8);
    const at::Tensor want = call("quantized::mul", {g, x, 0.02, 90});
    const at::Tensor got = call("fx_onednn::qmul_channels", {x, g, 0.02, 90});
    CHECK(got.is_contiguous(at::MemoryFormat::ChannelsLast));
    check_int8_close(got, want);
  }
  const at::Tensor x = at::quantize_per_tensor(at::randn({2, 8, 3, 3}), 0.04,
                                               100, at::kQUInt8);
  const at::Tensor wrong = at::quantize_per_tensor(at::rand({2, 4, 1, 1}),
                                                   1.0 / 256, 0, at::kQUInt8);
  CHECK_THROWS_WITH(call("fx_onednn::qmul_channels", {x, wrong, 0.02, 90}),
                    Catch::Contains("the gate must be [N or 1, C, 1, 1]"));
}

TEST_CASE("qmean_channels is global average pooling of a quint8 image") {
  at::manual_seed(6);
  for (const std::vector<int64_t>& sizes :
       std::vector<std::vector<int64_t>>{{1, 1, 1, 1}, {1, 17, 3, 5},
                                         {2, 40, 17, 19}, {1, 96, 112, 112},
                                         {0, 4, 2, 2}}) {
    CAPTURE(sizes);
    const at::Tensor x = at::quantize_per_tensor(
        at::randn(sizes).contiguous(at::MemoryFormat::ChannelsLast), 0.05, 70,
        at::kQUInt8);
    const at::Tensor want = at::quantize_per_tensor(
        at::adaptive_avg_pool2d(at::dequantize(x).to(at::kDouble), {1, 1})
            .to(at::kFloat),
        0.01, 60, at::kQUInt8);
    const at::Tensor got = call("fx_onednn::qmean_channels", {x, 0.01, 60});
    check_int8_close(got, want);
  }
  const at::Tensor empty = at::quantize_per_tensor(at::randn({1, 4, 0, 3}),
                                                   0.05, 70, at::kQUInt8);
  CHECK_THROWS_WITH(call("fx_onednn::qmean_channels", {empty, 0.01, 60}),
                    Catch::Contains("the mean of an empty image"));
}

namespace {

// quantized::linear_dynamic's packed weights of w (qint8, symmetric per
// output feature) and bias.
c10::IValue prepack_linear(const at::Tensor& w, const at::Tensor& bias) {
  const at::Tensor scales =
      std::get<0>(w.abs().max(1)).clamp_min(1e-3).to(at::kDouble) / 127.0;
  const at::Tensor qw = at::quantize_per_channel(
      w, scales, at::zeros({w.size(0)}, at::kLong), 0, at::kQInt8);
  return call_boxed("quantized::linear_prepack", "", {qw, bias}).at(0);
}

// What qlinear_dynamic computes, in double: the input quantized to u8 over
// its range (0 included), the products of the codes less the zero point
// with the int8 weight, scaled, plus the bias.
at::Tensor dynamic_reference(const at::Tensor& x, const c10::IValue& packed) {
  const std::vector<c10::IValue> parts =
      call_boxed("quantized::linear_unpack", "", {packed});
  const at::Tensor qw = parts.at(0).toTensor();
  const double low = std::min(x.min().item<double>(), 0.0);
  const double high = std::max(x.max().item<double>(), 0.0);
  double scale = (high - low) / 255;
  if (scale < 1.1920928955078125e-07) scale = 0.1;
  const double zero_point = std::clamp(std::nearbyint(-low / scale), 0.0, 255.0);
  const at::Tensor codes =
      (x.to(at::kFloat) * static_cast<float>(1.0 / scale)).round().add(zero_point).clamp(0, 255).to(at::kDouble);
  const at::Tensor w = qw.int_repr().to(at::kDouble) *
                       qw.q_per_channel_scales().to(at::kDouble).unsqueeze(1);
  return at::linear((codes - zero_point) * scale, w,
                    parts.at(1).toTensor().to(at::kDouble));
}

}  // namespace

TEST_CASE("qlinear_dynamic quantizes its input per call and fuses bias, "
          "residual and activation") {
  if (!fx::onednn::int8_supported()) return;  // the pass keeps LibTorch's
  at::globalContext().setQEngine(at::QEngine::ONEDNN);
  at::manual_seed(8);
  struct Case {
    std::vector<int64_t> input;
    int64_t out;
  };
  for (const Case& c : {Case{{1, 1}, 1}, Case{{3, 17}, 15}, Case{{64, 256}, 64},
                        Case{{2, 5, 33}, 40}, Case{{1, 7, 64}, 1}}) {
    const int64_t in = c.input.back();
    const at::Tensor w = at::randn({c.out, in}) * 0.1;
    const at::Tensor bias = at::randn({c.out});
    const c10::IValue packed_params = prepack_linear(w, bias);
    const at::Tensor packed =
        call("fx_onednn::pack_qlinear_weight", {packed_params, c.input});
    for (const std::string activation : {"none", "relu", "gelu"}) {
      CAPTURE(c.input, c.out, activation);
      const at::Tensor x = at::randn(c.input) * 2 + 0.5;
      const at::Tensor got = call("fx_onednn::qlinear_dynamic",
                                  {x, packed, c10::IValue(), activation});
      at::Tensor want = dynamic_reference(x, packed_params);
      if (activation == "relu") want = at::relu(want);
      if (activation == "gelu") want = at::gelu(want);
      REQUIRE(got.sizes() == want.sizes());
      CHECK((got.to(at::kDouble) - want).abs().max().item<double>() <=
            1e-4 * (1 + want.abs().max().item<double>()));
      // Close to LibTorch's own dynamic int8 linear layer.
      if (activation == "none") {
        const at::Tensor engine =
            call("quantized::linear_dynamic", {x, packed_params, false});
        CHECK(testdata::relative_error(got, engine) < 0.02);
      }
      // A residual of the output's sizes, added before the activation;
      // read through its strides.
      std::vector<int64_t> out_size = c.input;
      out_size.back() = c.out;
      const at::Tensor other = at::randn(out_size);
      const at::Tensor summed =
          call("fx_onednn::qlinear_dynamic",
               {x, packed, c10::IValue(), activation, other});
      at::Tensor want_summed = dynamic_reference(x, packed_params) + other;
      if (activation == "relu") want_summed = at::relu(want_summed);
      if (activation == "gelu") want_summed = at::gelu(want_summed);
      CHECK((summed.to(at::kDouble) - want_summed).abs().max().item<double>() <=
            1e-4 * (1 + want_summed.abs().max().item<double>()));
      if (activation == "none") {
        CHECK(at::equal(summed, got + other));
        const at::Tensor strided = at::randn(out_size).transpose(0, -1)
                                       .contiguous().transpose(0, -1);
        CHECK(at::equal(call("fx_onednn::qlinear_dynamic",
                             {x, packed, c10::IValue(), "none", strided}),
                        got + strided));
      }
    }
    // No rows: an empty result; all zeros: the bias.
    std::vector<int64_t> none = c.input;
    none.front() = 0;
    CHECK(call("fx_onednn::qlinear_dynamic",
               {at::zeros(none), packed, c10::IValue(), "none"})
              .numel() == 0);
    const at::Tensor zeros = call("fx_onednn::qlinear_dynamic",
                                  {at::zeros(c.input), packed, c10::IValue(), "none"});
    CHECK(at::allclose(zeros, bias.expand_as(zeros), 1e-5, 1e-6));
  }
  const at::Tensor w = at::randn({4, 8});
  const at::Tensor packed = call("fx_onednn::pack_qlinear_weight",
                                 {prepack_linear(w, at::zeros({4})),
                                  std::vector<int64_t>{2, 8}});
  at::Tensor x = at::randn({2, 8});
  x[1][3] = std::nanf("");
  CHECK_THROWS_WITH(
      call("fx_onednn::qlinear_dynamic", {x, packed, c10::IValue(), "none"}),
      Catch::Contains("a NaN or an infinity"));
  CHECK_THROWS_WITH(call("fx_onednn::qlinear_dynamic",
                         {at::randn({2, 7}), packed, c10::IValue(), "none"}),
                    Catch::Contains("the input's last size must be the "
                                    "weight's in_features (8)"));
  CHECK_THROWS_WITH(call("fx_onednn::qlinear_dynamic",
                         {at::randn({2, 8}), packed, at::zeros({4}), "none"}),
                    Catch::Contains("the bias is packed with the weight"));
  for (const at::Tensor& other : {at::randn({2, 1}), at::randn({4}),
                                  at::randn({2, 4}).to(at::kDouble)}) {
    CAPTURE(other.sizes(), other.scalar_type());
    CHECK_THROWS_WITH(call("fx_onednn::qlinear_dynamic",
                           {at::randn({2, 8}), packed, c10::IValue(), "none",
                            other}),
                      Catch::Contains("the residual `other` must be a float32 "
                                      "CPU tensor of the output's sizes [2, 4]"));
  }
  // A NaN seen by either thread's share of a larger input.
  const at::Tensor wide_w = at::randn({4, 4096});
  const at::Tensor wide = call("fx_onednn::pack_qlinear_weight",
                               {prepack_linear(wide_w, at::zeros({4})),
                                std::vector<int64_t>{4, 4096}});
  for (const int64_t at_index : {int64_t{0}, int64_t{8191}, int64_t{16383}}) {
    at::Tensor y = at::randn({4, 4096});
    y.view({-1})[at_index] = std::nanf("");
    CAPTURE(at_index);
    CHECK_THROWS_WITH(
        call("fx_onednn::qlinear_dynamic", {y, wide, c10::IValue(), "none"}),
        Catch::Contains("a NaN or an infinity"));
  }
  // The weight and bias come back for the ONNX export.
  const auto unpacked = call_boxed("fx_onednn::unpack_qlinear_weight", "", {packed});
  CHECK(unpacked.at(0).toTensor().int_repr().sizes() == w.sizes());
}

TEST_CASE("small 1x1 int8 convolutions run on oneDNN's VNNI kernels, not AMX") {
  if (!fx::onednn::int8_supported()) return;  // qconv is not what runs
  at::globalContext().setQEngine(at::QEngine::ONEDNN);
  at::manual_seed(10);
  // 14x14x48 -> 144: 4.6M multiply-accumulates, under the AMX threshold
  // (where oneDNN 2.6 would pick its AMX 1x1 kernel, 5.7x slower here).
  const QConvCase c{{1, 48, 14, 14}, {144, 48, 1, 1}, {1, 1}, {0, 0}, {1, 1},
                    1, true, 128, 0};
  const Made m = make(c, true);
  check_int8_close(lowered(m, 0.05, 0, c), reference(m, 0.05, 0, false));
  const std::string kernel = fx::onednn::last_kernel();
  INFO(kernel);
  REQUIRE(!kernel.empty());
  CHECK(kernel.find("amx") == std::string::npos);
  CHECK(kernel.rfind("ref", 0) != 0);
}
