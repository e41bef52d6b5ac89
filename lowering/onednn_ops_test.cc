// The fx_onednn operators against aten's own, called through the
// dispatcher as a lowered graph calls them.
#include "lowering/onednn_ops.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <string>
#include <vector>

#include "third_party/catch.h"

namespace {

c10::OperatorHandle handle(const char* name) {
  fx::onednn::register_operators();
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}

at::Tensor call(const char* name, std::vector<c10::IValue> args) {
  c10::OperatorHandle op = handle(name);
  const auto& params = op.schema().arguments();
  for (size_t i = args.size(); i < params.size(); ++i) {
    args.push_back(*params[i].default_value());
  }
  torch::jit::Stack stack(args.begin(), args.end());
  op.callBoxed(&stack);
  return stack.at(0).toTensor();
}

at::Tensor pack_conv(const at::Tensor& w, at::IntArrayRef input,
                     std::vector<int64_t> stride, std::vector<int64_t> padding,
                     std::vector<int64_t> dilation, int64_t groups) {
  return call("fx_onednn::pack_conv_weight",
              {w, input.vec(), stride, padding, dilation, groups});
}

void check_close(const at::Tensor& got, const at::Tensor& want) {
  REQUIRE(got.sizes() == want.sizes());
  const double scale = std::max(want.abs().max().item<double>(), 1.0);
  CHECK((got - want).abs().max().item<double>() <= 1e-5 * scale);
}

struct ConvCase {
  std::vector<int64_t> input, weight, stride, padding, dilation;
  int64_t groups;
};

}  // namespace

