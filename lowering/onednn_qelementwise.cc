// Elementwise int8 operators of the lowered int8 graphs, on passes of our
// own (lowering/kernels/int8_elementwise.h): an activation between two
// quantizations as a table lookup, and squeeze-and-excitation's
// per-channel mean and product. Registered here with the dispatcher (their schemas:
// operators.def).
#include <torch/library.h>

#include <ATen/ATen.h>
#include <ATen/quantized/Quantizer.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_join.h"
#include "lowering/kernels/int8_elementwise.h"
#include "lowering/onednn_ops.h"
#include "lowering/onednn_support.h"

namespace fx::onednn {
namespace {

using namespace internal;  // NOLINT: the operators' shared layer

// The activation by its fx_onednn name, on float32 values: the aten
// operator the unlowered graph runs.
at::Tensor activate(const std::string& activation, const at::Tensor& x) {
  if (activation == "none") return x;
  if (activation == "relu") return at::relu(x);
  if (activation == "hardswish") return at::hardswish(x);
  if (activation == "hardsigmoid") return at::hardsigmoid(x);
  if (activation == "silu") return at::silu(x);
  if (activation == "sigmoid") return at::sigmoid(x);
  if (activation == "tanh") return at::tanh(x);
  if (activation == "gelu") return at::gelu(x);
  return at::gelu(x, "tanh");  // gelu_tanh; the names are checked first
}

using TableKey = std::tuple<std::string, double, int64_t, double, int64_t>;

// quantize(act(dequantize(q))) for each of the 256 quint8 values, as the
// unlowered graph computes it (aten's dequantize, activation and
// quantize_per_tensor), made once per activation and quantizations.
std::array<uint8_t, 256> table_for(const TableKey& key) {
  static std::mutex mutex;
  static std::map<TableKey, std::array<uint8_t, 256>> tables;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = tables.find(key);
  if (it != tables.end()) return it->second;
  if (tables.size() >= 4096) tables.clear();
  const auto& [activation, in_scale, in_zero_point, out_scale, out_zero_point] =
      key;
  const at::Tensor codes = at::arange(256, at::kInt).to(at::kByte);
  const at::Tensor values = at::dequantize(at::_make_per_tensor_quantized_tensor(
      codes, in_scale, in_zero_point));
  const at::Tensor out = at::quantize_per_tensor(
      activate(activation, values), out_scale, out_zero_point, at::kQUInt8);
  std::array<uint8_t, 256> table;
  const at::Tensor bytes = out.int_repr().contiguous();
  std::copy_n(bytes.data_ptr<uint8_t>(), 256, table.begin());
  return tables.emplace(key, table).first->second;
}

at::Tensor qactivation(const at::Tensor& input, c10::string_view activation,
                       double output_scale, int64_t output_zero_point) {
  const char* op = "fx_onednn::qactivation";
  const QParams in = quint8_params(op, input, "the input");
  check_output_params(op, output_scale, output_zero_point);
  const std::vector<std::string>& known = qconv_activations();
  TORCH_CHECK(std::find(known.begin(), known.end(), activation) != known.end(),
              op, ": activation must be one of ", absl::StrJoin(known, ", "),
              ", got '", std::string(activation), "'");
  const at::Tensor src = input.is_non_overlapping_and_dense()
                             ? input
                             : input.contiguous(input.suggest_memory_format());
  const bool channels_last =
      src.dim() == 4 && src.is_contiguous(at::MemoryFormat::ChannelsLast);
  at::Tensor out =
      channels_last
          ? empty_quint8_channels_last(src.sizes(), output_scale,
                                       output_zero_point)
          : at::_empty_affine_quantized(src.sizes(), src.options(),
                                        output_scale, output_zero_point,
                                        src.suggest_memory_format());
  if (!out.strides().equals(src.strides())) {
    out = at::_empty_affine_quantized(src.sizes(), src.options(), output_scale,
                                      output_zero_point)
              .as_strided(src.sizes(), src.strides());
  }
  if (src.numel() == 0) return out;
  const std::array<uint8_t, 256> table = table_for({std::string(activation), in.scale,
                                 in.zero_point, output_scale,
                                 output_zero_point});
  lookup_u8(static_cast<const uint8_t*>(src.data_ptr()),
            static_cast<uint8_t*>(out.data_ptr()), src.numel(), table.data());
  return out;
}

at::Tensor qactivation_meta(const at::Tensor& input, c10::string_view,
                            double, int64_t) {
  return at::empty_like(input);
}

at::Tensor qmul_channels(const at::Tensor& input, const at::Tensor& gate,
                         double output_scale, int64_t output_zero_point) {
  const char* op = "fx_onednn::qmul_channels";
  const QParams x = quint8_params(op, input, "the input");
  const QParams g = quint8_params(op, gate, "the gate");
  check_output_params(op, output_scale, output_zero_point);
  TORCH_CHECK(input.dim() == 4, op, ": the input must be 4-d (N, C, H, W), "
              "got ", input.sizes());
  const int64_t n = input.size(0), channels = input.size(1);
  TORCH_CHECK(gate.dim() == 4 && gate.size(1) == channels &&
                  gate.size(2) == 1 && gate.size(3) == 1 &&
                  (gate.size(0) == n || gate.size(0) == 1),
              op, ": the gate must be [N or 1, C, 1, 1] for an input of "
              "sizes ", input.sizes(), ", got ", gate.sizes());
  const at::Tensor src = input.contiguous(at::MemoryFormat::ChannelsLast);
  at::Tensor out = empty_quint8_channels_last(input.sizes(), output_scale,
                                              output_zero_point);
  if (out.numel() == 0) return out;
  // The gate less its zero point, one row of channels per image.
  std::vector<int32_t> gate_codes(n * channels);
  const auto* codes = static_cast<const uint8_t*>(gate.data_ptr());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t image = gate.size(0) == 1 ? 0 : i;
    for (int64_t c = 0; c < channels; ++c) {
      gate_codes[i * channels + c] =
          static_cast<int32_t>(codes[image * gate.stride(0) + c * gate.stride(1)]) -
          static_cast<int32_t>(g.zero_point);
    }
  }
  const int64_t pixels = input.size(2) * input.size(3);
  ChannelProduct p;
  p.in = static_cast<const uint8_t*>(src.data_ptr());
  p.out = static_cast<uint8_t*>(out.data_ptr());
  p.gate = gate_codes.data();
  p.rows = n * pixels;
  p.rows_per_gate = pixels;
  p.channels = channels;
  p.x_zero_point = static_cast<int32_t>(x.zero_point);
  p.zero_point = static_cast<int32_t>(output_zero_point);
  p.multiplier = static_cast<float>(x.scale * g.scale / output_scale);
  multiply_channels_u8(p);
  return out;
}

at::Tensor qmul_channels_meta(const at::Tensor& input, const at::Tensor&,
                              double, int64_t) {
  return at::empty_like(input);
}

at::Tensor qmean_channels(const at::Tensor& input, double output_scale,
                          int64_t output_zero_point) {
  const char* op = "fx_onednn::qmean_channels";
  const QParams x = quint8_params(op, input, "the input");
  check_output_params(op, output_scale, output_zero_point);
  TORCH_CHECK(input.dim() == 4, op, ": the input must be 4-d (N, C, H, W), "
              "got ", input.sizes());
  const int64_t n = input.size(0), channels = input.size(1);
  const int64_t pixels = input.size(2) * input.size(3);
  TORCH_CHECK(pixels > 0 || n * channels == 0, op,
              ": the mean of an empty image (sizes ", input.sizes(),
              ") is undefined");
  TORCH_CHECK(pixels <= (int64_t{1} << 23), op, ": at most 2^23 pixels an "
              "image, got ", pixels);
  const at::Tensor src = input.contiguous(at::MemoryFormat::ChannelsLast);
  at::Tensor out = empty_quint8_channels_last({n, channels, 1, 1},
                                              output_scale, output_zero_point);
  if (out.numel() == 0) return out;
  std::vector<int32_t> sums(n * channels);
  ChannelSum p;
  p.in = static_cast<const uint8_t*>(src.data_ptr());
  p.sums = sums.data();
  p.images = n;
  p.pixels = pixels;
  p.channels = channels;
  sum_channels_u8(p);
  auto* o = static_cast<uint8_t*>(out.data_ptr());
  for (int64_t i = 0; i < n * channels; ++i) {
    const double mean =
        (static_cast<double>(sums[i]) / static_cast<double>(pixels) -
         static_cast<double>(x.zero_point)) *
        x.scale;
    const double q = std::nearbyint(mean / output_scale) +
                     static_cast<double>(output_zero_point);
    o[i] = static_cast<uint8_t>(std::clamp(q, 0.0, 255.0));
  }
  return out;
}

at::Tensor qmean_channels_meta(const at::Tensor& input, double, int64_t) {
  return at::empty({input.size(0), input.size(1), 1, 1}, input.options());
}

}  // namespace

TORCH_LIBRARY_IMPL(fx_onednn, QuantizedCPU, m) {
  m.impl("qactivation", &qactivation);
  m.impl("qmul_channels", &qmul_channels);
  m.impl("qmean_channels", &qmean_channels);
}

// On CPU too, so that a float input is refused by name.
TORCH_LIBRARY_IMPL(fx_onednn, CPU, m) {
  m.impl("qactivation", &qactivation);
  m.impl("qmul_channels", &qmul_channels);
  m.impl("qmean_channels", &qmean_channels);
}

TORCH_LIBRARY_IMPL(fx_onednn, Meta, m) {
  m.impl("qactivation", &qactivation_meta);
  m.impl("qmul_channels", &qmul_channels_meta);
  m.impl("qmean_channels", &qmean_channels_meta);
}

}  // namespace fx::onednn
