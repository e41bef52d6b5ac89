#include "quantization/observer.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"

namespace fx {

double QParams::scale_value() const { return scale.item<double>(); }
int64_t QParams::zero_point_value() const { return zero_point.item<int64_t>(); }

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

int64_t channels_of(const ObserverSpec& spec, at::IntArrayRef sizes) {
  const int64_t dim = static_cast<int64_t>(sizes.size());
  TORCH_CHECK(spec.ch_axis >= 0 && spec.ch_axis < dim,
              "a per-channel observer on axis ", spec.ch_axis,
              " needs a tensor of more dimensions, got sizes ", sizes);
  return sizes[spec.ch_axis];
}

// --- torch.ao's _calculate_qparams, on a min and max (per tensor or per
// channel, as float64 tensors) -------------------------------------------
QParams qparams_from_range(const ObserverSpec& spec, at::Tensor min_val,
                           at::Tensor max_val) {
  const auto [quant_min, quant_max] = spec.range();
  at::Tensor min_neg = at::clamp_max(min_val, 0.0);
  at::Tensor max_pos = at::clamp_min(max_val, 0.0);
  at::Tensor scale, zero_point;
  if (spec.symmetric()) {
    max_pos = at::maximum(-min_neg, max_pos);
    scale = max_pos / (static_cast<double>(quant_max - quant_min) / 2);
    scale = at::clamp_min(scale, spec.eps);
    int64_t zp = 0;
    if (spec.dtype == c10::ScalarType::QUInt8) {
      // torch.ao: 128 for the full range, the middle of a custom one.
      zp = quant_min == 0 && quant_max == 255 ? 128
                                              : (quant_min + quant_max) / 2;
    }
    zero_point = at::full_like(scale, zp, at::kLong);
  } else {
    scale = (max_pos - min_neg) / static_cast<double>(quant_max - quant_min);
    scale = at::clamp_min(scale, spec.eps);
    zero_point = (quant_min - at::round(min_neg / scale)).to(at::kLong);
    zero_point = at::clamp(zero_point, quant_min, quant_max);
  }
  return {scale, zero_point};
}

// --- The histogram observer ------------------------------------------------
// State: [min, max, count_0, ..., count_{bins-1}], the counts over
// [min, max] in equal bins.
struct Histogram {
  double min, max;
  std::vector<double> counts;
};

Histogram read_histogram(const at::Tensor& state) {
  const at::Tensor s = state.to(at::kDouble).contiguous();
  const double* p = s.data_ptr<double>();
  Histogram h{p[0], p[1], std::vector<double>(p + 2, p + s.numel())};
  return h;
}

void write_histogram(const Histogram& h, const at::Tensor& state) {
  std::vector<double> values = {h.min, h.max};
  values.insert(values.end(), h.counts.begin(), h.counts.end());
  state.copy_(at::tensor(values, at::kDouble));
}

// The counts of `old` redistributed onto `bins` equal bins over [lo, hi]
// (which contains old's range), each old bin's count spread uniformly over
// its width.
std::vector<double> rebin(const Histogram& old, double lo, double hi,
                          size_t bins) {
  std::vector<double> out(bins, 0.0);
  const size_t n = old.counts.size();
  const double old_width = (old.max - old.min) / static_cast<double>(n);
  const double width = (hi - lo) / static_cast<double>(bins);
  for (size_t i = 0; i < n; ++i) {
    const double c = old.counts[i];
    if (c == 0) continue;
    if (old_width <= 0 || width <= 0) {
      const double at = width <= 0 ? 0 : (old.min - lo) / width;
      out[std::min(bins - 1, static_cast<size_t>(std::max(0.0, at)))] += c;
      continue;
    }
    const double a = old.min + old_width * static_cast<double>(i);
    const double b = a + old_width;
    size_t j = static_cast<size_t>(std::max(0.0, std::floor((a - lo) / width)));
    for (; j < bins; ++j) {
      const double ja = lo + width * static_cast<double>(j);
      const double jb = ja + width;
      if (ja >= b) break;
      const double overlap = std::min(b, jb) - std::max(a, ja);
      if (overlap > 0) out[j] += c * overlap / old_width;
    }
  }
  return out;
}

void observe_histogram(const at::Tensor& x, const at::Tensor& state) {
  const at::Tensor values = x.detach().to(at::kFloat);
  const auto [lo_t, hi_t] = at::aminmax(values);
  const double lo = lo_t.item<double>(), hi = hi_t.item<double>();
  TORCH_CHECK(std::isfinite(lo) && std::isfinite(hi),
              "the histogram observer saw a value that is not finite (",
              lo, " to ", hi, "): calibrate on finite inputs");
  Histogram h = read_histogram(state);
  const size_t bins = h.counts.size();
  auto counts_of = [&](double a, double b) {
    std::vector<double> out(bins, 0.0);
    if (b > a) {
      const at::Tensor c =
          at::histc(values, static_cast<int64_t>(bins), a, b).to(at::kDouble);
      const double* p = c.data_ptr<double>();
      std::copy(p, p + bins, out.begin());
    } else {
      out[0] = static_cast<double>(values.numel());
    }
    return out;
  };
  const bool empty = !(h.min <= h.max);
  if (empty || h.min == h.max) {
    // First data (or only one value so far: start over, as torch.ao does).
    const double keep = empty ? 0.0 : h.counts[0];
    const double new_lo = empty ? lo : std::min(lo, h.min);
    const double new_hi = empty ? hi : std::max(hi, h.max);
    h.counts = counts_of(new_lo, new_hi);
    if (keep > 0) {
      Histogram point{h.min, h.max, std::vector<double>(bins, 0.0)};
      point.counts[0] = keep;
      std::vector<double> moved = rebin(point, new_lo, new_hi, bins);
      for (size_t i = 0; i < bins; ++i) h.counts[i] += moved[i];
    }
    h.min = new_lo;
    h.max = new_hi;
  } else if (lo >= h.min && hi <= h.max) {
    std::vector<double> add = counts_of(h.min, h.max);
    for (size_t i = 0; i < bins; ++i) h.counts[i] += add[i];
  } else {
    const double new_lo = std::min(lo, h.min), new_hi = std::max(hi, h.max);
    std::vector<double> counts = rebin(h, new_lo, new_hi, bins);
    std::vector<double> add = counts_of(new_lo, new_hi);
    for (size_t i = 0; i < bins; ++i) counts[i] += add[i];
    h = {new_lo, new_hi, std::move(counts)};
  }
  write_histogram(h, state);
}

// torch.ao's HistogramObserver._compute_quantization_error: the L2 error of
// quantizing the histogram with its bins [start, end] mapped onto dst_bins
// levels.
double quantization_error(const Histogram& h, int64_t start, int64_t end,
                          int64_t dst_bins) {
  const int64_t bins = static_cast<int64_t>(h.counts.size());
  const double bin_width = (h.max - h.min) / static_cast<double>(bins);
  const double dst_width = bin_width * static_cast<double>(end - start + 1) /
                           static_cast<double>(dst_bins);
  if (dst_width == 0.0) return 0.0;
  auto norm = [](double begin, double end, double density) {
    return density * (end * end * end - begin * begin * begin) / 3;
  };
  double total = 0;
  for (int64_t i = 0; i < bins; ++i) {
    const double density = h.counts[i] / bin_width;
    if (density == 0) continue;
    const double src_begin = static_cast<double>(i - start) * bin_width;
    const double src_end = src_begin + bin_width;
    const double dst_of_begin = std::clamp(std::floor(src_begin / dst_width), 0.0,
                                           static_cast<double>(dst_bins - 1));
    const double dst_of_end = std::clamp(std::floor(src_end / dst_width), 0.0,
                                         static_cast<double>(dst_bins - 1));
    const double begin_center = (dst_of_begin + 0.5) * dst_width;
    total += norm(src_begin - begin_center, dst_width / 2, density);
    total += (dst_of_end - dst_of_begin - 1) *
             norm(-dst_width / 2, dst_width / 2, density);
    const double end_center = dst_of_end * dst_width + dst_width / 2;
    total += norm(-dst_width / 2, src_end - end_center, density);
  }
  return total;
}

// torch.ao's HistogramObserver._non_linear_param_search: narrows [min, max]
// from either end while the L2 error falls.
std::pair<double, double> search_range(const Histogram& h, int64_t dst_bins) {
  const int64_t bins = static_cast<int64_t>(h.counts.size());
  const double bin_width = (h.max - h.min) / static_cast<double>(bins);
  std::vector<double> cumulative(h.counts.size());
  double total = 0;
  for (int64_t i = 0; i < bins; ++i) {
    total += h.counts[i];
    cumulative[i] = total;
  }
  const double step = 1e-5;
  double alpha = 0.0, beta = 1.0;
  int64_t start = 0, end = bins - 1;
  double norm_min = std::numeric_limits<double>::infinity();
  while (alpha < beta) {
    const double next_alpha = alpha + step, next_beta = beta - step;
    int64_t l = start, r = end;
    while (l < end && cumulative[l] < next_alpha * total) ++l;
    while (r > start && cumulative[r] > next_beta * total) --r;
    int64_t next_start = start, next_end = end;
    if ((l - start) > (end - r)) {
      next_start = l;
      alpha = next_alpha;
    } else {
      next_end = r;
      beta = next_beta;
    }
    if (next_start == start && next_end == end) continue;
    const double norm = quantization_error(h, next_start, next_end, dst_bins);
    if (norm > norm_min) break;
    norm_min = norm;
    start = next_start;
    end = next_end;
  }
  return {h.min + bin_width * static_cast<double>(start),
          h.min + bin_width * static_cast<double>(end + 1)};
}

void check_state(const ObserverSpec& spec, const at::Tensor& state) {
  TORCH_CHECK(state.defined() && state.scalar_type() == at::kFloat &&
                  state.is_contiguous(),
              "fx_quant::observe: the state of a ", spec.kind_name(),
              " observer must be a contiguous float32 tensor made by prepare_fx");
  if (spec.kind == ObserverKind::kHistogram) {
    TORCH_CHECK(state.dim() == 1 && state.numel() > 2,
                "fx_quant::observe: a histogram observer's state holds min, "
                "max and the bins");
  } else if (spec.per_channel()) {
    TORCH_CHECK(state.dim() == 2 && state.size(0) == 2,
                "fx_quant::observe: a per-channel observer's state is [2, C]");
  } else {
    TORCH_CHECK(state.numel() == 2,
                "fx_quant::observe: a min/max observer's state is [min, max]");
  }
}

// Each channel's minimum and maximum of `x`, for a per-channel `state`.
std::tuple<at::Tensor, at::Tensor> channel_ranges(const ObserverSpec& spec,
                                                  const at::Tensor& x,
                                                  const at::Tensor& state) {
  const int64_t c = channels_of(spec, x.sizes());
  TORCH_CHECK(c == state.size(1), "fx_quant::observe: the value has ", c,
              " channels on axis ", spec.ch_axis, " but the observer ",
              state.size(1));
  return at::aminmax(
      x.detach().to(at::kFloat).transpose(0, spec.ch_axis).reshape({c, -1}), 1);
}

}  // namespace

