// ONNX mappings of aten's selections: argmax / argmin, the boolean
// reductions any / all and the logical operators, index_copy (the writes
// of a key/value cache at a position), indexing, and the selections whose
// size depends on data (nonzero, masked_select, a boolean mask).
#include <algorithm>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "fx/ir/operator_schemas.h"
#include "onnx/internal/mappings.h"

namespace fx::internal::onnx_ops {
namespace {

constexpr int32_t kBool = onnx::TensorProto::BOOL;
constexpr int64_t kInt64 = onnx::TensorProto::INT64;

// argmax / argmin(self, dim=None, keepdim=False): ONNX ArgMax / ArgMin, the
// first index of the extreme value as torch gives it; with no dim, over
// the flattened tensor.
OnnxMapping arg_extreme(const char* op_type) {
  return [op_type](OnnxBuilder& b) {
    CallArguments args(b.node());
    std::string self = b.value(args["self"]);
    int64_t dim = 0;
    bool keepdim = args.has("keepdim") && args["keepdim"].to_bool();
    if (args.has("dim") && !args["dim"].is_none()) {
      dim = axis(args["dim"].to_int(), rank_of(b, args["self"]));
    } else {
      if (keepdim) refuse(b, "keepdim without a dim does not map yet");
      const std::string flat = b.fresh(b.node().name() + "_flat");
      b.add("Reshape", {self, b.int64s({-1})}, flat);
      self = flat;
    }
    onnx::NodeProto& n = b.add(op_type, {self}, b.output());
    set_int(n, "axis", dim);
    set_int(n, "keepdims", keepdim ? 1 : 0);
    set_int(n, "select_last_index", 0);
  };
}

// any / all (of every element, or over a dim): the elements as bools
// counted (ReduceSum of int64, 0 over no elements), any being a count
// above 0 and all the count of falses being 0.
OnnxMapping any_or_all(bool all) {
  return [all](OnnxBuilder& b) {
    CallArguments args(b.node());
    const std::string& name = b.node().name();
    const int64_t rank = rank_of(b, args["self"]);
    std::string truth = value_as(b, args["self"], kBool);
    if (all) {
      const std::string negated = b.fresh(name + "_not");
      b.add("Not", {truth}, negated);
      truth = negated;
    }
    const std::string counted = b.fresh(name + "_int64");
    set_int(b.add("Cast", {truth}, counted), "to", kInt64);
    std::vector<int64_t> axes;
    bool keepdim = false;
    if (args.has("dim") && !args["dim"].is_none()) {
      axes.push_back(axis(args["dim"].to_int(), rank));
      keepdim = args["keepdim"].to_bool();
    } else {
      for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
    }
    const std::string count = b.fresh(name + "_count");
    set_int(b.add("ReduceSum", {counted, b.int64s(axes)}, count), "keepdims",
            keepdim ? 1 : 0);
    b.add(all ? "Equal" : "Greater", {count, b.int64s({0}, /*scalar=*/true)},
          b.output());
  };
}

// logical_and / or / xor: nonzero elements are true, as in torch.
OnnxMapping logical(const char* op_type) {
  return [op_type](OnnxBuilder& b) {
    CallArguments args(b.node());
    b.add(op_type,
          {value_as(b, args["self"], kBool), value_as(b, args["other"], kBool)},
          b.output());
  };
}

// index_copy(self, dim, index, source): self with the slices of `source`
// along dim written at `index` (1-d). ScatterElements, its indices `index`
// broadcast to the source's shape along dim.
void index_copy(OnnxBuilder& b) {
  CallArguments args(b.node());
  const std::string& name = b.node().name();
  const int64_t rank = rank_of(b, args["self"]);
  if (rank == 0) refuse(b, "index_copy of a 0-dimensional tensor");
  if (rank_of(b, args["index"]) != 1) {
    refuse(b, "index_copy with an index of other than 1 dimension");
  }
  const int64_t dim = axis(args["dim"].to_int(), rank);
  const std::string source = b.value(args["source"]);
  std::vector<int64_t> along(rank, 1);
  along[dim] = -1;
  const std::string shaped = b.fresh(name + "_index");
  b.add("Reshape", {b.value(args["index"]), b.int64s(along)}, shaped);
  const std::string source_shape = b.fresh(name + "_source_shape");
  b.add("Shape", {source}, source_shape);
  const std::string indices = b.fresh(name + "_indices");
  b.add("Expand", {shaped, source_shape}, indices);
  set_int(b.add("ScatterElements", {b.value(args["self"]), indices, source},
                b.output()),
          "axis", dim);
}

// index.Tensor with one index tensor, the others None before it: an
// integer index is a Gather; a boolean mask (its size data-dependent) a
// Compress of the dimensions it covers, merged into one first.
void index(OnnxBuilder& b) {
  CallArguments args(b.node());
  const std::vector<Argument>& indices = args["indices"].elements();
  int64_t at = -1;
  for (size_t i = 0; i < indices.size(); ++i) {
    if (indices[i].is_none()) continue;
    if (at >= 0) refuse(b, "indexing by several tensors does not map yet");
    at = static_cast<int64_t>(i);
  }
  if (at < 0) refuse(b, "indexing by no tensor");
  const Argument& index = indices[at];
  const c10::ScalarType dtype = meta_of(b, index.to_node()).dtype;
  if (dtype == c10::ScalarType::Long || dtype == c10::ScalarType::Int) {
    set_int(b.add("Gather", {b.value(args["self"]), b.value(index)}, b.output()),
            "axis", at);
    return;
  }
  if (dtype != c10::ScalarType::Bool && dtype != c10::ScalarType::Byte) {
    refuse(b, "indexing by a tensor of neither integers nor booleans");
  }
  const std::string& name = b.node().name();
  const int64_t k = rank_of(b, index);
  const int64_t rank = rank_of(b, args["self"]);
  std::string self = b.value(args["self"]);
  if (k != 1) {
    // [before..., -1, after...]: the mask's dimensions as one.
    const std::string whole = b.fresh(name + "_shape");
    b.add("Shape", {self}, whole);
    const std::string before = b.fresh(name + "_before");
    b.add("Slice", {whole, b.int64s({0}), b.int64s({at})}, before);
    const std::string after = b.fresh(name + "_after");
    b.add("Slice", {whole, b.int64s({std::min(at + k, rank)}), b.int64s({rank})},
          after);
    const std::string shape = b.fresh(name + "_merged_shape");
    set_int(b.add("Concat", {before, b.int64s({-1}), after}, shape), "axis", 0);
    const std::string merged = b.fresh(name + "_merged");
    b.add("Reshape", {self, shape}, merged);
    self = merged;
  }
  const std::string flat = b.fresh(name + "_mask");
  b.add("Reshape", {value_as(b, index, kBool), b.int64s({-1})}, flat);
  set_int(b.add("Compress", {self, flat}, b.output()), "axis", at);
}

// nonzero(self): ONNX NonZero gives [rank, n], torch [n, rank].
void nonzero(OnnxBuilder& b) {
  CallArguments args(b.node());
  const std::string found = b.fresh(b.node().name() + "_by_dimension");
  b.add("NonZero", {b.value(args["self"])}, found);
  set_ints(b.add("Transpose", {found}, b.output()), "perm", {1, 0});
}

// masked_select(self, mask): both broadcast (Expand broadcasts both ways),
// then the elements where the mask holds, flattened (Compress without an
// axis).
void masked_select(OnnxBuilder& b) {
  CallArguments args(b.node());
  const std::string& name = b.node().name();
  const std::string self = b.value(args["self"]);
  const std::string mask = value_as(b, args["mask"], kBool);
  const std::string self_shape = b.fresh(name + "_self_shape");
  b.add("Shape", {self}, self_shape);
  const std::string mask_shape = b.fresh(name + "_mask_shape");
  b.add("Shape", {mask}, mask_shape);
  const std::string values = b.fresh(name + "_values");
  b.add("Expand", {self, mask_shape}, values);
  const std::string where = b.fresh(name + "_where");
  b.add("Expand", {mask, self_shape}, where);
  const std::string flat = b.fresh(name + "_flat_mask");
  b.add("Reshape", {where, b.int64s({-1})}, flat);
  b.add("Compress", {values, flat}, b.output());
}

}  // namespace

void add_selection_mappings(Mappings* m) {
  (*m)["aten::index.Tensor"] = index;
  (*m)["aten::nonzero"] = nonzero;
  (*m)["aten::masked_select"] = masked_select;
  (*m)["aten::argmax"] = arg_extreme("ArgMax");
  (*m)["aten::argmin"] = arg_extreme("ArgMin");
  (*m)["aten::any"] = any_or_all(false);
  (*m)["aten::any.dim"] = any_or_all(false);
  (*m)["aten::all"] = any_or_all(true);
  (*m)["aten::all.dim"] = any_or_all(true);
  (*m)["aten::logical_and"] = logical("And");
  (*m)["aten::logical_or"] = logical("Or");
  (*m)["aten::logical_xor"] = logical("Xor");
  (*m)["aten::index_copy"] = index_copy;
}

}  // namespace fx::internal::onnx_ops