TEST_CASE("conv matches aten's convolution in 1, 2 and 3 spatial dimensions") {
  at::manual_seed(0);
  const std::vector<ConvCase> cases = {
      {{1, 3, 17, 19}, {8, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
      {{2, 16, 14, 14}, {32, 16, 1, 1}, {2, 2}, {0, 0}, {1, 1}, 1},
      {{1, 32, 12, 12}, {32, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 32},  // depthwise
      {{1, 8, 10, 10}, {12, 2, 3, 3}, {1, 2}, {2, 1}, {2, 1}, 4},    // grouped
      {{2, 4, 20}, {6, 4, 5}, {2}, {2}, {1}, 1},                      // 1-d
      {{1, 4, 6, 7, 8}, {5, 4, 3, 3, 3}, {1, 1, 2}, {1, 0, 1}, {1, 1, 1}, 1},
  };
  for (const ConvCase& c : cases) {
    CAPTURE(c.input, c.weight, c.groups);
    at::Tensor x = at::randn(c.input);
    at::Tensor w = at::randn(c.weight);
    at::Tensor b = at::randn({c.weight[0]});
    at::Tensor want = at::convolution(x, w, b, c.stride, c.padding, c.dilation,
                                      false, std::vector<int64_t>(c.stride.size(), 0),
                                      c.groups);
    at::Tensor packed = pack_conv(w, x.sizes(), c.stride, c.padding,
                                  c.dilation, c.groups);
    CHECK(packed.sizes() == w.sizes());
    at::Tensor got = call("fx_onednn::conv", {x, packed, b, c.stride, c.padding,
                                              c.dilation, c.groups});
    check_close(got, want);
    // Without a bias, and on an input of another batch size than packed for.
    at::Tensor x3 = at::randn([&] {
      auto s = c.input;
      s[0] = 3;
      return s;
    }());
    check_close(call("fx_onednn::conv", {x3, packed, c10::IValue(), c.stride,
                                         c.padding, c.dilation, c.groups}),
                at::convolution(x3, w, {}, c.stride, c.padding, c.dilation,
                                false, std::vector<int64_t>(c.stride.size(), 0),
                                c.groups));
  }
}

namespace {

// oneDNN 2.6's AVX-512 (avx512_core) kernels run here: brgemm
// convolutions, Winograd, bfloat16. An AVX2 machine runs jit:avx2 kernels.
bool avx512_core() { return fx::onednn::bf16_supported(); }

}  // namespace

TEST_CASE("a 16-channel first convolution reads a planar image as it is") {
  // An NCHW image of fewer than 16 channels into 16: oneDNN's first-layer
  // kernel reads the planes and writes nChw16c, the channels-last layout
  // for 16 channels; no copy of the image into channels-last first.
  at::manual_seed(12);
  const std::vector<int64_t> one = {1, 1}, two = {2, 2};
  for (int64_t channels : {3, 4}) {
    for (int64_t batch : {1, 3}) {
      for (const std::vector<int64_t>& stride : {two, one}) {
        CAPTURE(channels, batch, stride);
        const at::Tensor x = at::randn({batch, channels, 23, 30});
        const at::Tensor w = at::randn({16, channels, 3, 3}) * 0.3;
        const at::Tensor b = at::randn({16});
        const at::Tensor packed = pack_conv(w, x.sizes(), stride, one, one, 1);
        const at::Tensor plain = at::conv2d(x, w, b, stride, 1);
        const at::Tensor got = call(
            "fx_onednn::conv", {x, packed, b, stride, one, one, int64_t{1},
                                c10::IValue(), "hardswish"});
        check_close(got, at::hardswish(plain));
        CHECK(got.is_contiguous(at::MemoryFormat::ChannelsLast));
        INFO("kernel " << fx::onednn::last_kernel());
        CHECK(fx::onednn::last_kernel().rfind("jit:", 0) == 0);
        // The residual, no bias, SiLU as a pass.
        const at::Tensor other = at::randn(plain.sizes());
        check_close(call("fx_onednn::conv",
                         {x, packed, c10::IValue(), stride, one, one,
                          int64_t{1}, other, "relu"}),
                    at::relu(at::conv2d(x, w, {}, stride, 1) + other));
        check_close(call("fx_onednn::conv", {x, packed, b, stride, one, one,
                                             int64_t{1}, c10::IValue(), "silu"}),
                    at::silu(plain));
        // The same image channels-last: the channels-last kernel, the same
        // values.
        const at::Tensor nhwc = x.contiguous(at::MemoryFormat::ChannelsLast);
        check_close(call("fx_onednn::conv", {nhwc, packed, b, stride, one, one,
                                             int64_t{1}, c10::IValue(),
                                             "hardswish"}),
                    got);
        CHECK(fx::onednn::last_kernel().rfind(avx512_core() ? "brg" : "jit:", 0) == 0);
      }
    }
  }
  // 32 channels: the image copied into channels-last, as before.
  const at::Tensor x = at::randn({2, 3, 20, 20});
  const at::Tensor w = at::randn({32, 3, 3, 3});
  const at::Tensor packed = pack_conv(w, x.sizes(), two, one, one, 1);
  check_close(call("fx_onednn::conv", {x, packed, c10::IValue(), two, one, one,
                                       int64_t{1}}),
              at::conv2d(x, w, {}, two, 1));
  CHECK(fx::onednn::last_kernel().rfind(avx512_core() ? "brg" : "jit:", 0) == 0);
}

TEST_CASE("conv fuses the residual sum and each activation") {
  at::manual_seed(1);
  at::Tensor x = at::randn({2, 8, 9, 9});
  at::Tensor w = at::randn({8, 8, 3, 3}) * 0.2;
  at::Tensor b = at::randn({8});
  at::Tensor other = at::randn({2, 8, 9, 9});
  at::Tensor packed = pack_conv(w, x.sizes(), {1, 1}, {1, 1}, {1, 1}, 1);
  at::Tensor plain = at::conv2d(x, w, b, {1, 1}, {1, 1});
  struct Act {
    std::string name;
    double alpha, beta;
    at::Tensor want;
  };
  const at::Tensor summed = plain + other;
  const std::vector<Act> acts = {
      {"none", 0, 0, summed},
      {"relu", 0, 0, at::relu(summed)},
      {"relu", 0.1, 0, at::leaky_relu(summed, 0.1)},
      {"clip", 0, 6, at::hardtanh(summed, 0, 6)},
      {"hardswish", 0, 0, at::hardswish(summed)},
      {"hardsigmoid", 0, 0, at::hardsigmoid(summed)},
      {"silu", 0, 0, at::silu(summed)},
      {"sigmoid", 0, 0, at::sigmoid(summed)},
      {"tanh", 0, 0, at::tanh(summed)},
      {"gelu", 0, 0, at::gelu(summed)},
      {"gelu_tanh", 0, 0, at::gelu(summed, "tanh")},
  };
  for (const Act& a : acts) {
    CAPTURE(a.name, a.alpha);
    at::Tensor got = call("fx_onednn::conv",
                          {x, packed, b, std::vector<int64_t>{1, 1},
                           std::vector<int64_t>{1, 1}, std::vector<int64_t>{1, 1},
                           int64_t{1}, other, a.name, a.alpha, a.beta});
    check_close(got, a.want);
  }
  // The output is channels-last; other inputs are read, not written.
  at::Tensor got = call("fx_onednn::conv",
                        {x, packed, b, std::vector<int64_t>{1, 1},
                         std::vector<int64_t>{1, 1}, std::vector<int64_t>{1, 1},
                         int64_t{1}, other});
  CHECK(got.is_contiguous(at::MemoryFormat::ChannelsLast));
  CHECK(at::equal(other, summed - plain) == false);  // other is not the sum
  check_close(other + plain, got);
}

TEST_CASE("3x3 convolutions of 14x14 and more run on Winograd kernels") {
  // Stride 1, no activation or relu (with or without the residual sum),
  // an output of 14x14 or more: oneDNN's Winograd kernels, their weights
  // made from the packed ones and kept while those live. Others, and all
  // with Winograd off, run direct.
  at::manual_seed(7);
  const std::vector<int64_t> one = {1, 1};
  auto conv = [&](const at::Tensor& x, const at::Tensor& packed,
                  const at::Tensor& b, const c10::IValue& other,
                  const std::string& activation, std::vector<int64_t> stride) {
    return call("fx_onednn::conv", {x, packed, b, stride, one, one, int64_t{1},
                                    other, activation});
  };
  // oneDNN 2.6 has Winograd kernels for AVX-512 only: on AVX2 they run
  // direct, the same values.
  auto winograd_ran = [] {
    return fx::onednn::last_kernel().find("wino") != std::string::npos;
  };
  const bool winograd = avx512_core();
  REQUIRE(fx::onednn::winograd_convolutions());
  at::Tensor w = at::randn({48, 32, 3, 3}) * 0.1;
  const at::Tensor b = at::randn({48});
  for (int64_t batch : {1, 3}) {
    CAPTURE(batch);
    const at::Tensor x = at::randn({batch, 32, 16, 16});
    const at::Tensor other = at::randn({batch, 48, 16, 16});
    const at::Tensor plain = at::conv2d(x, w, b, 1, 1);
    const at::Tensor packed = pack_conv(w, x.sizes(), one, one, one, 1);
    check_close(conv(x, packed, b, c10::IValue(), "relu", one), at::relu(plain));
    CHECK(winograd_ran() == winograd);
    check_close(conv(x, packed, b, other, "relu", one), at::relu(plain + other));
    CHECK(winograd_ran() == winograd);
    check_close(conv(x, packed, at::Tensor(), c10::IValue(), "none", one),
                at::conv2d(x, w, {}, 1, 1));
    CHECK(winograd_ran() == winograd);
    // conv_add_: the residual's own memory.
    at::Tensor residual = other.contiguous(at::MemoryFormat::ChannelsLast);
    call("fx_onednn::conv_add_", {residual, x, packed, b, one, one, one,
                                  int64_t{1}, "relu"});
    check_close(residual, at::relu(plain + other));
    CHECK(winograd_ran() == winograd);
    // Another activation, a smaller output, a stride: direct.
    check_close(conv(x, packed, b, c10::IValue(), "silu", one), at::silu(plain));
    CHECK_FALSE(winograd_ran());
    const at::Tensor small = at::randn({batch, 32, 8, 8});
    check_close(conv(small, packed, b, c10::IValue(), "relu", one),
                at::relu(at::conv2d(small, w, b, 1, 1)));
    CHECK_FALSE(winograd_ran());
    const at::Tensor strided =
        pack_conv(w, x.sizes(), {2, 2}, one, one, 1);
    check_close(conv(x, strided, b, c10::IValue(), "relu", {2, 2}),
                at::relu(at::conv2d(x, w, b, 2, 1)));
    CHECK_FALSE(winograd_ran());
    // Off: direct, and the same result within float32's rounding.
    fx::onednn::set_winograd_convolutions(false);
    fx::onednn::release_reordered_weights();
    check_close(conv(x, packed, b, c10::IValue(), "relu", one), at::relu(plain));
    CHECK_FALSE(winograd_ran());
    fx::onednn::set_winograd_convolutions(true);
    // On again: its weights made again.
    check_close(conv(x, packed, b, c10::IValue(), "relu", one), at::relu(plain));
    CHECK(winograd_ran() == winograd);
  }
  // New weights packed (perhaps at a freed one's address): their own
  // Winograd weights, not the kept ones.
  const at::Tensor x = at::randn({1, 32, 14, 14});
  for (int i = 0; i < 3; ++i) {
    w = at::randn({48, 32, 3, 3}) * 0.1;
    const at::Tensor packed = pack_conv(w, x.sizes(), one, one, one, 1);
    check_close(conv(x, packed, b, c10::IValue(), "relu", one),
                at::relu(at::conv2d(x, w, b, 1, 1)));
    CHECK(winograd_ran() == winograd);
  }
}

TEST_CASE("batch_norm matches aten's in eval mode, relu fused") {
  // One pass over a channels-last tensor; channel counts that are not a
  // multiple of 16 (the vector width) included.
  at::manual_seed(8);
  const int before = at::get_num_threads();
  for (int threads : {1, 2, 3}) {
    at::set_num_threads(threads);
    for (const std::vector<int64_t>& sizes :
         {std::vector<int64_t>{2, 37, 5, 7}, {1, 64, 8, 8}, {3, 16, 40, 40}}) {
      const int64_t c = sizes[1];
      const at::Tensor w = at::randn({c}), b = at::randn({c});
      const at::Tensor mean = at::randn({c}), var = at::rand({c}) + 0.5;
      for (bool channels_last : {true, false}) {
        CAPTURE(threads, sizes, channels_last);
        at::Tensor x = at::randn(sizes);
        if (channels_last) x = x.contiguous(at::MemoryFormat::ChannelsLast);
        x.index_put_({0, 1, 2, 3}, NAN);
        const at::Tensor plain =
            at::batch_norm(x, w, b, mean, var, false, 0.1, 1e-3, false);
        const at::Tensor got =
            call("fx_onednn::batch_norm", {x, w, b, mean, var, 1e-3, "relu"});
        CHECK(got.is_contiguous(at::MemoryFormat::ChannelsLast));
        // NaN stays NaN through the relu, as in aten's.
        CHECK(at::equal(got.isnan(), at::relu(plain).isnan()));
        check_close(got.nan_to_num(0), at::relu(plain).nan_to_num(0));
        check_close(call("fx_onednn::batch_norm",
                         {x, c10::IValue(), c10::IValue(), mean, var, 1e-5})
                        .nan_to_num(0),
                    at::batch_norm(x, {}, {}, mean, var, false, 0.1, 1e-5,
                                   false)
                        .nan_to_num(0));
      }
    }
  }
  at::set_num_threads(before);
  const at::Tensor x = at::randn({1, 4, 3, 3}), v = at::ones({4});
  CHECK_THROWS_WITH(call("fx_onednn::batch_norm", {x, v, v, v, v, 1e-5, "silu"}),
                    Catch::Contains("the activation must be none or relu"));
  CHECK_THROWS_WITH(
      call("fx_onednn::batch_norm", {x, v, v, at::ones({3}), v, 1e-5}),
      Catch::Contains("running_mean must be a float32 CPU tensor of 4 values"));
  CHECK_THROWS_WITH(
      call("fx_onednn::batch_norm", {x.view({4, 9}), v, v, v, v, 1e-5}),
      Catch::Contains("the input must be a 4-d float32 CPU tensor"));
  CHECK_THROWS_WITH(
      call("fx_onednn::batch_norm", {x.to(at::kDouble), v, v, v, v, 1e-5}),
      Catch::Contains("the input must be a 4-d float32 CPU tensor"));
}

TEST_CASE("silu after conv and linear matches aten's on every thread's range") {
  // Outputs of 16k values and more run the SiLU pass on the intra-op
  // threads, each a range: sizes that split unevenly, tails that are not a
  // multiple of 16, NaN kept.
  at::manual_seed(11);
  const int before = at::get_num_threads();
  const at::Tensor w = at::randn({24, 5, 3, 3}) * 0.3, b = at::randn({24});
  const at::Tensor lw = at::randn({301, 40}) * 0.3, lb = at::randn({301});
  const at::Tensor packed_linear =
      call("fx_onednn::pack_linear_weight", {lw, std::vector<int64_t>{65, 40}});
  for (int threads : {1, 2, 3}) {
    at::set_num_threads(threads);
    CAPTURE(threads);
    at::Tensor x = at::randn({1, 5, 37, 37}) * 3;
    x.index_put_({0, 2, 10, 11}, NAN);
    const at::Tensor packed =
        pack_conv(w, x.sizes(), {1, 1}, {1, 1}, {1, 1}, 1);
    const at::Tensor want = at::silu(at::conv2d(x, w, b, {1, 1}, {1, 1}));
    const at::Tensor got =
        call("fx_onednn::conv",
             {x, packed, b, std::vector<int64_t>{1, 1},
              std::vector<int64_t>{1, 1}, std::vector<int64_t>{1, 1},
              int64_t{1}, c10::IValue(), "silu"});
    CHECK(at::equal(got.isnan(), want.isnan()));
    CHECK(got.isnan().sum().item<int64_t>() > 0);
    check_close(got.nan_to_num(0), want.nan_to_num(0));
    const at::Tensor rows = at::randn({65, 40}) * 3;
    check_close(
        call("fx_onednn::linear", {rows, packed_linear, lb, "silu"}),
        at::silu(at::linear(rows, lw, lb)));
  }
  at::set_num_threads(before);
}

TEST_CASE("concat_buffer and concat_write_ build a concatenation piece by piece") {
  // Each piece written once; a view of the first channels is the
  // concatenation so far, and later writes leave it as it was. Channel
  // counts that are not a multiple of 16, pieces in either layout, copies
  // large enough for every thread.
  at::manual_seed(13);
  const int before = at::get_num_threads();
  for (int threads : {1, 2, 3}) {
    at::set_num_threads(threads);
    CAPTURE(threads);
    const at::Tensor a = at::randn({2, 24, 30, 31})
                             .contiguous(at::MemoryFormat::ChannelsLast);
    const at::Tensor b = at::randn({2, 5, 30, 31});  // NCHW
    const at::Tensor c = at::randn({2, 16, 30, 31})
                             .contiguous(at::MemoryFormat::ChannelsLast);
    at::Tensor buffer = call("fx_onednn::concat_buffer",
                             {std::vector<at::Tensor>{a}, int64_t{45}});
    CHECK(buffer.sizes() == at::IntArrayRef({2, 45, 30, 31}));
    CHECK(buffer.is_contiguous(at::MemoryFormat::ChannelsLast));
    const at::Tensor first = buffer.slice(1, 0, 24);
    CHECK(at::equal(first, a));
    at::Tensor written = call("fx_onednn::concat_write_",
                              {buffer, std::vector<at::Tensor>{b, c}, int64_t{24}});
    CHECK(written.data_ptr() == buffer.data_ptr());
    CHECK(at::equal(written, at::cat({a, b, c}, 1)));
    CHECK(at::equal(first, a));
    // A batch norm reads a view of the first channels where it is.
    const at::Tensor mean = at::randn({29}), var = at::rand({29}) + 0.5;
    const at::Tensor view = written.slice(1, 0, 29);
    CHECK(at::allclose(
        call("fx_onednn::batch_norm",
             {view, c10::IValue(), c10::IValue(), mean, var, 1e-5, "relu"}),
        at::relu(at::batch_norm(at::cat({a, b}, 1), {}, {}, mean, var, false,
                                0.1, 1e-5, false)),
        1e-5, 1e-5));
  }
  at::set_num_threads(before);
  const at::Tensor a = at::randn({1, 4, 3, 3});
  at::Tensor buffer = call("fx_onednn::concat_buffer",
                           {std::vector<at::Tensor>{a}, int64_t{6}});
  CHECK_THROWS_WITH(
      call("fx_onednn::concat_write_",
           {buffer, std::vector<at::Tensor>{a}, int64_t{4}}),
      Catch::Contains("channels 4 to 8 do not fit in a buffer of 6 channels"));
  CHECK_THROWS_WITH(
      call("fx_onednn::concat_write_",
           {buffer, std::vector<at::Tensor>{at::randn({1, 2, 3, 4})}, int64_t{4}}),
      Catch::Contains("every tensor must be a 4-d float32 CPU tensor of 1 x C x 3 x 3"));
  CHECK_THROWS_WITH(
      call("fx_onednn::concat_write_",
           {at::randn({1, 6, 3, 3}), std::vector<at::Tensor>{a}, int64_t{0}}),
      Catch::Contains("self must be a 4-d float32 channels-last CPU tensor"));
  CHECK_THROWS_WITH(
      call("fx_onednn::concat_buffer", {std::vector<at::Tensor>{a}, int64_t{3}}),
      Catch::Contains("channels 0 to 4 do not fit in a buffer of 3 channels"));
}

TEST_CASE("squeeze_excite matches the block it replaces") {
  // x * gate(conv(act(conv(mean_hw(x), w1, b1)), w2, b2)): batches whose
  // samples the threads split between them, channel counts that are not a
  // multiple of 16, tensors small enough for one thread.
  at::manual_seed(12);
  const int before = at::get_num_threads();
  struct Case {
    std::vector<int64_t> sizes;
    int64_t squeezed;
  };
  const std::vector<Case> cases = {
      {{1, 64, 20, 20}, 16}, {{3, 37, 15, 15}, 9}, {{2, 96, 7, 7}, 24},
      {{1, 8, 3, 3}, 2}};
  for (int threads : {1, 2, 3}) {
    at::set_num_threads(threads);
    for (const Case& c : cases) {
      const int64_t channels = c.sizes[1];
      const at::Tensor w1 = at::randn({c.squeezed, channels, 1, 1}) * 0.3;
      const at::Tensor b1 = at::randn({c.squeezed});
      const at::Tensor w2 = at::randn({channels, c.squeezed, 1, 1}) * 0.3;
      const at::Tensor b2 = at::randn({channels});
      for (bool channels_last : {true, false}) {
        at::Tensor x = at::randn(c.sizes) + 0.5;
        if (channels_last) x = x.contiguous(at::MemoryFormat::ChannelsLast);
        const at::Tensor pooled = x.mean({2, 3}, true);
        for (const char* act : {"none", "relu", "silu"}) {
          for (const char* gate : {"sigmoid", "hardsigmoid"}) {
            CAPTURE(threads, c.sizes, channels_last, act, gate);
            at::Tensor s = at::conv2d(pooled, w1, b1);
            if (std::string(act) == "relu") s = at::relu(s);
            if (std::string(act) == "silu") s = at::silu(s);
            at::Tensor e = at::conv2d(s, w2, b2);
            e = std::string(gate) == "sigmoid" ? at::sigmoid(e)
                                               : at::hardsigmoid(e);
            const at::Tensor got = call("fx_onednn::squeeze_excite",
                                        {x, w1, b1, w2, b2, act, gate});
            CHECK(got.is_contiguous(at::MemoryFormat::ChannelsLast));
            check_close(got, x * e);
          }
        }
        // No biases.
        check_close(
            call("fx_onednn::squeeze_excite",
                 {x, w1, c10::IValue(), w2, c10::IValue(), "relu"}),
            x * at::sigmoid(at::conv2d(at::relu(at::conv2d(pooled, w1)), w2)));
      }
    }
  }
  at::set_num_threads(before);
  // NaN in one sample's pixel makes that sample's gates (so its outputs)
  // NaN, and leaves the other sample alone.
  at::Tensor x = at::randn({2, 32, 9, 9});
  x.index_put_({1, 3, 4, 4}, NAN);
  const at::Tensor w1 = at::randn({8, 32, 1, 1}), w2 = at::randn({32, 8, 1, 1});
  const at::Tensor got = call("fx_onednn::squeeze_excite",
                              {x, w1, c10::IValue(), w2, c10::IValue()});
  CHECK(got[1].isnan().all().item<bool>());
  CHECK_FALSE(got[0].isnan().any().item<bool>());
  // A weight written in place is read afresh (W2 is kept transposed).
  const at::Tensor before_write =
      call("fx_onednn::squeeze_excite", {x[0].unsqueeze(0), w1, c10::IValue(),
                                         w2, c10::IValue()});
  w2.mul_(-1);
  const at::Tensor after_write =
      call("fx_onednn::squeeze_excite", {x[0].unsqueeze(0), w1, c10::IValue(),
                                         w2, c10::IValue()});
  check_close(after_write,
              x[0].unsqueeze(0) *
                  at::sigmoid(at::conv2d(
                      at::relu(at::conv2d(x[0].unsqueeze(0).mean({2, 3}, true),
                                          w1)),
                      w2)));
  CHECK_FALSE(at::allclose(before_write, after_write));
  // Errors name what is wrong.
  const at::Tensor y = at::randn({1, 32, 4, 4});
  CHECK_THROWS_WITH(
      call("fx_onednn::squeeze_excite", {y, w1, c10::IValue(), w2,
                                         c10::IValue(), "tanh"}),
      Catch::Contains("the activation must be none, relu or silu"));
  CHECK_THROWS_WITH(
      call("fx_onednn::squeeze_excite", {y, w1, c10::IValue(), w2,
                                         c10::IValue(), "relu", "relu"}),
      Catch::Contains("the gate must be sigmoid or hardsigmoid"));
  CHECK_THROWS_WITH(
      call("fx_onednn::squeeze_excite",
           {y, at::randn({8, 31, 1, 1}), c10::IValue(), w2, c10::IValue()}),
      Catch::Contains("w1 must be a float32 CPU 1x1 convolution weight of 8 x 32"));
  CHECK_THROWS_WITH(
      call("fx_onednn::squeeze_excite",
           {y, w1, c10::IValue(), at::randn({32, 8, 3, 3}), c10::IValue()}),
      Catch::Contains("w2 must be a float32 CPU 1x1 convolution weight of 32 x 8"));
  CHECK_THROWS_WITH(
      call("fx_onednn::squeeze_excite",
           {y, w1, at::randn({7}), w2, c10::IValue()}),
      Catch::Contains("b1 must be a float32 CPU tensor of 8 values"));
  CHECK_THROWS_WITH(
      call("fx_onednn::squeeze_excite",
           {y.view({1, 32, 16}), w1, c10::IValue(), w2, c10::IValue()}),
      Catch::Contains("the input must be a 4-d float32 CPU tensor"));
}

TEST_CASE("linear matches aten's linear, with activations") {
  at::manual_seed(2);
  at::Tensor w = at::randn({10, 33});
  at::Tensor b = at::randn({10});
  at::Tensor packed = call("fx_onednn::pack_linear_weight",
                           {w, std::vector<int64_t>{4, 33}});
  for (const std::vector<int64_t>& sizes :
       {std::vector<int64_t>{4, 33}, {1, 33}, {2, 3, 33}}) {
    at::Tensor x = at::randn(sizes);
    check_close(call("fx_onednn::linear", {x, packed, b}), at::linear(x, w, b));
    check_close(call("fx_onednn::linear", {x, packed, c10::IValue(), "relu"}),
                at::relu(at::linear(x, w)));
    // A residual of the output's sizes (read through its strides), added
    // before the activation: as the layer, then the add.
    std::vector<int64_t> out_size = sizes;
    out_size.back() = 10;
    const at::Tensor other = at::randn(out_size).transpose(0, -1).contiguous()
                                 .transpose(0, -1);
    const at::Tensor plain = call("fx_onednn::linear", {x, packed, b});
    CHECK(at::equal(call("fx_onednn::linear",
                         {x, packed, b, "none", 0.0, 0.0, other}),
                    plain + other));
    check_close(call("fx_onednn::linear",
                     {x, packed, b, "relu", 0.0, 0.0, other}),
                at::relu(at::linear(x, w, b) + other));
  }
  at::Tensor x = at::randn({4, 33});
  for (const at::Tensor& other : {at::randn({4, 1}), at::randn({10}),
                                  at::randn({4, 10}).to(at::kLong)}) {
    CAPTURE(other.sizes(), other.scalar_type());
    CHECK_THROWS_WITH(call("fx_onednn::linear",
                           {x, packed, b, "none", 0.0, 0.0, other}),
                      Catch::Contains("fx_onednn::linear: the residual"));
  }
  // No rows: an empty output.
  CHECK(call("fx_onednn::linear", {at::randn({0, 33}), packed, b, "none", 0.0,
                                    0.0, at::randn({0, 10})})
            .numel() == 0);
}

TEST_CASE("matmul matches aten's through strides, broadcast and scale") {
  at::manual_seed(3);
  // Attention's heads: views of one projection [B, T, 3, H, d].
  const at::Tensor qkv = at::randn({2, 7, 3, 4, 8}).permute({2, 0, 3, 1, 4});
  const at::Tensor q = qkv[0], k = qkv[1], v = qkv[2];
  check_close(call("fx_onednn::matmul", {q, k.transpose(-2, -1), 0.125}),
              at::matmul(q, k.transpose(-2, -1)) * 0.125);
  const at::Tensor weights = at::softmax(at::randn({2, 4, 7, 7}), -1);
  check_close(call("fx_onednn::matmul", {weights, v}), at::matmul(weights, v));
  // A batch size of 1 broadcasts; bmm's rank 3.
  const at::Tensor shared = at::randn({1, 4, 8, 5});
  check_close(call("fx_onednn::matmul", {q, shared}), at::matmul(q, shared));
  const at::Tensor a = at::randn({3, 5, 6}), b = at::randn({3, 6, 2});
  check_close(call("fx_onednn::matmul", {a, b}), at::bmm(a, b));
  CHECK(call("fx_onednn::matmul", {at::randn({3, 0, 6}), b}).sizes() ==
        at::IntArrayRef({3, 0, 2}));
  // Bad shapes are errors that say what was wrong.
  CHECK_THROWS_WITH(call("fx_onednn::matmul", {a, at::randn({3, 5, 2})}),
                    Catch::Contains("must be other's second last"));
  CHECK_THROWS_WITH(call("fx_onednn::matmul", {a, at::randn({2, 6, 2})}),
                    Catch::Contains("batch sizes must be equal or 1"));
  CHECK_THROWS_WITH(call("fx_onednn::matmul", {a, at::randn({6, 2})}),
                    Catch::Contains("the same rank"));
  CHECK_THROWS_WITH(call("fx_onednn::matmul", {a.to(at::kDouble), b}),
                    Catch::Contains("float32 CPU tensors"));
}

// aten's flat weights of an LSTM (gates 4) or GRU (gates 3) of `layers`
// layers, `in` inputs and `hidden` units: per layer (and direction, of
// `directions`) w_ih, w_hh, b_ih, b_hh.
std::vector<at::Tensor> random_rnn_weights(int64_t gates, int64_t layers,
                                           int64_t in, int64_t hidden,
                                           int64_t directions = 1) {
  std::vector<at::Tensor> flat;
  for (int64_t l = 0; l < layers * directions; ++l) {
    const int64_t width = l < directions ? in : directions * hidden;
    flat.push_back(at::randn({gates * hidden, width}) * 0.3);
    flat.push_back(at::randn({gates * hidden, hidden}) * 0.3);
    flat.push_back(at::randn({gates * hidden}) * 0.3);
    flat.push_back(at::randn({gates * hidden}) * 0.3);
  }
  return flat;
}

// aten::lstm's flat weights as fx_onednn::lstm takes them: per layer the
// input and hidden weights transposed, and the biases summed.
std::vector<at::Tensor> lstm_params(const std::vector<at::Tensor>& flat) {
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < flat.size(); i += 4) {
    out.push_back(flat[i].t().contiguous());
    out.push_back(flat[i + 1].t().contiguous());
    out.push_back(flat[i + 2] + flat[i + 3]);
  }
  return out;
}

// fx_onednn::lstm's boxed call; bidirectional False unless given.
std::vector<at::Tensor> call_lstm(std::vector<c10::IValue> args) {
  c10::OperatorHandle op = handle("fx_onednn::lstm");
  torch::jit::Stack stack(args.begin(), args.end());
  if (stack.size() == 5) stack.push_back(false);
  op.callBoxed(&stack);
  return {stack.at(0).toTensor(), stack.at(1).toTensor(),
          stack.at(2).toTensor()};
}

TEST_CASE("lstm reads weights written in place, and new weights, afresh") {
  // The layers run on weights reordered once into the primitive's layout
  // (at batch 1, run_recurrences') and kept: a weight written in place, or
  // another in a freed one's memory, must not be served from what was kept.
  at::manual_seed(5);
  const int64_t batch = GENERATE(1, 2);
  CAPTURE(batch);
  const int64_t hidden = 32;
  std::vector<at::Tensor> flat = {at::randn({4 * hidden, 16}) * 0.2,
                                  at::randn({4 * hidden, hidden}) * 0.2,
                                  at::randn({4 * hidden}), at::randn({4 * hidden})};
  const at::Tensor x = at::randn({6, batch, 16});
  const at::Tensor h0 = at::zeros({1, batch, hidden});
  auto want = [&] {
    return std::get<0>(
        at::lstm(x, {h0, h0}, flat, true, 1, 0.0, false, false, false));
  };
  std::vector<at::Tensor> params = lstm_params(flat);
  auto run = [&] {
    return call_lstm({x, std::vector<at::Tensor>{h0, h0}, params, int64_t{1},
                      false})[0];
  };
  check_close(run(), want());
  check_close(run(), want());  // kept
  flat[0].mul_(-1.5);
  params[0].mul_(-1.5);        // written in place
  check_close(run(), want());
  for (int i = 0; i < 3; ++i) {  // new tensors, perhaps at a freed one's address
    flat[1] = at::randn({4 * hidden, hidden}) * 0.2;
    params = lstm_params(flat);
    check_close(run(), want());
  }
  // A weight that is not contiguous is made so for the call, and read as it
  // is now each time.
  at::Tensor transposed = params[1].t().contiguous();
  params[1] = transposed.t();
  REQUIRE_FALSE(params[1].is_contiguous());
  check_close(run(), want());
  flat[1].mul_(0.5);
  transposed.mul_(0.5);
  check_close(run(), want());
}

TEST_CASE("lstm matches aten's LSTM, layer after layer") {
  at::manual_seed(4);
  for (bool batch_first : {false, true}) {
    CAPTURE(batch_first);
    const int64_t layers = 2, hidden = 12;
    const std::vector<at::Tensor> flat =
        random_rnn_weights(4, layers, 7, hidden);
    const at::Tensor x = batch_first ? at::randn({3, 5, 7}) : at::randn({5, 3, 7});
    const at::Tensor h0 = at::randn({layers, 3, hidden});
    const at::Tensor c0 = at::randn({layers, 3, hidden});
    const auto want = at::lstm(x, {h0, c0}, flat, true, layers, 0.0, false,
                               false, batch_first);
    const std::vector<at::Tensor> got =
        call_lstm({x, std::vector<at::Tensor>{h0, c0}, lstm_params(flat),
                   layers, batch_first});
    check_close(got[0], std::get<0>(want));
    check_close(got[1], std::get<1>(want));
    check_close(got[2], std::get<2>(want));
    // The states are not written.
    CHECK(got[1].data_ptr() != h0.data_ptr());
  }
  const std::vector<at::Tensor> flat = {at::randn({8, 3}), at::randn({8, 2}),
                                        at::randn({8}), at::randn({8})};
  const at::Tensor x = at::randn({4, 1, 3});
  const at::Tensor h = at::zeros({1, 1, 2});
  CHECK_THROWS_WITH(
      call_lstm({x, std::vector<at::Tensor>{h, h}, flat, int64_t{1}, false}),
      Catch::Contains("expected 3 weights per layer"));
  CHECK_THROWS_WITH(
      call_lstm({x, std::vector<at::Tensor>{h, at::zeros({1, 2, 2})},
                 lstm_params(flat), int64_t{1}, false}),
      Catch::Contains("h0 and c0 must be [num_layers, N, hidden]"));
  // Every state and weight is read as float32: another dtype is refused,
  // not misread.
  CHECK_THROWS_WITH(
      call_lstm({x, std::vector<at::Tensor>{h, h.to(at::kDouble)},
                 lstm_params(flat), int64_t{1}, false}),
      Catch::Contains("must be float32 CPU tensors"));
  std::vector<at::Tensor> double_weights = lstm_params(flat);
  double_weights[1] = double_weights[1].to(at::kDouble);
  CHECK_THROWS_WITH(
      call_lstm({x, std::vector<at::Tensor>{h, h}, double_weights, int64_t{1},
                 false}),
      Catch::Contains("must be float32 CPU tensors"));
  CHECK_THROWS_WITH(
      call_lstm({at::randn({4, 1, 5}), std::vector<at::Tensor>{h, h},
                 lstm_params(flat), int64_t{1}, false}),
      Catch::Contains("layer 0's weights must be [5, 8]"));
  // A sequence of no steps is refused, as aten refuses it (its initial
  // states are not returned as if it had run); a batch of none runs.
  CHECK_THROWS_WITH(
      call_lstm({at::randn({0, 1, 3}), std::vector<at::Tensor>{h, h},
                 lstm_params(flat), int64_t{1}, false}),
      Catch::Contains("the input's sequence has no steps"));
  CHECK_THROWS_WITH(
      call_lstm({at::randn({1, 0, 3}), std::vector<at::Tensor>{h, h},
                 lstm_params(flat), int64_t{1}, true}),
      Catch::Contains("the input's sequence has no steps"));
  const at::Tensor none = at::zeros({1, 0, 2});
  const auto want = at::lstm(at::randn({4, 0, 3}), {none, none}, flat, true,
                             1, 0.0, false, false, false);
  const std::vector<at::Tensor> got =
      call_lstm({at::randn({4, 0, 3}), std::vector<at::Tensor>{none, none},
                 lstm_params(flat), int64_t{1}, false});
  CHECK(got[0].sizes() == std::get<0>(want).sizes());
  CHECK(got[1].sizes() == std::get<1>(want).sizes());
}

TEST_CASE("lstm at batch 1 runs its own recurrence and matches aten's") {
  // Batch 1 with hidden a multiple of 16 runs run_recurrences on AVX-512
  // (each thread a slice of the units, the threads meeting after each
  // step); other shapes, and CPUs without AVX-512, oneDNN's primitive.
  at::manual_seed(6);
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const int before = at::get_num_threads();
  for (int threads : {1, 2, 3}) {
    at::set_num_threads(threads);
    for (int64_t hidden : {48, 64, 24}) {
      for (bool batch_first : {false, true}) {
        CAPTURE(threads, hidden, batch_first);
        const int64_t layers = 2, steps = 9;
        const std::vector<at::Tensor> flat =
            random_rnn_weights(4, layers, 7, hidden);
        at::Tensor x = at::randn({steps, 7}) * 2;
        x = batch_first ? x.unsqueeze(0) : x.unsqueeze(1);
        const at::Tensor h0 = at::randn({layers, 1, hidden});
        const at::Tensor c0 = at::randn({layers, 1, hidden});
        const auto want = at::lstm(x, {h0, c0}, flat, true, layers, 0.0,
                                   false, false, batch_first);
        const std::vector<at::Tensor> got =
            call_lstm({x, std::vector<at::Tensor>{h0, c0}, lstm_params(flat),
                       layers, batch_first});
        const bool own = avx512 && hidden % 16 == 0;
        CHECK((fx::onednn::last_kernel() == "fx:recurrence:avx512f") ==
              own);
        check_close(got[0], std::get<0>(want));
        check_close(got[1], std::get<1>(want));
        check_close(got[2], std::get<2>(want));
        CHECK(at::equal(h0, h0.clone()));
        // A NaN in the input is NaN in every later output, as in aten's.
        at::Tensor poisoned = x.clone();
        poisoned.view({steps, 7})[4][2] = NAN;
        const at::Tensor nan_want = std::get<0>(at::lstm(
            poisoned, {h0, c0}, flat, true, layers, 0.0, false, false,
            batch_first));
        const at::Tensor nan_got =
            call_lstm({poisoned, std::vector<at::Tensor>{h0, c0},
                       lstm_params(flat), layers, batch_first})[0];
        REQUIRE(nan_want.isnan().any().item<bool>());
        CHECK(at::equal(nan_got.isnan(), nan_want.isnan()));
      }
    }
  }
  at::set_num_threads(before);
}

// aten::gru's flat weights as fx_onednn::gru takes them: the gates
// reordered from aten's r, z, n to oneDNN's u (= z), r, o (= n), transposed;
// the bias [b_iz + b_hz, b_ir + b_hr, b_in, b_hn].
std::vector<at::Tensor> gru_params(const std::vector<at::Tensor>& flat) {
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < flat.size(); i += 4) {
    auto gates = [](const at::Tensor& t) { return t.chunk(3, 0); };
    for (size_t j = 0; j < 2; ++j) {
      const auto g = gates(flat[i + j]);
      out.push_back(at::cat({g[1], g[0], g[2]}).t().contiguous());
    }
    const auto bi = gates(flat[i + 2]), bh = gates(flat[i + 3]);
    out.push_back(at::cat({bi[1] + bh[1], bi[0] + bh[0], bi[2], bh[2]}));
  }
  return out;
}

TEST_CASE("gru matches aten's GRU, layer after layer") {
  at::manual_seed(5);
  for (bool batch_first : {false, true}) {
    CAPTURE(batch_first);
    const int64_t layers = 2, hidden = 10;
    const std::vector<at::Tensor> flat =
        random_rnn_weights(3, layers, 6, hidden);
    const at::Tensor x = batch_first ? at::randn({4, 5, 6}) : at::randn({5, 4, 6});
    const at::Tensor h0 = at::randn({layers, 4, hidden});
    const auto want = at::gru(x, h0, flat, true, layers, 0.0, false, false,
                              batch_first);
    c10::OperatorHandle op = handle("fx_onednn::gru");
    torch::jit::Stack stack{x, h0, gru_params(flat), layers, batch_first,
                            false};
    op.callBoxed(&stack);
    check_close(stack.at(0).toTensor(), std::get<0>(want));
    check_close(stack.at(1).toTensor(), std::get<1>(want));
  }
  // A one-layer GRU of 10 units over 6 features, weights `width` wide (30
  // is right).
  auto call_gru = [](const at::Tensor& input, int64_t width) {
    torch::jit::Stack stack{input, at::randn({1, 4, 10}),
                            std::vector<at::Tensor>{at::randn({6, width}),
                                                    at::randn({10, width}),
                                                    at::randn({40})},
                            int64_t{1}, false, false};
    handle("fx_onednn::gru").callBoxed(&stack);
  };
  CHECK_THROWS_WITH(call_gru(at::randn({5, 4, 6}), 40),
                    Catch::Contains("layer 0's weights must be [6, 30]"));
  CHECK_THROWS_WITH(call_gru(at::randn({0, 4, 6}), 30),
                    Catch::Contains("the input's sequence has no steps"));
}

TEST_CASE("gru at batch 1 runs its own recurrence and matches aten's") {
  at::manual_seed(9);
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const int before = at::get_num_threads();
  for (int threads : {1, 2, 3}) {
    at::set_num_threads(threads);
    for (int64_t hidden : {32, 48, 24}) {
      for (bool batch_first : {false, true}) {
        CAPTURE(threads, hidden, batch_first);
        const int64_t layers = 2, steps = 7;
        const std::vector<at::Tensor> flat =
            random_rnn_weights(3, layers, 5, hidden);
        at::Tensor x = at::randn({steps, 5}) * 2;
        x = batch_first ? x.unsqueeze(0) : x.unsqueeze(1);
        const at::Tensor h0 = at::randn({layers, 1, hidden});
        const auto want = at::gru(x, h0, flat, true, layers, 0.0, false,
                                  false, batch_first);
        torch::jit::Stack stack{x, h0, gru_params(flat), layers, batch_first,
                                false};
        handle("fx_onednn::gru").callBoxed(&stack);
        CHECK((fx::onednn::last_kernel() == "fx:recurrence:avx512f") ==
              (avx512 && hidden % 16 == 0));
        check_close(stack.at(0).toTensor(), std::get<0>(want));
        check_close(stack.at(1).toTensor(), std::get<1>(want));
      }
    }
  }
  at::set_num_threads(before);
}

TEST_CASE("bidirectional lstm and gru match aten's, at batch 1 on the "
          "directions at once") {
  // Two layers in both directions: each direction's weights in turn (the
  // forward first), the second layer reading both directions' outputs side
  // by side; the reverse direction from the last step. At batch 1 (hidden a
  // multiple of 16, AVX-512) the directions run at once on run_recurrences'
  // thread groups (with one thread, one after another); other shapes, two
  // of oneDNN's primitives (left to right, right to left).
  at::manual_seed(12);
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const int before = at::get_num_threads();
  // Two threads first: the one-thread primitives are made then.
  for (int threads : {2, 3, 1}) {
    at::set_num_threads(threads);
    for (int64_t batch : {1, 3}) {
      for (int64_t hidden : {32, 12}) {
        for (bool batch_first : {false, true}) {
          for (bool lstm : {true, false}) {
            CAPTURE(threads, batch, hidden, batch_first, lstm);
            const int64_t layers = 2, steps = 6, in = 5;
            const std::vector<at::Tensor> flat =
                random_rnn_weights(lstm ? 4 : 3, layers, in, hidden, 2);
            const at::Tensor x = batch_first ? at::randn({batch, steps, in})
                                             : at::randn({steps, batch, in});
            const at::Tensor h0 = at::randn({2 * layers, batch, hidden});
            const at::Tensor c0 = at::randn({2 * layers, batch, hidden});
            std::vector<at::Tensor> want, got;
            if (lstm) {
              const auto w = at::lstm(x, {h0, c0}, flat, true, layers, 0.0,
                                      false, true, batch_first);
              want = {std::get<0>(w), std::get<1>(w), std::get<2>(w)};
              got = call_lstm({x, std::vector<at::Tensor>{h0, c0},
                               lstm_params(flat), layers, batch_first, true});
            } else {
              const auto w = at::gru(x, h0, flat, true, layers, 0.0, false,
                                     true, batch_first);
              want = {std::get<0>(w), std::get<1>(w)};
              torch::jit::Stack stack{x, h0, gru_params(flat), layers,
                                      batch_first, true};
              handle("fx_onednn::gru").callBoxed(&stack);
              got = {stack.at(0).toTensor(), stack.at(1).toTensor()};
            }
            CHECK((fx::onednn::last_kernel() == "fx:recurrence:avx512f") ==
                  (avx512 && batch == 1 && hidden % 16 == 0));
            // The one-thread primitives are made with the caller's thread
            // offer changed for the making only.
            CHECK(at::get_num_threads() == threads);
            REQUIRE(got[0].sizes() == want[0].sizes());
            for (size_t i = 0; i < want.size(); ++i) {
              check_close(got[i], want[i]);
            }
          }
        }
      }
    }
  }
  at::set_num_threads(before);
  // Unidirectional weights for a bidirectional call are refused by name.
  const std::vector<at::Tensor> flat = random_rnn_weights(4, 1, 5, 16);
  const at::Tensor h = at::zeros({2, 1, 16});
  CHECK_THROWS_WITH(
      call_lstm({at::randn({4, 1, 5}), std::vector<at::Tensor>{h, h},
                 lstm_params(flat), int64_t{1}, false, true}),
      Catch::Contains("expected 3 weights per layer and direction"));
  CHECK_THROWS_WITH(
      call_lstm({at::randn({4, 1, 5}),
                 std::vector<at::Tensor>{at::zeros({1, 1, 16}), at::zeros({1, 1, 16})},
                 lstm_params(random_rnn_weights(4, 1, 5, 16, 2)), int64_t{1},
                 false, true}),
      Catch::Contains("must be [2 * num_layers, N, hidden]"));
}

TEST_CASE("a weight called otherwise than its last call runs what this call "
          "asks") {
  // Each thread keeps its last call's primitive per packed weight and reuses
  // it for a call with the same arguments: any argument that differs
  // (sizes, residual, bias, activation, its parameters, threads) or a new
  // weight at a freed one's address must make its own.
  at::manual_seed(11);
  const int before = at::get_num_threads();
  const std::vector<int64_t> one = {1, 1};
  const at::Tensor w = at::randn({24, 16, 3, 3}) * 0.2;
  const at::Tensor b = at::randn({24});
  const at::Tensor packed = pack_conv(w, {1, 16, 9, 9}, one, one, one, 1);
  auto conv = [&](const at::Tensor& x, const at::Tensor& bias,
                  const c10::IValue& other, const std::string& activation,
                  double alpha) {
    return call("fx_onednn::conv", {x, packed, bias, one, one, one, int64_t{1},
                                    other, activation, alpha, 0.0});
  };
  for (int round = 0; round < 2; ++round) {
    for (int64_t batch : {1, 2, 1}) {
      for (int64_t size : {9, 6}) {
        CAPTURE(round, batch, size);
        const at::Tensor x = at::randn({batch, 16, size, size});
        const at::Tensor plain = at::conv2d(x, w, b, 1, 1);
        const at::Tensor other = at::randn(plain.sizes());
        check_close(conv(x, b, c10::IValue(), "relu", 0.0), at::relu(plain));
        check_close(conv(x, b, other, "relu", 0.0), at::relu(plain + other));
        check_close(conv(x, at::Tensor(), c10::IValue(), "none", 0.0),
                    at::conv2d(x, w, {}, 1, 1));
        check_close(conv(x, b, c10::IValue(), "relu", 0.25),
                    at::leaky_relu(plain, 0.25));
        check_close(conv(x, b, c10::IValue(), "relu", 0.5),
                    at::leaky_relu(plain, 0.5));
        at::set_num_threads(round == 0 ? 1 : 2);
        check_close(conv(x, b, c10::IValue(), "relu", 0.5),
                    at::leaky_relu(plain, 0.5));
        at::set_num_threads(before);
      }
    }
  }
  // Weights packed and freed in turn, of other output channels: each runs
  // its own (one may take a freed weight's address).
  const at::Tensor x = at::randn({1, 16, 9, 9});
  for (int64_t out : {24, 8, 40, 8, 24}) {
    const at::Tensor w2 = at::randn({out, 16, 3, 3});
    const at::Tensor p2 = pack_conv(w2, x.sizes(), one, one, one, 1);
    check_close(call("fx_onednn::conv", {x, p2, c10::IValue(), one, one, one,
                                         int64_t{1}}),
                at::conv2d(x, w2, {}, 1, 1));
  }
  // linear: rows, bias and activation.
  const at::Tensor lw = at::randn({12, 20});
  const at::Tensor lb = at::randn({12});
  const at::Tensor lp = call("fx_onednn::pack_linear_weight",
                             {lw, std::vector<int64_t>{1, 20}});
  for (int64_t rows : {1, 5, 1}) {
    CAPTURE(rows);
    const at::Tensor in = at::randn({rows, 20});
    check_close(call("fx_onednn::linear", {in, lp, lb, "relu"}),
                at::relu(at::linear(in, lw, lb)));
    check_close(call("fx_onednn::linear", {in, lp, c10::IValue(), "none"}),
                at::linear(in, lw));
    check_close(call("fx_onednn::linear", {in, lp, lb, "clip", 0.0, 1.0}),
                at::clamp(at::linear(in, lw, lb), 0.0, 1.0));
  }
}

TEST_CASE("post-op parameters that differ past six digits get primitives of "
          "their own") {
  // The primitives are cached by call shape and parameters: two scales or
  // slopes that print alike must not share one.
  at::manual_seed(6);
  const at::Tensor a = at::randn({2, 3, 4}), b = at::randn({2, 4, 5});
  const at::Tensor first = call("fx_onednn::matmul", {a, b, 0.12345611});
  const at::Tensor second = call("fx_onednn::matmul", {a, b, 0.12345614});
  CHECK_FALSE(at::equal(first, second));
  const at::Tensor w = at::randn({6, 4});
  const at::Tensor packed = call("fx_onednn::pack_linear_weight",
                                 {w, std::vector<int64_t>{3, 4}});
  const at::Tensor x = at::randn({3, 4}) * 100;
  const at::Tensor slope_1 = call(
      "fx_onednn::linear", {x, packed, c10::IValue(), "relu", 0.01000011, 0.0});
  const at::Tensor slope_2 = call(
      "fx_onednn::linear", {x, packed, c10::IValue(), "relu", 0.01000014, 0.0});
  CHECK_FALSE(at::equal(slope_1, slope_2));
}

TEST_CASE("bad weights and arguments are clear errors") {
  at::Tensor x = at::randn({1, 3, 8, 8});
  at::Tensor w = at::randn({4, 3, 3, 3});
  std::vector<int64_t> one{1, 1};
  CHECK_THROWS_WITH(
      call("fx_onednn::conv", {x, w, c10::IValue(), one, one, one, int64_t{1}}),
      Catch::Contains("not one that fx_onednn::pack_conv_weight made"));
  at::Tensor packed = pack_conv(w, x.sizes(), one, one, one, 1);
  CHECK_THROWS_WITH(
      call("fx_onednn::conv",
           {x, packed.clone(), c10::IValue(), one, one, one, int64_t{1}}),
      Catch::Contains("a copy or a plain weight loses its packing"));
  CHECK_THROWS_WITH(call("fx_onednn::conv", {at::randn({1, 5, 8, 8}), packed,
                                             c10::IValue(), one, one, one,
                                             int64_t{1}}),
                    Catch::Contains("the input has 5 channels"));
  CHECK_THROWS_WITH(call("fx_onednn::conv", {x, packed, c10::IValue(), one, one,
                                             one, int64_t{1}, c10::IValue(),
                                             "swish"}),
                    Catch::Contains("unknown activation 'swish'"));
  CHECK_THROWS_WITH(
      call("fx_onednn::conv", {x, packed, c10::IValue(), one, one, one,
                               int64_t{1}, at::randn({1, 4, 4, 4})}),
      Catch::Contains("the residual must match it exactly"));
}

TEST_CASE("meta kernels give the output's shape without data") {
  at::Tensor x = at::empty({2, 3, 16, 16}, at::kMeta);
  at::Tensor w = at::empty({8, 3, 3, 3}, at::kMeta);
  std::vector<int64_t> two{2, 2}, one{1, 1};
  at::Tensor packed = pack_conv(w, x.sizes(), two, one, one, 1);
  at::Tensor y = call("fx_onednn::conv",
                      {x, packed, c10::IValue(), two, one, one, int64_t{1}});
  CHECK(y.is_meta());
  CHECK(y.sizes() == at::IntArrayRef({2, 8, 8, 8}));
  CHECK(y.is_contiguous(at::MemoryFormat::ChannelsLast));
}

TEST_CASE("conv_add_ adds into the residual's memory") {
  at::manual_seed(3);
  at::Tensor x = at::randn({1, 4, 6, 6});
  at::Tensor w = at::randn({4, 4, 3, 3});
  std::vector<int64_t> one{1, 1};
  at::Tensor packed = pack_conv(w, x.sizes(), one, one, one, 1);
  at::Tensor want = at::relu(at::conv2d(x, w, {}, 1, 1) + x);
  for (bool channels_last : {true, false}) {
    at::Tensor self = channels_last
                          ? x.contiguous(at::MemoryFormat::ChannelsLast)
                          : x.clone();
    void* memory = self.data_ptr();
    at::Tensor got = call("fx_onednn::conv_add_",
                          {self, x, packed, c10::IValue(), one, one, one,
                           int64_t{1}, "relu"});
    CHECK(got.data_ptr() == memory);
    check_close(self, want);
  }
}

TEST_CASE("bfloat16 weights compute in bfloat16 with float32 accumulation") {
  at::manual_seed(4);
  at::Tensor x = at::randn({2, 16, 10, 10});
  at::Tensor w = at::randn({32, 16, 3, 3}) * 0.1;
  at::Tensor b = at::randn({32});
  std::vector<int64_t> one{1, 1};
  if (!avx512_core()) {
    // No bfloat16 kernels (AVX2): refused by name.
    CHECK_THROWS_WITH(
        call("fx_onednn::pack_conv_weight",
             {w, x.sizes().vec(), one, one, one, int64_t{1}, true}),
        Catch::Matchers::Contains("avx512_core"));
    CHECK_THROWS_WITH(call("fx_onednn::pack_linear_weight",
                           {at::randn({8, 16}), std::vector<int64_t>{3, 16}, true}),
                      Catch::Matchers::Contains("avx512_core"));
    return;
  }
  at::Tensor packed = call("fx_onednn::pack_conv_weight",
                           {w, x.sizes().vec(), one, one, one, int64_t{1}, true});
  at::Tensor want = at::relu(at::conv2d(x, w, b, 1, 1));
  auto conv = [&](const at::Tensor& input) {
    return call("fx_onednn::conv", {input, packed, b, one, one, one, int64_t{1},
                                    c10::IValue(), "relu"});
  };
  // bfloat16 in, bfloat16 out.
  at::Tensor y = conv(x.to(at::kBFloat16));
  CHECK(y.scalar_type() == at::kBFloat16);
  CHECK((y.to(at::kFloat) - want).abs().max().item<double>() <
        2e-2 * want.abs().max().item<double>());
  // float32 in: converted inside, float32 out.
  at::Tensor z = conv(x);
  CHECK(z.scalar_type() == at::kFloat);
  CHECK((z - want).abs().max().item<double>() <
        2e-2 * want.abs().max().item<double>());
  // A float32 packing does not take bfloat16 inputs.
  at::Tensor fp32 = pack_conv(w, x.sizes(), one, one, one, 1);
  CHECK_THROWS_WITH(call("fx_onednn::conv", {x.to(at::kBFloat16), fp32, b, one,
                                             one, one, int64_t{1}}),
                    Catch::Contains("pack it with bf16=True"));

  at::Tensor lw = at::randn({7, 16});
  at::Tensor lp = call("fx_onednn::pack_linear_weight",
                       {lw, std::vector<int64_t>{3, 16}, true});
  at::Tensor li = at::randn({3, 16});
  at::Tensor lout = call("fx_onednn::linear", {li, lp, c10::IValue()});
  CHECK(lout.scalar_type() == at::kFloat);
  CHECK((lout - at::linear(li, lw)).abs().max().item<double>() < 5e-2);
}

TEST_CASE("a weight packed at another thread count runs on an optimized kernel") {
  // Packed at 1 thread, this 1x1 convolution's weight gets a layout
  // (Acdb48a here) that oneDNN has only its reference kernel for at 2
  // threads: 1.5 s a call instead of 0.1 ms, until the operator learned to
  // reorder such weights for the call.
  const int before = at::get_num_threads();
  at::manual_seed(3);
  at::Tensor x = at::randn({1, 1024, 14, 14})
                     .contiguous(at::MemoryFormat::ChannelsLast);
  at::Tensor w = at::randn({512, 1024, 1, 1});
  at::Tensor lw = at::randn({1000, 1024});
  at::Tensor rows = at::randn({1, 1024});
  const std::vector<int64_t> one = {1, 1}, zero = {0, 0};
  at::set_num_threads(1);
  at::Tensor packed = pack_conv(w, x.sizes(), one, zero, one, 1);
  at::Tensor packed_linear = call("fx_onednn::pack_linear_weight",
                                  {lw, std::vector<int64_t>{1, 1024}});
  at::Tensor at_one = call("fx_onednn::conv", {x, packed, c10::IValue(), one,
                                               zero, one, int64_t{1}});
  for (int threads : {2, 1}) {
    at::set_num_threads(threads);
    at::Tensor y = call("fx_onednn::conv",
                        {x, packed, c10::IValue(), one, zero, one, int64_t{1}});
    INFO("threads " << threads << ", kernel " << fx::onednn::last_kernel());
    CHECK(fx::onednn::last_kernel().rfind("ref", 0) != 0);
    CHECK_FALSE(fx::onednn::last_kernel().empty());
    check_close(y, at::conv2d(x, w));
    check_close(y, at_one);
    check_close(call("fx_onednn::linear", {rows, packed_linear, c10::IValue()}),
                at::linear(rows, lw));
    CHECK(fx::onednn::last_kernel().rfind("ref", 0) != 0);
  }
  at::set_num_threads(before);
}

TEST_CASE("max_pool2d and avg_pool2d match aten's to the element") {
  at::manual_seed(0);
  struct PoolCase {
    std::vector<int64_t> input, kernel, stride, padding, dilation;
    bool ceil_mode;
  };
  const std::vector<PoolCase> cases = {
      {{2, 64, 112, 112}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false},  // ResNet
      {{1, 64, 112, 112}, {3, 3}, {2, 2}, {0, 0}, {1, 1}, true},   // GoogLeNet
      {{3, 16, 15, 17}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, false},    // odd sizes
      {{3, 16, 15, 17}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, true},
      {{1, 8, 13, 13}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, false},     // Inception
      {{1, 8, 14, 11}, {3, 2}, {2, 1}, {1, 1}, {2, 1}, true},      // dilated
      {{2, 5, 9, 9}, {3, 3}, {3, 3}, {1, 0}, {1, 1}, true},
      // Input and padding smaller than the kernel: ceil mode's window
      // reaches past them (aten divides by its part inside).
      {{1, 4, 1, 1}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, true},
      {{1, 4, 3, 3}, {5, 5}, {4, 4}, {0, 0}, {1, 1}, true},
      // Dilation skipping over the input: an empty window (-inf).
      {{1, 4, 1, 1}, {2, 2}, {1, 1}, {1, 1}, {2, 2}, false},
  };
  for (const PoolCase& c : cases) {
    CAPTURE(c.input, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode);
    const at::Tensor x = at::randn(c.input).contiguous(at::MemoryFormat::ChannelsLast);
    const at::Tensor want_max =
        at::max_pool2d(x, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode);
    const at::Tensor got_max = call(
        "fx_onednn::max_pool2d",
        {x, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode});
    CHECK(got_max.is_contiguous(at::MemoryFormat::ChannelsLast));
    CHECK(at::equal(got_max, want_max));
    // The same from a contiguous (NCHW) input.
    CHECK(at::equal(call("fx_onednn::max_pool2d",
                         {x.contiguous(), c.kernel, c.stride, c.padding,
                          c.dilation, c.ceil_mode}),
                    want_max));
    if (c.dilation != std::vector<int64_t>{1, 1}) continue;
    for (bool include_pad : {true, false}) {
      CAPTURE(include_pad);
      const at::Tensor want = at::avg_pool2d(x, c.kernel, c.stride, c.padding,
                                             c.ceil_mode, include_pad);
      const at::Tensor got =
          call("fx_onednn::avg_pool2d", {x, c.kernel, c.stride, c.padding,
                                         c.ceil_mode, include_pad});
      check_close(got, want);
    }
  }
  // bfloat16 activations (a bf16 chain: AVX-512 only) pool in bfloat16.
  if (!avx512_core()) return;
  const at::Tensor x = at::randn({2, 32, 28, 28})
                           .to(at::kBFloat16)
                           .contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor got = call("fx_onednn::max_pool2d",
                              {x, std::vector<int64_t>{3, 3},
                               std::vector<int64_t>{2, 2},
                               std::vector<int64_t>{1, 1},
                               std::vector<int64_t>{1, 1}, false});
  CHECK(got.scalar_type() == at::kBFloat16);
  CHECK(at::equal(got, at::max_pool2d(x, {3, 3}, {2, 2}, {1, 1})));
}

TEST_CASE("bad pooling arguments are clear errors") {
  const at::Tensor x = at::randn({1, 4, 8, 8});
  const std::vector<int64_t> k3 = {3, 3}, s1 = {1, 1}, p0 = {0, 0},
                             d1 = {1, 1};
  CHECK_THROWS_WITH(call("fx_onednn::max_pool2d",
                         {x, k3, s1, std::vector<int64_t>{2, 2}, d1, false}),
                    Catch::Contains("padding must be at most half the kernel"));
  CHECK_THROWS_WITH(call("fx_onednn::max_pool2d",
                         {at::randn({4, 8, 8}), k3, s1, p0, d1, false}),
                    Catch::Contains("must be 4-dimensional"));
  CHECK_THROWS_WITH(
      call("fx_onednn::max_pool2d",
           {x, std::vector<int64_t>{9, 9}, s1, p0, d1, false}),
      Catch::Contains("give an empty output"));
  CHECK_THROWS_WITH(call("fx_onednn::avg_pool2d",
                         {x.to(at::kDouble), k3, s1, p0, false, true}),
                    Catch::Contains("fx_onednn::avg_pool2d"));
  CHECK_THROWS_WITH(
      call("fx_onednn::max_pool2d",
           {x, k3, std::vector<int64_t>{0, 1}, p0, d1, false}),
      Catch::Contains("must be positive"));
  CHECK_THROWS_WITH(call("fx_onednn::max_pool2d",
                         {at::randn({1, 0, 8, 8}), k3, s1, p0, d1, false}),
                    Catch::Contains("C, H and W not 0"));
  // aten's shorthands: one value for both sizes, an empty stride for the
  // kernel's.
  const std::vector<int64_t> one3 = {3}, none = {}, one1 = {1};
  CHECK(at::equal(
      call("fx_onednn::max_pool2d", {x, one3, none, one1, one1, false}),
      at::max_pool2d(x, {3, 3}, {3, 3}, {1, 1})));
}

TEST_CASE("conv_transpose matches aten's transposed convolution") {
  at::manual_seed(0);
  struct Case {
    std::vector<int64_t> input, weight, stride, padding, output_padding,
        dilation;
    int64_t groups;
  };
  const std::vector<Case> cases = {
      {{1, 16, 14, 14}, {16, 8, 2, 2}, {2, 2}, {0, 0}, {0, 0}, {1, 1}, 1},
      {{2, 8, 7, 9}, {8, 4, 3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 1},
      {{1, 8, 6, 6}, {8, 3, 3, 3}, {2, 1}, {1, 0}, {1, 0}, {1, 2}, 2},
      {{1, 6, 5, 5}, {6, 2, 4, 4}, {3, 3}, {1, 1}, {2, 0}, {1, 1}, 3},
      {{2, 4, 10}, {4, 6, 5}, {2}, {2}, {1}, {1}, 1},                 // 1-d
      {{1, 4, 3, 4, 5}, {4, 2, 3, 3, 3}, {2, 2, 1}, {1, 0, 1}, {1, 1, 0},
       {1, 1, 1}, 1},                                                  // 3-d
  };
  for (const Case& c : cases) {
    CAPTURE(c.input, c.weight, c.stride, c.padding, c.output_padding,
            c.dilation, c.groups);
    const at::Tensor x = at::randn(c.input);
    const at::Tensor w = at::randn(c.weight);
    const at::Tensor b = at::randn({c.weight[1] * c.groups});
    const at::Tensor packed =
        call("fx_onednn::pack_conv_transpose_weight",
             {w, c.input, c.stride, c.padding, c.output_padding, c.dilation,
              c.groups});
    CHECK(packed.sizes() == w.sizes());
    at::Tensor want = at::convolution(x, w, b, c.stride, c.padding,
                                      c.dilation, true, c.output_padding,
                                      c.groups);
    at::Tensor got = call("fx_onednn::conv_transpose",
                          {x, packed, b, c.stride, c.padding,
                           c.output_padding, c.dilation, c.groups});
    check_close(got, want);
    got = call("fx_onednn::conv_transpose",
               {x, packed, b, c.stride, c.padding, c.output_padding,
                c.dilation, c.groups, "relu", 0.0, 0.0});
    check_close(got, want.relu());
    // Shapes without data.
    const at::Tensor meta = call(
        "fx_onednn::conv_transpose",
        {x.to(at::kMeta), w.to(at::kMeta), c10::IValue(), c.stride, c.padding,
         c.output_padding, c.dilation, c.groups});
    CHECK(meta.sizes() == want.sizes());
  }
  const at::Tensor x = at::randn({1, 4, 5, 5});
  const at::Tensor w = at::randn({4, 2, 3, 3});
  const std::vector<int64_t> one = {1, 1}, zero = {0, 0};
  CHECK_THROWS_WITH(call("fx_onednn::pack_conv_transpose_weight",
                         {w, x.sizes().vec(), one, zero, one, one, int64_t{1}}),
                    Catch::Contains("output_padding must be smaller"));
  CHECK_THROWS_WITH(call("fx_onednn::conv_transpose",
                         {x, w, c10::IValue(), one, zero, zero, one,
                          int64_t{1}}),
                    Catch::Contains("fx_onednn::pack_conv_transpose_weight"));
}

TEST_CASE("outputs reuse the blocks earlier outputs freed, up to a limit") {
  at::manual_seed(0);
  // A 1x1 convolution whose output (1x64x64x64 float32) is 1 MiB, of an
  // input already channels-last (no converted copy of it in the cache).
  const at::Tensor x =
      at::randn({1, 16, 64, 64}).contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor w = at::randn({64, 16, 1, 1});
  const at::Tensor packed = pack_conv(w, x.sizes(), {1, 1}, {0, 0}, {1, 1}, 1);
  const at::Tensor want = at::conv2d(x, w);
  auto run = [&] {
    return call("fx_onednn::conv", {x, packed, c10::IValue(), std::vector<int64_t>{1, 1},
                                    std::vector<int64_t>{0, 0},
                                    std::vector<int64_t>{1, 1}, int64_t{1}});
  };
  fx::onednn::release_activation_cache();
  {
    const at::Tensor first = run();
    check_close(first, want);
  }
  const auto freed = fx::onednn::activation_cache_stats();
  CHECK(freed.cached_bytes >= 64 * 64 * 64 * 4);
  CHECK(freed.limit_bytes == int64_t{512} << 20);
  const void* block = nullptr;
  {
    const at::Tensor second = run();  // the first's block, reused
    check_close(second, want);
    block = second.data_ptr();
    const auto now = fx::onednn::activation_cache_stats();
    CHECK(now.reused == freed.reused + 1);
    CHECK(now.cached_bytes == freed.cached_bytes - 64 * 64 * 64 * 4);
    // Held by a live tensor, a block is not handed out twice.
    const at::Tensor third = run();
    CHECK(third.data_ptr() != block);
    check_close(third, want);
  }
  // Limit 0: freed blocks go back to the system at once.
  fx::onednn::set_activation_cache_limit(0);
  CHECK(fx::onednn::activation_cache_stats().cached_bytes == 0);
  { const at::Tensor out = run(); }
  CHECK(fx::onednn::activation_cache_stats().cached_bytes == 0);
  fx::onednn::set_activation_cache_limit(int64_t{512} << 20);
  { const at::Tensor out = run(); }
  CHECK(fx::onednn::activation_cache_stats().cached_bytes > 0);
  fx::onednn::release_activation_cache();
  CHECK(fx::onednn::activation_cache_stats().cached_bytes == 0);
  CHECK(fx::onednn::activation_cache_stats().limit_bytes == int64_t{512} << 20);
  CHECK_THROWS_WITH(fx::onednn::set_activation_cache_limit(-1),
                    Catch::Matchers::Contains("the limit must be 0"));

  // Full, the cache gives back the blocks freed longest ago: a size no call
  // asks for any more does not keep the cache from holding the new one.
  const at::Tensor w2 = at::randn({128, 16, 1, 1});
  const at::Tensor packed2 = pack_conv(w2, x.sizes(), {1, 1}, {0, 0}, {1, 1}, 1);
  auto run2 = [&] {
    return call("fx_onednn::conv", {x, packed2, c10::IValue(), std::vector<int64_t>{1, 1},
                                    std::vector<int64_t>{0, 0},
                                    std::vector<int64_t>{1, 1}, int64_t{1}});
  };
  fx::onednn::set_activation_cache_limit((int64_t{5} << 20) / 2);  // 2.5 MiB
  { const at::Tensor one = run(); }    // 1 MiB freed first
  { const at::Tensor two = run2(); }   // 2 MiB: the 1 MiB block goes
  CHECK(fx::onednn::activation_cache_stats().cached_bytes == 128 * 64 * 64 * 4);
  const auto before = fx::onednn::activation_cache_stats();
  { const at::Tensor two = run2(); }
  CHECK(fx::onednn::activation_cache_stats().reused == before.reused + 1);
  fx::onednn::set_activation_cache_limit(int64_t{512} << 20);
  fx::onednn::release_activation_cache();

  // The most recently freed block that fits and is at most twice the size
  // asked for: a 768 KiB output takes the 1 MiB block freed last; a
  // 256 KiB one takes none of them but is cached in turn.
  auto run_channels = [&](int64_t channels) {
    const at::Tensor wc = at::randn({channels, 16, 1, 1});
    const at::Tensor pc = pack_conv(wc, x.sizes(), {1, 1}, {0, 0}, {1, 1}, 1);
    const at::Tensor out =
        call("fx_onednn::conv", {x, pc, c10::IValue(), std::vector<int64_t>{1, 1},
                                 std::vector<int64_t>{0, 0},
                                 std::vector<int64_t>{1, 1}, int64_t{1}});
    check_close(out, at::conv2d(x, wc));
    return out;
  };
  const void* last = nullptr;
  const void* other = nullptr;
  {
    const at::Tensor a = run_channels(64);
    const at::Tensor b = run_channels(64);
    last = a.data_ptr();  // b is destroyed first, a last
    other = b.data_ptr();
  }
  {
    const at::Tensor c = run_channels(48);
    CHECK(c.data_ptr() == last);
    const auto before_small = fx::onednn::activation_cache_stats();
    const at::Tensor d = run_channels(16);
    CHECK(d.data_ptr() != other);
    CHECK(fx::onednn::activation_cache_stats().allocated ==
          before_small.allocated + 1);
  }
  CHECK(fx::onednn::activation_cache_stats().cached_bytes ==
        2 * 64 * 64 * 64 * 4 + 16 * 64 * 64 * 4);
  fx::onednn::release_activation_cache();
}

TEST_CASE("unpack_weight gives back the weight a pack call was given") {
  at::manual_seed(0);
  for (const ConvCase& c : std::vector<ConvCase>{
           {{1, 3, 17, 19}, {8, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
           {{1, 32, 12, 12}, {32, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 32},
           {{1, 8, 10, 10}, {12, 2, 3, 3}, {1, 2}, {2, 1}, {2, 1}, 4},
           {{2, 4, 20}, {6, 4, 5}, {2}, {2}, {1}, 1},
           {{1, 4, 6, 7, 8}, {5, 4, 3, 3, 3}, {1, 1, 2}, {1, 0, 1}, {1, 1, 1}, 1}}) {
    const at::Tensor w = at::randn(c.weight);
    const at::Tensor packed =
        pack_conv(w, c.input, c.stride, c.padding, c.dilation, c.groups);
    CHECK(at::equal(call("fx_onednn::unpack_weight",
                         {packed, std::string("conv"), c.groups}),
                    w));
  }
  const at::Tensor lw = at::randn({24, 40});
  const at::Tensor lpacked = call("fx_onednn::pack_linear_weight",
                                  {lw, std::vector<int64_t>{3, 40}});
  CHECK(at::equal(call("fx_onednn::unpack_weight", {lpacked, std::string("linear")}),
                  lw));
  // Transposed: aten's [in, out / groups, kernel...], grouped.
  const at::Tensor tw = at::randn({8, 3, 4, 4});
  const at::Tensor tpacked = call(
      "fx_onednn::pack_conv_transpose_weight",
      {tw, std::vector<int64_t>{1, 8, 7, 7}, std::vector<int64_t>{2, 2},
       std::vector<int64_t>{1, 1}, std::vector<int64_t>{0, 0},
       std::vector<int64_t>{1, 1}, int64_t{2}});
  CHECK(at::equal(call("fx_onednn::unpack_weight",
                       {tpacked, std::string("conv_transpose"), int64_t{2}}),
                  tw));
  // bfloat16 packings (AVX-512 only) come back widened, rounded as
  // bfloat16 rounds.
  if (avx512_core()) {
    const at::Tensor bpacked = call("fx_onednn::pack_linear_weight",
                                    {lw, std::vector<int64_t>{3, 40}, true});
    CHECK(at::equal(call("fx_onednn::unpack_weight", {bpacked, std::string("linear")}),
                    lw.to(at::kBFloat16).to(at::kFloat)));
  }

  CHECK_THROWS_WITH(call("fx_onednn::unpack_weight", {lw, std::string("linear")}),
                    Catch::Matchers::Contains("fx_onednn::pack_linear_weight"));
  CHECK_THROWS_WITH(call("fx_onednn::unpack_weight", {lpacked, std::string("lstm")}),
                    Catch::Matchers::Contains("kind must be conv"));
  CHECK_THROWS_WITH(
      call("fx_onednn::unpack_weight", {tpacked, std::string("conv_transpose"), int64_t{1}}),
      Catch::Matchers::Contains("packed for other sizes or groups"));
  // A transposed convolution's square weight read as a convolution's would
  // come back transposed: the kind is checked.
  const at::Tensor square = at::randn({4, 4, 3, 3});
  const at::Tensor square_packed = call(
      "fx_onednn::pack_conv_transpose_weight",
      {square, std::vector<int64_t>{1, 4, 5, 5}, std::vector<int64_t>{1, 1},
       std::vector<int64_t>{1, 1}, std::vector<int64_t>{0, 0},
       std::vector<int64_t>{1, 1}, int64_t{1}});
  CHECK_THROWS_WITH(call("fx_onednn::unpack_weight", {square_packed, std::string("conv")}),
                    Catch::Matchers::Contains("was not made by fx_onednn::pack_conv_weight"));
}

TEST_CASE("conv_chain runs its layers as conv and conv_add_ one by one do") {
  // An inverted-residual block twice over (expand, depthwise, project, the
  // second added into the first's output), at odd sizes and strides.
  at::manual_seed(4);
  struct Layer {
    std::vector<int64_t> weight;
    int64_t stride, padding, groups, residual;
    std::string activation;
    double alpha, beta;
  };
  const std::vector<Layer> layers = {
      {{16, 3, 3, 3}, 2, 1, 1, -1, "clip", 0, 6},   // 3 -> 16, 19x19 -> 10x10
      {{16, 1, 3, 3}, 1, 1, 16, -1, "clip", 0, 6},  // depthwise
      {{8, 16, 1, 1}, 1, 0, 1, -1, "none", 0, 0},   // value 3
      {{48, 8, 1, 1}, 1, 0, 1, -1, "relu", 0, 0},
      {{48, 1, 3, 3}, 1, 1, 48, -1, "relu", 0, 0},
      {{8, 48, 1, 1}, 1, 0, 1, 3, "none", 0, 0},    // added into value 3
      {{48, 8, 1, 1}, 1, 0, 1, -1, "hardswish", 0, 0},
      {{48, 1, 5, 5}, 2, 2, 48, -1, "silu", 0, 0},  // 10x10 -> 5x5
      {{24, 48, 1, 1}, 1, 0, 1, -1, "none", 0, 0},
  };
  std::vector<int64_t> size = {1, 3, 19, 19};
  std::vector<at::Tensor> weights, biases;
  std::vector<int64_t> ints;
  std::vector<std::string> activations;
  std::vector<double> params;
  for (const Layer& l : layers) {
    at::Tensor w = at::randn(l.weight) * (1.0 / std::sqrt(l.weight[1] * 9.0));
    weights.push_back(pack_conv(w, size, {l.stride, l.stride},
                                {l.padding, l.padding}, {1, 1}, l.groups));
    biases.push_back(at::randn({l.weight[0]}) * 0.1);
    ints.insert(ints.end(), {l.stride, l.padding, l.groups, l.residual});
    activations.push_back(l.activation);
    params.insert(params.end(), {l.alpha, l.beta});
    const int64_t out = (size[2] + 2 * l.padding - l.weight[2]) / l.stride + 1;
    size = {1, l.weight[0], out, out};
  }
  std::string joined;
  for (const std::string& a : activations) joined += (joined.empty() ? "" : ",") + a;
  // The layers one by one, as the graph ran them before.
  auto one_by_one = [&](const at::Tensor& x) {
    std::vector<at::Tensor> values = {x};
    for (size_t i = 0; i < layers.size(); ++i) {
      const Layer& l = layers[i];
      std::vector<int64_t> s{l.stride, l.stride}, p{l.padding, l.padding};
      if (l.residual >= 0) {
        values.push_back(call("fx_onednn::conv_add_",
                              {values[l.residual], values[i], weights[i],
                               biases[i], s, p, std::vector<int64_t>{1, 1},
                               l.groups, l.activation, l.alpha, l.beta}));
      } else {
        values.push_back(call("fx_onednn::conv",
                              {values[i], weights[i], biases[i], s, p,
                               std::vector<int64_t>{1, 1}, l.groups,
                               c10::IValue(), l.activation, l.alpha,
                               l.beta}));
      }
    }
    return values.back();
  };
  auto chain = [&](const at::Tensor& x) {
    return call("fx_onednn::conv_chain",
                {x, weights, biases, ints, joined, params});
  };
  const int saved = at::get_num_threads();
  for (int64_t batch : {1, 2}) {
    const at::Tensor x = at::randn({batch, 3, 19, 19});
    const at::Tensor want = one_by_one(x);
    for (int threads : {1, 2, 3, 4}) {
      CAPTURE(batch, threads);
      at::set_num_threads(threads);
      const at::Tensor got = chain(x);
      CHECK(got.sizes() == want.sizes());
      CHECK(got.is_contiguous(at::MemoryFormat::ChannelsLast));
      check_close(got, want);
      check_close(chain(x), want);  // the plan kept, run again
    }
  }
  at::set_num_threads(saved);
  const at::Tensor x = at::randn({1, 3, 19, 19});
  std::vector<int64_t> bad = ints;
  bad[4 * 5 + 3] = 5;  // layer 5's own input
  CHECK_THROWS_WITH(call("fx_onednn::conv_chain",
                         {x, weights, biases, bad, joined, params}),
                    Catch::Contains("layer 5's residual must be -1 or the "
                                    "output of a layer before its input's"));
  CHECK_THROWS_WITH(
      call("fx_onednn::conv_chain",
           {x, weights, biases, std::vector<int64_t>(ints.begin(), ints.end() - 1),
            joined, params}),
      Catch::Contains("a chain of n layers takes n weights"));
  CHECK_THROWS_WITH(
      call("fx_onednn::conv_chain",
           {at::randn({1, 4, 19, 19}), weights, biases, ints, joined, params}),
      Catch::Contains("the input has 4 channels"));
  // Its meta kernel gives the last layer's sizes.
  std::vector<at::Tensor> meta_weights, meta_biases;
  for (size_t i = 0; i < weights.size(); ++i) {
    meta_weights.push_back(at::empty(weights[i].sizes(), at::kMeta));
    meta_biases.push_back(at::empty(biases[i].sizes(), at::kMeta));
  }
  const at::Tensor meta = call(
      "fx_onednn::conv_chain", {at::empty({1, 3, 19, 19}, at::kMeta),
                                meta_weights, meta_biases, ints, joined,
                                params});
  CHECK(meta.sizes() == std::vector<int64_t>{1, 24, 5, 5});
}
