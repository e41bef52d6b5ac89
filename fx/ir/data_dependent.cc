#include "fx/ir/data_dependent.h"

#include <ATen/ExpandUtils.h>
#include <ATen/core/Tensor.h>

#include "absl/strings/str_cat.h"
#include "fx/ir/errors.h"
#include "fx/ir/meta.h"
#include "fx/ir/node.h"

namespace fx {

std::vector<std::vector<int64_t>> DataDependentSize::sizes_at(
    int64_t size) const {
  std::vector<std::vector<int64_t>> out = shapes;
  for (auto& s : out) {
    for (int64_t& v : s) {
      if (v == -1) v = size;
    }
  }
  return out;
}

std::vector<std::vector<int64_t>> DataDependentSize::strides_at(
    int64_t size) const {
  std::vector<std::vector<int64_t>> out;
  for (const std::vector<int64_t>& shape : sizes_at(size)) {
    std::vector<int64_t> strides =
        strides_for(shape, c10::MemoryFormat::Contiguous);
    if (transposed && out.empty() && shape.size() == 2) {
      strides = {1, shape[0]};
    }
    out.push_back(std::move(strides));
  }
  return out;
}

namespace {

// The operators above that ATen does not tag dynamic_output_shape
// (torchvision's, and the ones it decomposes); `args` counts the call's
// arguments (where(mask) has one; where(cond, a, b) is elementwise).
bool untagged(const std::string& name, const std::string& overload,
              size_t args) {
  return overload.empty() && ((name == "aten::where" && args == 1) ||
                              name == "aten::nonzero_numpy" ||
                              name == "torchvision::nms");
}

const at::Tensor* tensor_arg(const std::vector<c10::IValue>& args,
                             size_t i) {
  if (i >= args.size() || !args[i].isTensor()) return nullptr;
  const at::Tensor& t = args[i].toTensor();
  return t.defined() ? &t : nullptr;
}

bool flag(const std::vector<c10::IValue>& args, size_t i) {
  return i < args.size() && args[i].isBool() && args[i].toBool();
}

// values [u], inverse as self (or [0]), counts [u] (or [0]).
DataDependentSize unique(const at::Tensor& self, bool inverse, bool counts,
                         bool has_counts) {
  DataDependentSize d;
  d.max = self.numel();
  d.shapes.push_back({-1});
  d.dtypes.push_back(self.scalar_type());
  d.shapes.push_back(inverse ? self.sizes().vec() : std::vector<int64_t>{0});
  d.dtypes.push_back(at::kLong);
  if (has_counts) {
    d.shapes.push_back(counts ? std::vector<int64_t>{-1}
                              : std::vector<int64_t>{0});
    d.dtypes.push_back(at::kLong);
  }
  return d;
}

}  // namespace

std::optional<DataDependentSize> data_dependent_size(
    const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
  const std::string& name = schema.name();
  const std::string& overload = schema.overload_name();
  const at::Tensor* self = tensor_arg(args, 0);
  if (self == nullptr) return std::nullopt;
  // The operator as errors name it (built only for one).
  auto what = [&] {
    return absl::StrCat(name, overload.empty() ? "" : ".", overload);
  };
  if (name == "aten::nonzero" && overload.empty()) {
    DataDependentSize d;
    d.max = self->numel();
    d.shapes = {{-1, self->dim()}};
    d.dtypes = {at::kLong};
    d.transposed = true;
    return d;
  }
  if (name == "aten::masked_select" && overload.empty()) {
    const at::Tensor* mask = tensor_arg(args, 1);
    if (mask == nullptr) return std::nullopt;
    DataDependentSize d;
    std::vector<int64_t> shape = at::infer_size(self->sizes(), mask->sizes());
    d.max = 1;
    for (int64_t s : shape) d.max *= s;
    d.shapes = {{-1}};
    d.dtypes = {self->scalar_type()};
    return d;
  }
  if (name == "aten::index" && overload == "Tensor") {
    if (args.size() != 2 || !args[1].isList()) return std::nullopt;
    // One boolean mask among Nones: x.index({mask}), x.index({Slice(), mask}).
    int64_t position = 0;  // of self's dimensions, where the mask starts
    const at::Tensor* mask = nullptr;
    int64_t mask_at = 0;
    bool integers = false;
    for (const c10::IValue& index : args[1].toListRef()) {
      const bool none = index.isNone() ||
                        (index.isTensor() && !index.toTensor().defined());
      if (none) {
        ++position;
        continue;
      }
      if (!index.isTensor()) return std::nullopt;
      const at::Tensor& t = index.toTensor();
      const bool boolean =
          t.scalar_type() == at::kBool || t.scalar_type() == at::kByte;
      if (!boolean) {
        integers = true;
        position += 1;
        continue;
      }
      if (mask != nullptr) {
        throw GraphError(absl::StrCat(
            what(), " indexes with two boolean masks, whose result's size fx "
            "does not follow: combine them into one mask first"));
      }
      mask = &t;
      mask_at = position;
      position += t.dim();
    }
    // Integer indices alone: the sizes follow from their shapes.
    if (mask == nullptr) return std::nullopt;
    if (integers) {
      throw GraphError(absl::StrCat(
          what(), " indexes with a boolean mask and integer indices "
          "together, whose result's size fx does not follow: index "
          "with the mask alone, or take torch::nonzero(mask) first"));
    }
    if (mask_at + mask->dim() > self->dim()) {
      return std::nullopt;  // the operator's own error, when it runs
    }
    DataDependentSize d;
    d.max = mask->numel();
    std::vector<int64_t> shape(self->sizes().begin(),
                               self->sizes().begin() + mask_at);
    shape.push_back(-1);
    shape.insert(shape.end(), self->sizes().begin() + mask_at + mask->dim(),
                 self->sizes().end());
    d.shapes = {shape};
    d.dtypes = {self->scalar_type()};
    d.dim = mask_at;
    return d;
  }
  if (untagged(name, overload, args.size()) && name != "torchvision::nms") {
    DataDependentSize d;
    d.max = self->numel();
    d.list = true;
    for (int64_t i = 0; i < self->dim(); ++i) {
      d.shapes.push_back({-1});
      d.dtypes.push_back(at::kLong);
    }
    if (d.shapes.empty()) return std::nullopt;  // a 0-d mask: torch's error
    return d;
  }
  if (name == "torchvision::nms" && overload.empty()) {
    DataDependentSize d;
    d.max = self->dim() > 0 ? self->size(0) : 0;
    d.shapes = {{-1}};
    d.dtypes = {at::kLong};
    return d;
  }
  if (name == "aten::_unique2" && overload.empty()) {
    return unique(*self, flag(args, 2), flag(args, 3), /*has_counts=*/true);
  }
  if (name == "aten::_unique" && overload.empty()) {
    return unique(*self, flag(args, 2), false, /*has_counts=*/false);
  }
  if (name == "aten::unique_consecutive" && overload.empty()) {
    if (args.size() > 3 && !args[3].isNone()) {
      throw GraphError(absl::StrCat(
          what(), " along a dimension returns sizes fx does not follow: "
          "call it without dim (on the flattened tensor)"));
    }
    return unique(*self, flag(args, 1), flag(args, 2), /*has_counts=*/true);
  }
  return std::nullopt;
}

std::string data_dependent_symbol(size_t k,
                                  const std::vector<DynamicDim>& taken) {
  for (size_t i = k;; ++i) {
    std::string symbol = absl::StrCat("u", i);
    bool used = false;
    for (const DynamicDim& d : taken) used = used || d.symbol == symbol;
    if (!used) return symbol;
  }
}

bool returns_data_dependent_size(const Node& n) {
  if (n.op() != Opcode::kCallFunction || !n.target().is_operator()) {
    return false;
  }
  const c10::OperatorHandle& op = n.target().op();
  const std::string& name = op.schema().name();
  if (untagged(name, op.schema().overload_name(),
               n.args().size() + n.kwargs().size())) {
    return true;
  }
  if (!op.hasTag(at::Tag::dynamic_output_shape)) return false;
  if (name != "aten::index") return true;
  // Its indices (an index of unknown dtype counts as a mask).
  if (n.args().size() < 2 || !n.args()[1].is_sequence()) return true;
  bool mask = false;
  for (const Argument& index : n.args()[1].elements()) {
    if (!index.is_node()) continue;
    const TensorMeta* meta = index.to_node()->meta().get(kTensorMeta);
    mask = mask || meta == nullptr || meta->dtype == at::kBool ||
           meta->dtype == at::kByte;
  }
  return mask;
}

}  // namespace fx