at::Tensor make_observer_state(const ObserverSpec& spec,
                               at::IntArrayRef sizes) {
  switch (spec.kind) {
    case ObserverKind::kHistogram: {
      at::Tensor s = at::zeros({spec.bins + 2});
      s[0] = kInf;
      s[1] = -kInf;
      return s;
    }
    case ObserverKind::kFixedQParams:
      if (!spec.per_channel()) return at::tensor({1.0f, 0.0f});
      [[fallthrough]];
    case ObserverKind::kPerChannelMinMax:
    case ObserverKind::kMovingAveragePerChannelMinMax: {
      const int64_t c = channels_of(spec, sizes);
      at::Tensor s = at::empty({2, c});
      s[0].fill_(kInf);
      s[1].fill_(-kInf);
      return s;
    }
    default:
      return at::tensor({kInf, -kInf});
  }
}

void observe(const ObserverSpec& spec, const at::Tensor& x,
             const at::Tensor& state) {
  check_state(spec, state);
  if (x.numel() == 0) return;
  at::NoGradGuard no_grad;
  switch (spec.kind) {
    case ObserverKind::kFixedQParams:
      return;
    case ObserverKind::kHistogram:
      observe_histogram(x, state);
      return;
    case ObserverKind::kPerChannelMinMax: {
      const auto [lo, hi] = channel_ranges(spec, x, state);
      state[0].copy_(at::minimum(state[0], lo));
      state[1].copy_(at::maximum(state[1], hi));
      return;
    }
    case ObserverKind::kMovingAveragePerChannelMinMax:
    case ObserverKind::kMovingAverageMinMax: {
      const auto [lo, hi] = spec.per_channel() ? channel_ranges(spec, x, state)
                                               : at::aminmax(x.detach().to(at::kFloat));
      if (!observed(spec, state)) {
        state[0].copy_(lo);
        state[1].copy_(hi);
      } else {
        const double c = spec.averaging_constant;
        state[0].copy_(state[0] + c * (lo - state[0]));
        state[1].copy_(state[1] + c * (hi - state[1]));
      }
      return;
    }
    case ObserverKind::kMinMax: {
      const auto [lo, hi] = at::aminmax(x.detach().to(at::kFloat));
      state[0].copy_(at::minimum(state[0], lo));
      state[1].copy_(at::maximum(state[1], hi));
      return;
    }
  }
}

