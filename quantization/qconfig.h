// Quantization configuration, as torch.ao.quantization has it: an observer
// spec says how a value's range is recorded and turned into a scale and zero
// point; a QConfig pairs one for activations with one for weights; a
// QConfigMapping chooses a QConfig (or none: "do not quantize") for each
// operation, by node name, by module path, by operator, or globally.
//
//   fx::QConfigMapping mapping = fx::get_default_qconfig_mapping("onednn");
//   mapping.set_module_name("classifier", std::nullopt)   // keep it float
//          .set_object_type("aten::add.Tensor", fx::default_qconfig("onednn"));
//
// Engines: "onednn" (x86) and "qnnpack" (ARM), the two Debian's libtorch
// has; any other name is a QuantizationError naming them.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <c10/core/ScalarType.h>

#include "fx/ir/errors.h"

namespace fx {

class Node;

// A user-caused quantization failure: an unknown engine, convert before
// calibration, an observer that saw no data, a model in training mode.
class QuantizationError : public Error {
 public:
  using Error::Error;
};

enum class ObserverKind {
  kMinMax,               // torch.ao's MinMaxObserver
  kMovingAverageMinMax,  // MovingAverageMinMaxObserver
  kHistogram,            // HistogramObserver (L2-optimal range search)
  kPerChannelMinMax,     // PerChannelMinMaxObserver (weights)
  kMovingAveragePerChannelMinMax,  // MovingAveragePerChannelMinMaxObserver
  // Holds a scale and zero point instead of a range (torch.ao's
  // FixedQParamsObserver): what convert_fx reads from a QAT module's fake
  // quantizers, so that int8 uses the qparams training simulated.
  kFixedQParams,
};

enum class QScheme {
  kPerTensorAffine,
  kPerTensorSymmetric,
  kPerChannelAffine,
  kPerChannelSymmetric,
};

// How one value is observed and quantized (torch.ao's Observer.with_args).
struct ObserverSpec {
  ObserverKind kind = ObserverKind::kMinMax;
  c10::ScalarType dtype = c10::ScalarType::QUInt8;
  QScheme qscheme = QScheme::kPerTensorAffine;
  bool reduce_range = false;
  // The quantized range; unset: the dtype's (halved by reduce_range).
  std::optional<int64_t> quant_min, quant_max;
  double eps = 1.1920928955078125e-07;  // float32's epsilon
  double averaging_constant = 0.01;     // the moving-average observers
  int64_t bins = 2048;                  // kHistogram
  int64_t ch_axis = 0;                  // the per-channel observers

  // The effective range, e.g. [0, 255] for quint8.
  std::pair<int64_t, int64_t> range() const;
  // "histogram", "min_max", ...: the name the observer operator takes.
  std::string kind_name() const;
  std::string qscheme_name() const;
  bool per_channel() const;
  bool symmetric() const;
};

// torch.ao's observers with their default arguments.
ObserverSpec min_max_observer(c10::ScalarType dtype = c10::ScalarType::QUInt8);
ObserverSpec moving_average_min_max_observer(
    c10::ScalarType dtype = c10::ScalarType::QUInt8);
ObserverSpec histogram_observer(c10::ScalarType dtype = c10::ScalarType::QUInt8);
// qint8, per-tensor symmetric: torch.ao's default_weight_observer.
ObserverSpec default_weight_observer();
// qint8, per-channel symmetric on axis 0: default_per_channel_weight_observer.
ObserverSpec default_per_channel_weight_observer();
// The moving-average per-channel observer (quantization-aware training's
// per-channel weights), qint8, per-channel symmetric on axis 0.
ObserverSpec moving_average_per_channel_min_max_observer();

struct QConfig {
  ObserverSpec activation;
  ObserverSpec weight;
};

// torch.ao's get_default_qconfig(engine): histogram observers for
// activations (quint8, full range), per-channel symmetric qint8 weights for
// onednn, per-tensor symmetric for qnnpack. On a CPU without VNNI (below),
// onednn's activations take 7 bits (reduce_range), as torch.ao's x86 and
// fbgemm qconfigs do: its onednn qconfig only warns.
QConfig default_qconfig(const std::string& engine);

// torch.ao's get_default_qat_qconfig(engine) (version 1): what
// quantization-aware training fake-quantizes with (quantization/qat.h),
// each a FusedMovingAvgObsFakeQuantize: moving-average activations
// (quint8; 7 bits for onednn on a CPU without VNNI, as default_qconfig's,
// since the converted model runs on the same kernels), moving-average
// weights, qint8 symmetric, per channel for onednn and per tensor for
// qnnpack.
QConfig default_qat_qconfig(const std::string& engine);

// Whether this CPU has VNNI (AVX512-VNNI or AVX-VNNI), whose int8 dot
// products sum in 32 bits. Without it, oneDNN's int8 kernels add pairs of
// uint8 x int8 products in 16 bits, which saturate once activations above
// 127 meet weights near +-127 (an AVX2 machine): the onednn engine is then
// exact only for 7-bit activations.
bool cpu_has_vnni();

// The engines quantized kernels can run on here ("onednn", "qnnpack").
std::vector<std::string> available_engines();
// Throws QuantizationError naming the available engines unless `engine`
// is one of them.
void check_quantized_engine(const std::string& engine);
// Sets libtorch's quantized engine (at::globalContext().setQEngine) to
// `engine`; throws QuantizationError naming the available ones.
void set_quantized_engine(const std::string& engine);

// Which QConfig each operation gets, in increasing priority: global, by
// operator (an aten name such as "aten::conv2d", or a family such as
// "conv", "linear", "add": see prepare_fx), by module path (the path and
// everything below it, from the tracer's module meta; the longest matching
// prefix wins), by node name. std::nullopt means "do not quantize".
class QConfigMapping {
 public:
  using Entry = std::optional<QConfig>;

  QConfigMapping& set_global(Entry qconfig);
  QConfigMapping& set_object_type(const std::string& op, Entry qconfig);
  QConfigMapping& set_module_name(const std::string& path, Entry qconfig);
  QConfigMapping& set_node_name(const std::string& name, Entry qconfig);

  // The QConfig of `node`, whose operator belongs to `family`.
  Entry qconfig_for(const Node& node, const std::string& family) const;

  const std::string& engine() const { return engine_; }
  QConfigMapping& set_engine(const std::string& engine);

 private:
  Entry global_;
  std::map<std::string, Entry> by_op_, by_module_, by_node_;
  std::string engine_ = "onednn";
};

// torch.ao's get_default_qconfig_mapping(engine): default_qconfig(engine)
// globally. (sigmoid, hardsigmoid and tanh on quantized tensors give the
// fixed qparams torch.ao's mapping sets, 1/256 and 2/256: libtorch's
// quantized kernels choose them.) Throws QuantizationError for an unknown
// engine.
QConfigMapping get_default_qconfig_mapping(const std::string& engine);
// torch.ao's get_default_qat_qconfig_mapping(engine): default_qat_qconfig
// globally, for prepare_qat_fx.
QConfigMapping get_default_qat_qconfig_mapping(const std::string& engine);

}  // namespace fx
