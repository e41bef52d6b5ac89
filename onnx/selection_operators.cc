// ONNX mappings of aten's selections: argmax / argmin, the boolean
// reductions any / all and the logical operators, and index_copy (the
// writes of a key/value cache at a position).
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

}  // namespace

void add_selection_mappings(Mappings* m) {
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