at::Tensor fixed_qparams_state(const at::Tensor& scale,
                               const at::Tensor& zero_point, bool per_channel) {
  at::Tensor s = at::stack({scale.to(at::kFloat).reshape({-1}),
                            zero_point.to(at::kFloat).reshape({-1})});
  return (per_channel ? s : s.reshape({2})).contiguous();
}

bool observed(const ObserverSpec& spec, const at::Tensor& state) {
  check_state(spec, state);
  if (spec.kind == ObserverKind::kFixedQParams) return true;
  const at::Tensor lo = state.select(0, 0), hi = state.select(0, 1);
  if (spec.per_channel()) {
    return at::all(lo <= hi).item<bool>();
  }
  return lo.item<float>() <= hi.item<float>();
}

QParams calculate_qparams(const ObserverSpec& spec, const at::Tensor& state) {
  check_state(spec, state);
  if (spec.kind == ObserverKind::kHistogram) {
    const Histogram h = read_histogram(state);
    const auto [quant_min, quant_max] = spec.range();
    const int64_t dst_bins = quant_max - quant_min + 1;
    auto [lo, hi] = h.max > h.min ? search_range(h, dst_bins)
                                  : std::pair<double, double>{h.min, h.max};
    return qparams_from_range(spec, at::scalar_tensor(lo, at::kDouble),
                              at::scalar_tensor(hi, at::kDouble));
  }
  const at::Tensor s = state.to(at::kDouble);
  if (spec.kind == ObserverKind::kFixedQParams) {
    return {s.select(0, 0).clone(), at::round(s.select(0, 1)).to(at::kLong)};
  }
  return qparams_from_range(spec, s.select(0, 0), s.select(0, 1));
}

at::Tensor quantize(const ObserverSpec& spec, const at::Tensor& x,
                    const QParams& q) {
  if (q.per_channel()) {
    return at::quantize_per_channel(x.to(at::kFloat), q.scale,
                                    q.zero_point, spec.ch_axis, spec.dtype);
  }
  return at::quantize_per_tensor(x.to(at::kFloat), q.scale_value(),
                                 q.zero_point_value(), spec.dtype);
}

Kwargs observer_kwargs(const ObserverSpec& spec) {
  const auto [quant_min, quant_max] = spec.range();
  Kwargs k = {{"observer", spec.kind_name()},
              {"dtype", spec.dtype},
              {"qscheme", spec.qscheme_name()},
              {"quant_min", quant_min},
              {"quant_max", quant_max},
              {"eps", spec.eps}};
  if (spec.kind == ObserverKind::kMovingAverageMinMax ||
      spec.kind == ObserverKind::kMovingAveragePerChannelMinMax) {
    k.emplace_back("averaging_constant", spec.averaging_constant);
  }
  if (spec.per_channel()) k.emplace_back("ch_axis", spec.ch_axis);
  return k;
}

ObserverSpec spec_from_arguments(const std::string& observer,
                                 c10::ScalarType dtype,
                                 const std::string& qscheme,
                                 int64_t quant_min, int64_t quant_max,
                                 double eps, double averaging_constant,
                                 int64_t ch_axis) {
  ObserverSpec s;
  if (observer == "min_max") {
    s.kind = ObserverKind::kMinMax;
  } else if (observer == "moving_average_min_max") {
    s.kind = ObserverKind::kMovingAverageMinMax;
  } else if (observer == "histogram") {
    s.kind = ObserverKind::kHistogram;
  } else if (observer == "per_channel_min_max") {
    s.kind = ObserverKind::kPerChannelMinMax;
  } else if (observer == "moving_average_per_channel_min_max") {
    s.kind = ObserverKind::kMovingAveragePerChannelMinMax;
  } else if (observer == "fixed_qparams") {
    s.kind = ObserverKind::kFixedQParams;
  } else {
    throw QuantizationError(absl::StrCat(
        "unknown observer '", observer,
        "': use min_max, moving_average_min_max, histogram, "
        "per_channel_min_max, moving_average_per_channel_min_max or "
        "fixed_qparams"));
  }
  if (dtype != c10::ScalarType::QUInt8 && dtype != c10::ScalarType::QInt8) {
    throw QuantizationError(absl::StrCat("observer dtype ", c10::toString(dtype),
                                         ": use torch.quint8 or torch.qint8"));
  }
  s.dtype = dtype;
  if (qscheme == "per_tensor_affine") {
    s.qscheme = QScheme::kPerTensorAffine;
  } else if (qscheme == "per_tensor_symmetric") {
    s.qscheme = QScheme::kPerTensorSymmetric;
  } else if (qscheme == "per_channel_affine") {
    s.qscheme = QScheme::kPerChannelAffine;
  } else if (qscheme == "per_channel_symmetric") {
    s.qscheme = QScheme::kPerChannelSymmetric;
  } else {
    throw QuantizationError(absl::StrCat("unknown qscheme '", qscheme, "'"));
  }
  const bool per_channel_observer =
      s.kind == ObserverKind::kPerChannelMinMax ||
      s.kind == ObserverKind::kMovingAveragePerChannelMinMax;
  if (s.kind != ObserverKind::kFixedQParams && s.per_channel() != per_channel_observer) {
    throw QuantizationError(absl::StrCat(
        "qscheme ", qscheme, " does not go with the ", observer,
        " observer: per-channel schemes need per_channel_min_max or "
        "moving_average_per_channel_min_max"));
  }
  if (!(quant_min < quant_max)) {
    throw QuantizationError(absl::StrCat("quant_min (", quant_min,
                                         ") must be below quant_max (",
                                         quant_max, ")"));
  }
  s.quant_min = quant_min;
  s.quant_max = quant_max;
  s.eps = eps;
  s.averaging_constant = averaging_constant;
  s.ch_axis = ch_axis;
  return s;
}

}  // namespace fx
