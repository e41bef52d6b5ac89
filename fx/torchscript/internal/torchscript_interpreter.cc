#include "fx/torchscript/internal/torchscript_interpreter.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/operator.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "fx/ir/errors.h"
#include "fx/ir/function.h"
#include "fx/ir/node.h"
#include "fx/trace/control_flow.h"
#include "fx/trace/tracer.h"

namespace fx::internal {
namespace {

using fx::Argument;
using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Stack;
using torch::jit::Value;
namespace attr = torch::jit::attr;
namespace prim = torch::jit::prim;

// A graph prepared to run: each value numbered (a slot in the call's
// frame), each operator looked up, each constant made, once per graph and
// trace (a graph is called many times: ResNet-50's 16 bottlenecks share
// one).
struct BlockPlan;
using Slots = c10::ArrayRef<uint32_t>;  // into GraphPlan::slot_table
struct Step {
  const Node* node = nullptr;
  // For a vararg operator (aten::format(str self, ...)): its operation
  // takes the number of inputs on top of the stack, as TorchScript's
  // interpreter pushes it.
  bool vararg = false;
  const c10::FunctionSchema* schema = nullptr;  // an operator's
  Slots inputs;
  Slots outputs;
  mutable std::optional<torch::jit::Operation> operation;  // an operator's
  c10::IValue constant;             // prim::Constant's
  // prim::GetAttr's slot and prim::CallMethod's and prim::CallFunction's
  // callee, when the graph's types tell them (not for interfaces).
  std::optional<size_t> attribute;
  torch::jit::GraphFunction* callee = nullptr;
  std::vector<BlockPlan> blocks;    // prim::If's and prim::Loop's
  // aten::Bool of a tensor whose result only decides a prim::If or a
  // prim::Loop: of a proxy, the tensor itself is kept, and the branch or
  // loop becomes fx::cond or fx::while_loop.
  bool defers_truth = false;
};
struct BlockPlan {
  Slots inputs;
  Slots outputs;
  std::vector<Step> steps;
};
struct GraphPlan {
  BlockPlan body;
  uint32_t slots = 0;
  // Every step's and block's slots, allocated once (reserved in full
  // before the Slots views into it are taken).
  std::vector<uint32_t> slot_table;
};

// The graph behind `function` (called by `call`, if given), or
// UnsupportedNode for a builtin.
torch::jit::GraphFunction* graph_function(torch::jit::Function& function,
                                          const Node* call = nullptr) {
  torch::jit::GraphFunction* out = torch::jit::tryToGraphFunction(function);
  if (!out) {
    throw UnsupportedNode(absl::StrCat(
        call ? absl::StrCat(call->kind().toQualString(), " of ") : "",
        function.qualname().qualifiedName()));
  }
  out->ensure_defined();
  return out;
}

class Planner {
 public:
  std::unique_ptr<GraphPlan> plan(const Graph& graph) {
    auto out = std::make_unique<GraphPlan>();
    table_ = &out->slot_table;
    table_->reserve(count(*graph.block()));
    out->body = block(*graph.block());
    out->slots = slots_;
    return out;
  }

 private:
  // The slot references in `b` and the blocks in it.
  static size_t count(const Block& b) {
    size_t n = b.inputs().size() + b.outputs().size();
    for (const Node* node : b.nodes()) {
      n += node->inputs().size() + node->outputs().size();
      for (const Block* inner : node->blocks()) n += count(*inner);
    }
    return n;
  }

  // A value's slot is its number in the graph (Value::unique()), dense in a
  // loaded graph.
  Slots slots(c10::ArrayRef<const Value*> values) {
    const size_t begin = table_->size();
    for (const Value* v : values) {
      table_->push_back(static_cast<uint32_t>(v->unique()));
      slots_ = std::max(slots_, table_->back() + 1);
    }
    return Slots(table_->data() + begin, values.size());
  }

  BlockPlan block(const Block& b) {
    BlockPlan out;
    out.inputs = slots(b.inputs());
    for (const Node* n : b.nodes()) out.steps.push_back(step(*n));
    out.outputs = slots(b.outputs());
    return out;
  }

  Step step(const Node& n) {
    Step out;
    out.node = &n;
    out.inputs = slots(n.inputs());
    for (const Block* b : n.blocks()) out.blocks.push_back(block(*b));
    out.outputs = slots(n.outputs());
    switch (n.kind()) {
      case prim::Constant:
        // A function constant is only read by prim::CallFunction, through
        // its type.
        if (!n.output()->type()->cast<c10::FunctionType>()) {
          out.constant = *torch::jit::toIValue(n.output());
        }
        break;
      case prim::GetAttr:
        if (auto type = n.input(0)->type()->cast<c10::ClassType>()) {
          out.attribute = type->getAttributeSlot(n.s(attr::name));
        }
        break;
      case prim::CallMethod:
        if (auto type = n.input(0)->type()->cast<c10::ClassType>()) {
          out.callee = graph_function(type->getMethod(n.s(attr::name)), &n);
        }
        break;
      case prim::CallFunction:
        out.callee = graph_function(
            *n.input(0)->type()->expectRef<c10::FunctionType>().function(),
            &n);
        break;
      case prim::SetAttr:
      case prim::CreateObject:
      case prim::If:
      case prim::Loop:
      case prim::ListConstruct:
      case prim::ListUnpack:
      case prim::TupleConstruct:
      case prim::TupleUnpack:
      case prim::DictConstruct:
      case prim::Uninitialized:
      case prim::NumToTensor:
      case c10::aten::warn:
      case prim::isinstance:
        break;
      default: {
        const torch::jit::Operator* op = n.maybeOperator();
        if (!op) throw UnsupportedNode(n.kind().toQualString());
        out.defers_truth = decides_control_flow_only(n);
        out.operation = op->getOperation(&n);
        out.vararg = op->schema().is_vararg();
        out.schema = &op->schema();
      }
    }
    return out;
  }

  // aten::Bool(Tensor) whose every use is a prim::If's condition, a
  // prim::Loop's first condition or the condition its body returns.
  static bool decides_control_flow_only(const Node& n) {
    if (n.kind() != c10::aten::Bool || n.inputs().size() != 1 ||
        n.input(0)->type()->kind() != c10::TypeKind::TensorType) {
      return false;
    }
    for (const torch::jit::Use& use : n.output()->uses()) {
      const Node* user = use.user;
      const bool decides =
          (user->kind() == prim::If && use.offset == 0) ||
          (user->kind() == prim::Loop && use.offset == 1) ||
          (user->kind() == prim::Return && use.offset == 0 &&
           user->owningBlock()->owningNode() != nullptr &&
           user->owningBlock()->owningNode()->kind() == prim::Loop);
      if (!decides) return false;
    }
    return n.output()->hasUses();
  }

  std::vector<uint32_t>* table_ = nullptr;
  uint32_t slots_ = 0;
};

// A tensor the trace records (a proxy has no storage).
bool is_proxy(const c10::IValue& v) {
  return v.isTensor() && v.toTensor().defined() &&
         !v.toTensor().has_storage();
}

// Values passed between frames: the values and, with size tracking, their
// sizes (see Frame::sizes), one per value, or none.
struct Values {
  Stack values;
  std::vector<Argument> sizes;
};

// The call's values, one per slot.
struct Frame {
  std::vector<c10::IValue> values;
  // With size tracking, for each value that holds sizes the program
  // computed from a proxy: the value as an Argument with their nodes in
  // place of those ints (%B for an int, [%B, 4] for an int list, a tuple);
  // None otherwise. Empty without size tracking.
  std::vector<Argument> sizes;
};

// An int argument, or a list of them (optional or not): what a size node
// may stand in for.
bool takes_ints(const c10::TypePtr& type) {
  c10::TypePtr t = type;
  if (auto optional = t->cast<c10::OptionalType>()) t = optional->getElementType();
  if (auto list = t->cast<c10::ListType>()) t = list->getElementType();
  return t->kind() == c10::TypeKind::IntType ||
         t->kind() == c10::TypeKind::SymIntType;
}

// The TorchScript value's name for its size node ("T" for `T = x.size(1)`,
// whose value TorchScript calls T.1), or "" for the default.
std::string size_name(const Value* v) {
  if (!v->hasDebugName()) return "";
  const std::string name = v->debugNameBase();
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) {
    return "";
  }
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return "";
  }
  return name;
}

// The value of a 0-dimensional integer tensor that has data, read without
// an operator call (which the trace would record), or nullopt.
std::optional<int64_t> int_in(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage() || t.dim() != 0 || !t.is_cpu()) {
    return std::nullopt;
  }
  switch (t.scalar_type()) {
    case at::kLong: return *static_cast<const int64_t*>(t.data_ptr());
    case at::kInt: return *static_cast<const int32_t*>(t.data_ptr());
    default: return std::nullopt;
  }
}

// The node's kind and source line, for TraceStats::specialized_by:
// "aten::eq at model.py:12".
std::string where(const Node& n) {
  torch::jit::SourceRange range =
      n.sourceRange().findSourceRangeThatGenerated().value_or(n.sourceRange());
  std::string out = n.kind().toQualString();
  if (auto place = range.file_line_col()) {
    const std::string& file = std::get<0>(*place);
    out += absl::StrCat(" at ", file.substr(file.rfind('/') + 1), ":",
                        std::get<1>(*place));
  }
  return out;
}

// An int or a list or tuple of them, as an Argument (other values as None:
// a size node never stands in for them).
Argument literal(const c10::IValue& v) {
  if (v.isInt()) return v.toInt();
  if (v.isList() || v.isTuple()) {
    std::vector<Argument> elements;
    for (const c10::IValue& e :
         v.isList() ? v.toListRef().vec() : v.toTupleRef().elements().vec()) {
      elements.push_back(literal(e));
    }
    return v.isList() ? Argument::list(std::move(elements))
                      : Argument::tuple(std::move(elements));
  }
  return Argument();
}

class Interpreter {
 public:
  // With `tracer`, sizes read from proxies and the integer arithmetic on
  // them are recorded as sym_* nodes (see run_torchscript_method).
  explicit Interpreter(Tracer* tracer) : tracer_(tracer) {}

  Values call(const torch::jit::GraphFunction& function, Values args) {
    const GraphPlan& plan = this->plan(*function.graph());
    Frame frame;
    frame.values.resize(plan.slots);
    if (tracer_ != nullptr) frame.sizes.resize(plan.slots);
    bind(plan.body.inputs, std::move(args), &frame);
    frames_.push_back({&function, nullptr, std::move(next_path_)});
    next_path_.clear();
    run(plan.body, &frame);
    frames_.pop_back();
    return read(plan.body.outputs, frame);
  }

 private:
  // A call in progress, for error messages: its function and, while it
  // calls another, the calling node.
  struct Call {
    const torch::jit::GraphFunction* function;
    const Node* at;
    // The module path of the method's self ("" for the root, "features.3"),
    // followed through prim::GetAttr of submodules.
    std::string path;
  };

  const GraphPlan& plan(const Graph& graph) {
    auto it = plans_.find(&graph);
    if (it == plans_.end()) {
      it = plans_.emplace(&graph, Planner().plan(graph)).first;
    }
    return *it->second;
  }

  static void bind(Slots slots, Values values, Frame* frame) {
    for (size_t i = 0; i < slots.size(); ++i) {
      frame->values[slots[i]] = std::move(values.values[i]);
      if (!frame->sizes.empty()) {
        frame->sizes[slots[i]] =
            i < values.sizes.size() ? std::move(values.sizes[i]) : Argument();
      }
    }
  }

  static Values read(Slots slots, const Frame& frame) {
    Values out;
    out.values.reserve(slots.size());
    for (uint32_t s : slots) out.values.push_back(frame.values[s]);
    if (!frame.sizes.empty()) {
      for (uint32_t s : slots) out.sizes.push_back(frame.sizes[s]);
    }
    return out;
  }

  void run(const BlockPlan& block, Frame* frame) {
    for (const Step& s : block.steps) {
      try {
        const bool specialized =
            tracer_ == nullptr || tracer_->sizes_specialized();
        step(s, frame);
        // A size read in the operator itself: the node is what did it.
        if (!specialized && tracer_->sizes_specialized() &&
            s.blocks.empty() && s.callee == nullptr) {
          tracer_->specialize_sizes(where(*s.node));
        }
      } catch (const Located&) {
        throw;
      } catch (const UnsupportedNode&) {
        throw;
      } catch (const TraceError& e) {
        fail(*s.node, e.msg());
      } catch (const c10::Error& e) {
        fail(*s.node, e.what_without_backtrace());
      } catch (const std::exception& e) {
        fail(*s.node, e.what());
      }
    }
  }

  // Runs `block` (of an If or Loop node) on `inputs`; returns its outputs.
  Values run_block(const BlockPlan& block, Values inputs, Frame* frame) {
    bind(block.inputs, std::move(inputs), frame);
    run(block, frame);
    return read(block.outputs, *frame);
  }

  // The tensors among `values`, or TraceError naming `n` and `what`.
  static std::vector<at::Tensor> tensors_of(const Stack& values,
                                            const Node& n, const char* what) {
    std::vector<at::Tensor> out;
    for (size_t i = 0; i < values.size(); ++i) {
      if (!values[i].isTensor() || !values[i].toTensor().defined()) {
        throw TraceError(absl::StrCat(
            where(n), " on a tensor's value ", what, " a ",
            values[i].tagKind(), " as value ", i, "; fx::cond and "
            "fx::while_loop carry tensors only"));
      }
      out.push_back(values[i].toTensor());
    }
    return out;
  }

  static Values values_of(std::vector<at::Tensor> tensors) {
    Values out;
    for (at::Tensor& t : tensors) out.values.emplace_back(std::move(t));
    return out;
  }

  // prim::If on a tensor's truth (aten::Bool of a proxy): fx::cond, each
  // block traced as a branch (what it reads of the enclosing code is
  // lifted to operands).
  Values branch_on_tensor(const Step& s, const at::Tensor& pred,
                          Frame* frame) {
    auto branch = [&](size_t b) {
      return [&, b](const std::vector<at::Tensor>&) {
        return tensors_of(run_block(s.blocks.at(b), {}, frame).values,
                          *s.node, "returns");
      };
    };
    return values_of(fx::cond(pred, branch(0), branch(1), {}));
  }

  // prim::Loop whose condition is a tensor's truth: fx::while_loop, the
  // condition carried as a bool tensor after the loop's values.
  Values loop_on_tensor(const Step& s, const at::Tensor& pred, Frame* frame) {
    const Node& n = *s.node;
    const c10::IValue& trips = frame->values[s.inputs[0]];
    if (!trips.isInt() || trips.toInt() != std::numeric_limits<int64_t>::max() ||
        n.blocks()[0]->inputs()[0]->hasUses()) {
      throw TraceError(absl::StrCat(
          where(n), " on a tensor's value counts its iterations (a for "
          "loop with a break on one): fx::while_loop takes a `while` loop "
          "on a tensor's value only"));
    }
    auto truth = [](const c10::IValue& v) {
      at::Tensor t = v.isTensor() ? v.toTensor()
                                  : at::scalar_tensor(v.toBool(), at::kBool);
      return t.to(at::kBool).reshape({});
    };
    std::vector<c10::IValue> initial;
    for (size_t i = 2; i < s.inputs.size(); ++i) {
      initial.push_back(frame->values[s.inputs[i]]);
    }
    std::vector<at::Tensor> carried =
        tensors_of(initial, n, "carries");
    carried.push_back(truth(pred));
    std::vector<at::Tensor> out = fx::while_loop(
        [](const std::vector<at::Tensor>& c) { return c.back(); },
        [&](const std::vector<at::Tensor>& c) {
          Values in;
          in.values.emplace_back(int64_t{0});  // the unused iteration number
          for (size_t i = 0; i + 1 < c.size(); ++i) in.values.emplace_back(c[i]);
          Values result = run_block(s.blocks.at(0), std::move(in), frame);
          c10::IValue go = result.values.at(0);
          result.values.erase(result.values.begin());
          std::vector<at::Tensor> next =
              tensors_of(result.values, n, "carries");
          next.push_back(truth(go));
          return next;
        },
        std::move(carried));
    out.pop_back();
    return values_of(std::move(out));
  }

  // The sizes input `i` of `s` holds, or nullptr.
  static const Argument* sizes_of(const Step& s, size_t i,
                                  const Frame& frame) {
    if (frame.sizes.empty()) return nullptr;
    const Argument& a = frame.sizes[s.inputs[i]];
    return a.contains_node() ? &a : nullptr;
  }

  void step(const Step& s, Frame* frame) {
    const Node& n = *s.node;
    auto in = [&](size_t i) -> const c10::IValue& {
      return frame->values[s.inputs[i]];
    };
    auto set = [&](c10::IValue v, Argument sizes = Argument()) {
      frame->values[s.outputs[0]] = std::move(v);
      if (!frame->sizes.empty()) frame->sizes[s.outputs[0]] = std::move(sizes);
    };
    if (tracer_ != nullptr && size_step(s, frame)) return;
    if (s.defers_truth && tracer_ != nullptr && is_proxy(in(0))) {
      set(in(0));
      return;
    }
    switch (n.kind()) {
      case prim::Constant:
        set(s.constant);
        return;
      case prim::GetAttr:
        set(s.attribute ? in(0).toObjectRef().getSlot(*s.attribute)
                        : in(0).toObjectRef().getAttr(n.s(attr::name)));
        return;
      case prim::SetAttr:
        // As TorchScript does; symbolic_trace restores the module after
        // each trace and checks what forward set.
        in(0).toObjectRef().setAttr(n.s(attr::name), in(1));
        return;
      case prim::CreateObject: {
        // An object of a TorchScript class (detection models' ImageList),
        // its attributes set by the __init__ called next.
        const c10::ClassTypePtr type =
            n.output()->type()->expect<c10::ClassType>();
        set(c10::ivalue::Object::create(
            c10::StrongTypePtr(type->compilation_unit(), type),
            type->numAttributes()));
        return;
      }
      case prim::CallMethod:
        call_function(
            s,
            s.callee ? *s.callee
                     : *graph_function(in(0).toObjectRef().type()->getMethod(
                                           n.s(attr::name)),
                                       &n),
            0, frame);
        return;
      case prim::CallFunction:
        call_function(s, *s.callee, 1, frame);
        return;
      case prim::If: {
        if (in(0).isTensor()) {
          bind(s.outputs, branch_on_tensor(s, in(0).toTensor(), frame), frame);
          return;
        }
        const BlockPlan& taken = s.blocks.at(in(0).toBool() ? 0 : 1);
        bind(s.outputs, run_block(taken, {}, frame), frame);
        return;
      }
      case prim::Loop: {
        if (in(1).isTensor()) {
          bind(s.outputs, loop_on_tensor(s, in(1).toTensor(), frame), frame);
          return;
        }
        // A loop count computed from sizes is a constant of the trace.
        if (sizes_of(s, 0, *frame)) tracer_->specialize_sizes(where(n));
        const int64_t trips = in(0).toInt();
        bool more = in(1).toBool();
        Values carried;
        for (size_t i = 2; i < s.inputs.size(); ++i) {
          carried.values.push_back(in(i));
          if (!frame->sizes.empty()) {
            carried.sizes.push_back(frame->sizes[s.inputs[i]]);
          }
        }
        for (int64_t i = 0; i < trips && more; ++i) {
          carried.values.insert(carried.values.begin(), c10::IValue(i));
          if (!carried.sizes.empty() || !frame->sizes.empty()) {
            carried.sizes.insert(carried.sizes.begin(), Argument());
          }
          Values out = run_block(s.blocks.at(0), std::move(carried), frame);
          more = out.values.at(0).toBool();
          carried.values.assign(std::make_move_iterator(out.values.begin() + 1),
                                std::make_move_iterator(out.values.end()));
          carried.sizes.clear();
          if (!out.sizes.empty()) {
            carried.sizes.assign(std::make_move_iterator(out.sizes.begin() + 1),
                                 std::make_move_iterator(out.sizes.end()));
          }
        }
        bind(s.outputs, std::move(carried), frame);
        return;
      }
      case prim::ListConstruct: {
        c10::impl::GenericList list(
            n.output()->type()->expectRef<c10::ListType>().getElementType());
        list.reserve(s.inputs.size());
        for (size_t i = 0; i < s.inputs.size(); ++i) list.push_back(in(i));
        set(std::move(list), gather_sizes(s, *frame, /*tuple=*/false));
        return;
      }
      case prim::ListUnpack: {
        const auto& list = in(0).toListRef();
        if (list.size() != s.outputs.size()) {
          throw TraceError(absl::StrCat("a list of ", list.size(),
                                        " values unpacked into ",
                                        s.outputs.size()));
        }
        bind(s.outputs, {Stack(list.begin(), list.end()), scatter_sizes(s, *frame)},
             frame);
        return;
      }
      case prim::TupleConstruct: {
        Stack items = read(s.inputs, *frame).values;
        auto type = n.output()->type()->cast<c10::TupleType>();
        set(type && type->schema()
                ? c10::ivalue::Tuple::createNamed(std::move(items), type)
                : c10::ivalue::Tuple::create(std::move(items)),
            gather_sizes(s, *frame, /*tuple=*/true));
        return;
      }
      case prim::TupleUnpack:
        bind(s.outputs,
             {in(0).toTupleRef().elements().vec(), scatter_sizes(s, *frame)},
             frame);
        return;
      case prim::DictConstruct: {
        const auto& type = n.output()->type()->expectRef<c10::DictType>();
        c10::impl::GenericDict dict(type.getKeyType(), type.getValueType());
        for (size_t i = 0; i + 1 < s.inputs.size(); i += 2) {
          if (sizes_of(s, i + 1, *frame)) tracer_->specialize_sizes(where(n));
          dict.insert_or_assign(in(i), in(i + 1));
        }
        set(std::move(dict));
        return;
      }
      case prim::Uninitialized:
        set(c10::IValue());
        return;
      case prim::NumToTensor: {
        // torch.jit.trace records `x.size(1) // groups` as aten::size ->
        // prim::NumToTensor -> tensor arithmetic -> aten::Int. The number is
        // known (a size the trace reads), so the tensor is made from it as
        // C++ data is (an empty tensor filled in): the tracer computes with
        // it for real and aten::Int reads it back, where a recorded factory
        // would leave aten::Int nothing to read. With size tracking, the
        // tensor stands for the size's node until aten::Int.
        const c10::IValue& number = in(0);
        const c10::Scalar value = number.toScalar();
        at::Tensor out = at::empty({}, at::TensorOptions().dtype(
                                           number.isInt()    ? at::kLong
                                           : number.isBool() ? at::kBool
                                                             : at::kDouble));
        out.fill_(value);
        if (const Argument* sizes = sizes_of(s, 0, *frame)) {
          size_tensors_[out.unsafeGetTensorImpl()] = {out, *sizes, {}};
        }
        set(std::move(out));
        return;
      }
      case c10::aten::warn:
        // TorchScript's interpreter implements warnings itself (googlenet:
        // "Scripted GoogleNet always returns GoogleNetOutputs Tuple"):
        // issued once here, while tracing; the graph does not repeat them.
        TORCH_WARN(in(0).toStringRef());
        return;
      case prim::isinstance: {
        c10::TypePtr type = in(0).type();
        bool is = false;
        for (const c10::TypePtr& candidate : n.tys(attr::types)) {
          is = is || type->isSubtypeOf(*candidate);
        }
        set(is);
        return;
      }
      default:
        break;
    }
    // Sizes reach an operator: its node takes their nodes in place of the
    // ints, or they are constants of the trace.
    std::vector<std::pair<size_t, Argument>> sizes;
    // The sizes among the inputs, with their values while tracing.
    std::vector<std::pair<Argument, c10::IValue>> used;
    std::optional<Stack> inputs;
    if (tracer_ != nullptr) {
      bool constant = false;
      // A size as tensor data, with a proxy: aten::scalar_tensor of its
      // node. Without one, the operator computes for real (the size is a
      // constant of the trace).
      bool proxies = false;
      for (size_t i = 0; i < s.inputs.size() && !size_tensors_.empty(); ++i) {
        proxies = proxies || (in(i).isTensor() && in(i).toTensor().defined() &&
                              !in(i).toTensor().has_storage());
      }
      for (size_t i = 0; i < s.inputs.size(); ++i) {
        const c10::IValue& v = in(i);
        if (v.isTensor() && !size_tensors_.empty()) {
          auto it = size_tensors_.find(v.toTensor().unsafeGetTensorImpl());
          if (it != size_tensors_.end() && !proxies) {
            constant = true;
            used.emplace_back(it->second.sizes, *int_in(it->second.tensor));
          } else if (it != size_tensors_.end()) {
            if (!inputs) inputs = read(s.inputs, *frame).values;
            (*inputs)[i] = size_tensor_proxy(&it->second);
          }
        }
        const Argument* a = sizes_of(s, i, *frame);
        if (a == nullptr) continue;
        used.emplace_back(*a, v);
        if (s.vararg || s.schema == nullptr ||
            i >= s.schema->arguments().size() ||
            !(takes_ints(s.schema->arguments()[i].type()) ||
              (v.isInt() && s.schema->arguments()[i].type()->kind() ==
                                c10::TypeKind::NumberType))) {
          constant = true;
        } else {
          sizes.emplace_back(i, *a);
        }
      }
      // An operator on no tensor (aten::sqrt.int makes a float of a size)
      // records no node: what it returns is a constant too.
      if (!sizes.empty() && s.schema != nullptr && !on_tensors(*s.schema)) {
        constant = true;
      }
      if (constant) {
        // A size made into a float, a scalar tensor or an argument that
        // takes no ints (head_dim ** -0.5) is a constant of the trace: the
        // graph checks it keeps its value, the other sizes stay generic.
        for (const auto& [sizes_used, value] : used) {
          pin(sizes_used, value, n);
        }
        sizes.clear();
      }
    }
    // Ended below, whether or not a node took it.
    const bool substituted = tracer_ != nullptr && !sizes.empty();
    if (substituted) {
      tracer_->substitute_next(s.schema->operator_name(), std::move(sizes));
    }
    bool lists = false;
    for (const Value* out : n.outputs()) {
      lists = lists || out->type()->kind() == c10::TypeKind::ListType;
    }
    lists = lists && tracer_ != nullptr;
    Tracer::ListLengthChecks checks(
        lists ? tracer_ : nullptr, lists ? "TorchScript's " + where(n) : "");
    run_operator(s, *frame, inputs ? &*inputs : nullptr);
    for (size_t i = 0; i < s.outputs.size(); ++i) {
      frame->values[s.outputs[i]] =
          std::move(stack_[stack_.size() - s.outputs.size() + i]);
      if (!frame->sizes.empty()) frame->sizes[s.outputs[i]] = Argument();
    }
    if (substituted && tracer_->end_substitution()) {
      // No node took them (aten::sqrt.int makes a float of a size): the
      // result is a constant of the trace, which holds while they do.
      for (const auto& [sizes_used, value] : used) pin(sizes_used, value, n);
    }
  }

  struct SizeTensor;
  // A proxy of aten::scalar_tensor of the size `t` holds, made once.
  const at::Tensor& size_tensor_proxy(SizeTensor* t) {
    if (!t->proxy.defined()) {
      static const c10::OperatorName scalar_tensor("aten::scalar_tensor", "");
      tracer_->substitute_next(scalar_tensor, {{0, t->sizes}});
      t->proxy = at::scalar_tensor(*int_in(t->tensor), t->tensor.options());
      if (tracer_->end_substitution()) {
        tracer_->specialize_sizes("aten::scalar_tensor");
      }
    }
    return t->proxy;
  }

  // Calls the operator of `s` on its inputs from `frame` (or `inputs`, if
  // given) into stack_. One stack for all operator calls (an operator does
  // not call back into this interpreter), so that it keeps its capacity.
  void run_operator(const Step& s, const Frame& frame,
                    const Stack* inputs = nullptr) {
    stack_.clear();
    if (inputs != nullptr) {
      stack_.insert(stack_.end(), inputs->begin(), inputs->end());
    } else {
      for (uint32_t slot : s.inputs) stack_.push_back(frame.values[slot]);
    }
    if (s.vararg) stack_.emplace_back(static_cast<int64_t>(s.inputs.size()));
    (*s.operation)(stack_);
  }

  // The sizes of a list or tuple made of the inputs of `s`.
  Argument gather_sizes(const Step& s, const Frame& frame, bool tuple) const {
    bool any = false;
    std::vector<Argument> elements;
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      const Argument* a = sizes_of(s, i, frame);
      any = any || a != nullptr;
      elements.push_back(a ? *a : literal(frame.values[s.inputs[i]]));
    }
    if (!any) return Argument();
    return tuple ? Argument::tuple(std::move(elements))
                 : Argument::list(std::move(elements));
  }

  // The sizes of the elements of input 0 of `s`, one per output.
  std::vector<Argument> scatter_sizes(const Step& s, const Frame& frame) const {
    const Argument* a = sizes_of(s, 0, frame);
    if (a == nullptr || !a->is_sequence()) return {};
    return a->elements();
  }

  // With size tracking: steps that read sizes or compute with them. Returns
  // false for the others.
  bool size_step(const Step& s, Frame* frame) {
    const Node& n = *s.node;
    if (s.operation == std::nullopt || s.outputs.size() != 1) return false;
    auto in = [&](size_t i) -> const c10::IValue& {
      return frame->values[s.inputs[i]];
    };
    auto set = [&](c10::IValue v, Argument sizes) {
      frame->values[s.outputs[0]] = std::move(v);
      frame->sizes[s.outputs[0]] = std::move(sizes);
    };
    const size_t count = s.inputs.size();
    bool any_sizes = false;
    for (size_t i = 0; i < count; ++i) {
      any_sizes = any_sizes || sizes_of(s, i, *frame) != nullptr;
    }
    const c10::Symbol kind = n.kind();
    // Sizes of a tensor: x.size(), x.size(d), x.numel(), len(x).
    if (count >= 1 && in(0).isTensor() && !any_sizes) {
      const at::Tensor& t = in(0).toTensor();
      if (kind == c10::aten::size && count == 1) {
        // Named after the values `B, T = x.size()` unpacks it into.
        std::vector<std::string> names(t.dim());
        const auto& uses = n.output()->uses();
        if (uses.size() == 1 && uses[0].user->kind() == prim::ListUnpack &&
            uses[0].user->outputs().size() == names.size()) {
          for (size_t d = 0; d < names.size(); ++d) {
            names[d] = size_name(uses[0].user->output(d));
          }
        }
        c10::List<int64_t> values;
        std::vector<Argument> sizes;
        for (int64_t d = 0; d < t.dim(); ++d) {
          auto [node, size] = tracer_->record_sym_size(t, d, names[d]);
          values.push_back(size);
          sizes.push_back(node ? Argument(node) : Argument(size));
        }
        set(values, Argument::list(std::move(sizes)));
        return true;
      }
      if ((kind == c10::aten::size && count == 2 && in(1).isInt()) ||
          (kind == c10::aten::len && count == 1)) {
        const int64_t d = count == 2 ? in(1).toInt() : 0;
        // Traced files name the tensor the size is put in (B.1 for
        // `B, T = x.size()`), not the size.
        std::string name = size_name(n.output());
        for (const torch::jit::Use& use : n.output()->uses()) {
          if (name.empty() && use.user->kind() == prim::NumToTensor) {
            name = size_name(use.user->output());
          }
        }
        auto [node, size] = tracer_->record_sym_size(t, d, name);
        set(size, node ? Argument(node) : Argument());
        return true;
      }
      if (kind == c10::Symbol::aten("numel") && count == 1) {
        int64_t numel = 1;
        Argument product = int64_t{1};
        for (int64_t d = 0; d < t.dim(); ++d) {
          auto [node, size] = tracer_->record_sym_size(t, d);
          numel *= size;
          const Argument factor = node ? Argument(node) : Argument(size);
          product = product.is_int() && product.to_int() == 1
                        ? factor
                        : multiply(product, factor, "");
        }
        set(numel, product.contains_node() ? product : Argument());
        return true;
      }
    }
    // A size in a tensor (traced files): aten::Int reads it back; integer
    // tensor arithmetic on it is integer arithmetic.
    if (kind == c10::aten::Int && count == 1 && in(0).isTensor()) {
      auto it = size_tensors_.find(in(0).toTensor().unsafeGetTensorImpl());
      if (it == size_tensors_.end()) return false;
      std::optional<int64_t> value = int_in(in(0).toTensor());
      if (!value) return false;
      set(*value, it->second.sizes);
      return true;
    }
    // Whether a value is None, and a cast of an optional: not its sizes.
    if ((kind == c10::Symbol::aten("__is__") || kind == c10::aten::__isnot__) &&
        count == 2) {
      run_operator(s, *frame);
      set(std::move(stack_.back()), Argument());
      return true;
    }
    if (kind == prim::unchecked_cast && count == 1) {
      run_operator(s, *frame);
      const Argument* sizes = sizes_of(s, 0, *frame);
      set(std::move(stack_.back()), sizes ? *sizes : Argument());
      return true;
    }
    // A message formatted with sizes (torch._assert's f-string): it holds
    // them, so that an operator taking it as an argument specializes the
    // trace; a raise the trace does not take never reads it.
    if (kind == c10::Symbol::aten("format")) {
      std::vector<Argument> sizes;
      for (size_t i = 0; i < count; ++i) {
        if (const Argument* a = sizes_of(s, i, *frame)) sizes.push_back(*a);
      }
      run_operator(s, *frame);
      set(std::move(stack_.back()), Argument::tuple(std::move(sizes)));
      return true;
    }
    // The length of a list of sizes: the rank, which is guarded.
    if (kind == c10::aten::len && count == 1 && in(0).isList()) {
      run_operator(s, *frame);
      set(std::move(stack_.back()), Argument());
      return true;
    }
    // TorchScript's adaptive pooling: `_list_with_default(output_size,
    // input.size())` fills the output size's Nones from the input's sizes.
    if (kind == c10::Symbol::aten("_list_with_default") && count == 2 &&
        in(0).isList() && in(1).isList() && !sizes_of(s, 0, *frame)) {
      const Argument* defaults = sizes_of(s, 1, *frame);
      if (defaults == nullptr) return false;
      run_operator(s, *frame);
      c10::IValue value = std::move(stack_.back());
      const auto list = in(0).toListRef();
      const size_t offset = defaults->elements().size() - list.size();
      std::vector<Argument> sizes;
      for (size_t i = 0; i < list.size(); ++i) {
        sizes.push_back(list[i].isNone() ? defaults->elements().at(offset + i)
                                         : literal(list[i]));
      }
      set(std::move(value), Argument::list(std::move(sizes)));
      return true;
    }
    bool size_tensor = false;
    for (size_t i = 0; i < count && !size_tensors_.empty(); ++i) {
      size_tensor = size_tensor ||
                    (in(i).isTensor() &&
                     size_tensors_.contains(in(i).toTensor().unsafeGetTensorImpl()));
    }
    if (size_tensor) return tensor_arithmetic(s, frame);
    if (!any_sizes) return false;
    // A size appended to a list of them (`[b.shape[0] for b in boxes]`):
    // the list, changed in place, holds it too.
    if (kind == c10::aten::append && count == 2 && in(0).isList() &&
        in(1).isInt()) {
      const Argument* held = sizes_of(s, 0, *frame);
      std::vector<Argument> sizes =
          held ? held->elements() : literal(in(0)).elements();
      const Argument* added = sizes_of(s, 1, *frame);
      sizes.push_back(added ? *added : Argument(in(1).toInt()));
      run_operator(s, *frame);
      Argument list = Argument::list(std::move(sizes));
      frame->sizes[s.inputs[0]] = list;
      set(std::move(stack_.back()), std::move(list));
      return true;
    }
    // Lists of sizes: an element, a slice, a copy, a concatenation. The
    // same operator on the elements' positions tells which it returns.
    const c10::TypePtr out_type = n.output()->type();
    const bool list_op = kind == c10::aten::__getitem__ ||
                         kind == c10::aten::slice || kind == c10::aten::list ||
                         kind == c10::aten::add || kind == prim::TupleIndex;
    if (list_op && count >= 1 && (in(0).isList() || in(0).isTuple())) {
      return element_step(s, frame);
    }
    // Comparisons: the branch or assert they decide stays right as long as
    // they come out as they did; the graph checks that instead of being
    // specialized.
    if (const char* relation = traced_relation(kind, false); relation && count == 2) {
      if (in(0).isInt() && in(1).isInt()) {
        run_operator(s, *frame);
        c10::IValue outcome = std::move(stack_.back());
        const bool holds = outcome.toBool();
        check_size(s, *frame, 0, 1, -1, traced_relation(kind, holds));
        set(std::move(outcome), Argument());
        return true;
      }
      if (in(0).isList() && in(1).isList() &&
          (kind == c10::aten::eq || kind == c10::aten::ne)) {
        const auto a = in(0).toListRef();
        const auto b = in(1).toListRef();
        for (const c10::IValue& v : a) if (!v.isInt()) return false;
        for (const c10::IValue& v : b) if (!v.isInt()) return false;
        run_operator(s, *frame);
        c10::IValue outcome = std::move(stack_.back());
        if (a.size() == b.size()) {
          // Equal lists stay equal element by element; unequal ones while
          // the first element that differed still does.
          size_t differs = a.size();
          for (size_t i = 0; i < a.size() && differs == a.size(); ++i) {
            if (a[i].toInt() != b[i].toInt()) differs = i;
          }
          for (size_t i = 0; i < a.size(); ++i) {
            if (differs == a.size() || i == differs) {
              check_size(s, *frame, 0, 1, static_cast<int64_t>(i),
                         differs == a.size() ? "==" : "!=");
            }
          }
        }
        set(std::move(outcome), Argument());
        return true;
      }
    }
    // Integer arithmetic.
    if (out_type->kind() == c10::TypeKind::IntType) {
      for (size_t i = 0; i < count; ++i) {
        if (!in(i).isInt()) return false;
      }
      const Function* f = nullptr;
      if (kind == c10::aten::add || kind == c10::aten::sub) f = sym_add();
      if (kind == c10::aten::mul || kind == c10::aten::neg) f = sym_mul();
      if (kind == c10::aten::floordiv || kind == c10::aten::remainder) {
        f = sym_floordiv();
      }
      if (f == nullptr || (count != 2 && kind != c10::aten::neg) ||
          (kind == c10::aten::neg && count != 1)) {
        return false;
      }
      run_operator(s, *frame);
      c10::IValue value = std::move(stack_.back());
      auto operand = [&](size_t i) {
        const Argument* a = sizes_of(s, i, *frame);
        return a ? *a : Argument(in(i).toInt());
      };
      const std::string name = size_name(n.output());
      Argument a = operand(0);
      Argument out;
      if (kind == c10::aten::neg) {
        out = multiply(a, int64_t{-1}, name);
      } else if (kind == c10::aten::sub) {
        out = add(a, multiply(operand(1), int64_t{-1}, ""), name);
      } else if (kind == c10::aten::remainder) {
        // a % b = a - (a // b) * b, with Python's floor division.
        Argument b = operand(1);
        out = add(a, multiply(multiply(floor_divide(a, b), b, ""),
                              int64_t{-1}, ""),
                  name);
      } else {
        out = tracer_->record_sym_call(f, a, operand(1), name);
      }
      set(std::move(value), std::move(out));
      return true;
    }
    return false;
  }

  // For a comparison `kind` whose outcome was `holds`, the relation that
  // held ("<" for aten::lt that was true, ">=" for one that was false);
  // nullptr for other kinds.
  static const char* traced_relation(c10::Symbol kind, bool holds) {
    if (kind == c10::aten::eq) return holds ? "==" : "!=";
    if (kind == c10::aten::ne) return holds ? "!=" : "==";
    if (kind == c10::aten::lt) return holds ? "<" : ">=";
    if (kind == c10::aten::le) return holds ? "<=" : ">";
    if (kind == c10::aten::gt) return holds ? ">" : "<=";
    if (kind == c10::aten::ge) return holds ? ">=" : "<";
    return nullptr;
  }

  // Records fx_guard::check_size of inputs `i` and `j` of `s` (their
  // elements `element`, for lists), if either holds a size.
  void check_size(const Step& s, const Frame& frame, size_t i, size_t j,
                  int64_t element, const char* relation) {
    auto operand = [&](size_t k) -> std::pair<int64_t, Argument> {
      const c10::IValue& v = frame.values[s.inputs[k]];
      const Argument* sizes = sizes_of(s, k, frame);
      if (element < 0) {
        return {v.toInt(), sizes ? *sizes : Argument(v.toInt())};
      }
      const int64_t value = v.toListRef()[element].toInt();
      return {value, sizes ? sizes->elements().at(element) : Argument(value)};
    };
    auto [a, a_sizes] = operand(i);
    auto [b, b_sizes] = operand(j);
    if (!a_sizes.contains_node() && !b_sizes.contains_node()) return;
    const std::string what =
        absl::StrCat(a_sizes.to_string(), " ", relation, " ",
                     b_sizes.to_string(), " (TorchScript's ", where(*s.node),
                     ")");
    record_check({{0, std::move(a_sizes)}, {1, std::move(b_sizes)}}, a, b,
                 relation, what, *s.node);
  }

  // Records fx_guard::check_size(a, b, relation, what) with `sizes` in
  // place of the arguments they compute; specializes the trace for node
  // `n` if no node took them.
  void record_check(std::vector<std::pair<size_t, Argument>> sizes, int64_t a,
                    int64_t b, const char* relation, const std::string& what,
                    const torch::jit::Node& n) {
    static const c10::OperatorHandle check =
        c10::Dispatcher::singleton().findSchemaOrThrow("fx_guard::check_size",
                                                       "");
    tracer_->substitute_next(check.operator_name(), std::move(sizes));
    Stack stack{a, b, std::string(relation), what};
    check.callBoxed(&stack);
    if (tracer_->end_substitution()) tracer_->specialize_sizes(where(n));
  }

  // Whether an operator takes or returns a tensor (in a list or optional
  // too): a call of one that does not is computed here, not recorded.
  static bool on_tensors(const c10::FunctionSchema& schema) {
    std::function<bool(const c10::TypePtr&)> mentions =
        [&](const c10::TypePtr& type) {
          if (type->kind() == c10::TypeKind::TensorType) return true;
          for (const c10::TypePtr& contained : type->containedTypes()) {
            if (mentions(contained)) return true;
          }
          return false;
        };
    for (const c10::Argument& a : schema.arguments()) {
      if (mentions(a.type())) return true;
    }
    for (const c10::Argument& r : schema.returns()) {
      if (mentions(r.type())) return true;
    }
    return false;
  }

  // Records fx_guard::check_size(size, value, "==") for each size in
  // `sizes` (an int's, or a list's elements) that is computed from the
  // inputs: node `n` took it as the constant `value`. Specializes the trace
  // for a value it cannot check so.
  void pin(const Argument& sizes, const c10::IValue& value,
           const torch::jit::Node& n) {
    if (!sizes.contains_node()) return;
    if (sizes.is_node() && value.isInt()) {
      const int64_t v = value.toInt();
      const std::string what =
          absl::StrCat(sizes.to_string(), " == ", v, " (TorchScript's ",
                       where(n), " takes it as a constant)");
      record_check({{0, sizes}}, v, v, "==", what, n);
      return;
    }
    if ((sizes.is_list() || sizes.is_tuple()) &&
        (value.isList() || value.isTuple())) {
      const auto values = value.isList() ? value.toListRef().vec()
                                         : value.toTupleRef().elements().vec();
      if (values.size() == sizes.elements().size()) {
        for (size_t k = 0; k < values.size(); ++k) {
          pin(sizes.elements()[k], values[k], n);
        }
        return;
      }
    }
    tracer_->specialize_sizes(where(n));
  }

  Argument add(const Argument& a, const Argument& b, const std::string& name) {
    if (!a.contains_node() && !b.contains_node()) return a.to_int() + b.to_int();
    return tracer_->record_sym_call(sym_add(), a, b, name);
  }
  Argument floor_divide(const Argument& a, const Argument& b) {
    if (!a.contains_node() && !b.contains_node()) {
      return fx::floor_divide(a.to_int(), b.to_int());
    }
    return tracer_->record_sym_call(sym_floordiv(), a, b);
  }
  Argument multiply(const Argument& a, const Argument& b,
                    const std::string& name) {
    if (!a.contains_node() && !b.contains_node()) return a.to_int() * b.to_int();
    return tracer_->record_sym_call(sym_mul(), a, b, name);
  }

  // An element, slice, copy or concatenation of lists (or tuples) holding
  // sizes.
  bool element_step(const Step& s, Frame* frame) {
    // Every list or tuple input replaced by its elements' positions in the
    // concatenation of all of them; other inputs (indices) as they are.
    Stack positions;
    std::vector<Argument> elements;
    for (size_t i = 0; i < s.inputs.size(); ++i) {
      const c10::IValue& v = frame->values[s.inputs[i]];
      if (!v.isList() && !v.isTuple()) {
        if (sizes_of(s, i, *frame)) return false;  // an index from sizes
        positions.push_back(v);
        continue;
      }
      const std::vector<c10::IValue> items =
          v.isList() ? v.toListRef().vec() : v.toTupleRef().elements().vec();
      const Argument* a = sizes_of(s, i, *frame);
      std::vector<c10::IValue> at;
      for (size_t j = 0; j < items.size(); ++j) {
        at.emplace_back(static_cast<int64_t>(elements.size()));
        elements.push_back(a ? a->elements().at(j) : literal(items[j]));
      }
      if (v.isList()) {
        c10::List<int64_t> list;
        for (const c10::IValue& p : at) list.push_back(p.toInt());
        positions.emplace_back(std::move(list));
      } else {
        positions.emplace_back(c10::ivalue::Tuple::create(std::move(at)));
      }
    }
    run_operator(s, *frame, &positions);
    const c10::IValue where = std::move(stack_.back());
    run_operator(s, *frame);
    c10::IValue value = std::move(stack_.back());
    Argument sizes;
    if (where.isInt()) {
      sizes = elements.at(where.toInt());
    } else if (where.isList()) {
      std::vector<Argument> picked;
      for (const c10::IValue& p : where.toListRef()) {
        if (!p.isInt()) return false;
        picked.push_back(elements.at(p.toInt()));
      }
      sizes = Argument::list(std::move(picked));
    } else {
      return false;
    }
    frame->values[s.outputs[0]] = std::move(value);
    frame->sizes[s.outputs[0]] = sizes.contains_node() ? sizes : Argument();
    return true;
  }

  // Integer arithmetic on sizes in 0-dimensional tensors (traced files).
  bool tensor_arithmetic(const Step& s, Frame* frame) {
    const Node& n = *s.node;
    const c10::Symbol kind = n.kind();
    auto operand = [&](size_t i) -> std::optional<Argument> {
      const c10::IValue& v = frame->values[s.inputs[i]];
      if (v.isInt()) return Argument(v.toInt());
      if (!v.isTensor()) return std::nullopt;
      const at::Tensor& t = v.toTensor();
      auto it = size_tensors_.find(t.unsafeGetTensorImpl());
      if (it != size_tensors_.end()) return it->second.sizes;
      std::optional<int64_t> value = int_in(t);
      if (!value) return std::nullopt;
      return Argument(*value);
    };
    const Function* f = nullptr;
    bool subtract = false;
    bool reverse = false;  // rsub(a, b) = b - a
    if (kind == c10::aten::mul) f = sym_mul();
    if (kind == c10::aten::add || kind == c10::aten::sub ||
        kind == c10::aten::rsub) {
      f = sym_add();
      subtract = kind != c10::aten::add;
      reverse = kind == c10::aten::rsub;
      // alpha must be 1.
      if (s.inputs.size() == 3 &&
          !(frame->values[s.inputs[2]].isInt() &&
            frame->values[s.inputs[2]].toInt() == 1)) {
        f = nullptr;
      }
    }
    if (kind == c10::aten::floor_divide || kind == c10::aten::remainder) {
      f = sym_floordiv();
    }
    if (kind == c10::aten::div && s.inputs.size() == 3 &&
        frame->values[s.inputs[2]].isString() &&
        frame->values[s.inputs[2]].toStringRef() == "floor") {
      f = sym_floordiv();
    }
    std::optional<Argument> a = s.inputs.size() >= 2 ? operand(0) : std::nullopt;
    std::optional<Argument> b = s.inputs.size() >= 2 ? operand(1) : std::nullopt;
    // Anything else is tensor data (the operator step makes the size a
    // node's tensor).
    if (f == nullptr || !a || !b) return false;
    run_operator(s, *frame);
    c10::IValue value = std::move(stack_.back());
    if (reverse) std::swap(a, b);
    if (subtract) b = multiply(*b, int64_t{-1}, "");
    Argument out = f == sym_add()   ? add(*a, *b, "")
                   : f == sym_mul() ? multiply(*a, *b, "")
                                    : floor_divide(*a, *b);
    if (kind == c10::aten::remainder) {
      // a % b = a - (a // b) * b, with Python's floor division.
      out = add(*a, multiply(multiply(out, *b, ""), int64_t{-1}, ""), "");
    }
    if (value.isTensor() && out.contains_node()) {
      const at::Tensor& t = value.toTensor();
      size_tensors_[t.unsafeGetTensorImpl()] = {t, out, {}};
    }
    frame->values[s.outputs[0]] = std::move(value);
    frame->sizes[s.outputs[0]] = Argument();
    return true;
  }

  void call_function(const Step& s, const torch::jit::GraphFunction& callee,
                     size_t first_argument, Frame* frame) {
    Values args;
    args.values.reserve(s.inputs.size() - first_argument);
    for (size_t i = first_argument; i < s.inputs.size(); ++i) {
      args.values.push_back(frame->values[s.inputs[i]]);
      if (!frame->sizes.empty()) args.sizes.push_back(frame->sizes[s.inputs[i]]);
    }
    frames_.back().at = s.node;
    next_path_ = callee_path(*s.node, first_argument);
    Values out = call(callee, std::move(args));
    frames_.back().at = nullptr;
    bind(s.outputs, std::move(out), frame);
  }

  // The module path of a prim::CallMethod's self: a chain of
  // prim::GetAttr from the caller's self, as TorchScript graphs call
  // submodules.
  std::string callee_path(const Node& call, size_t first_argument) const {
    const std::string& caller = frames_.back().path;
    if (first_argument != 0) return caller;  // a function: the same module
    std::vector<std::string> names;
    const Value* self = call.input(0);
    while (self->node()->kind() == prim::GetAttr) {
      names.push_back(self->node()->s(attr::name));
      self = self->node()->input(0);
    }
    if (self->node()->kind() != prim::Param || self->offset() != 0) {
      return caller;  // not a submodule of self: path unknown
    }
    std::string out = caller;
    for (auto it = names.rbegin(); it != names.rend(); ++it) {
      out += (out.empty() ? "" : ".") + *it;
    }
    return out;
  }

  // An error already given its TorchScript location.
  class Located : public TraceError {
   public:
    using TraceError::TraceError;
  };

  [[noreturn]] void fail(const Node& n, const std::string& what) {
    std::ostringstream out;
    out << "TorchScript's " << n.kind().toQualString() << " failed: " << what
        << "\nTorchScript call stack (most recent call last):\n";
    for (const Call& c : frames_) {
      const Node& at = c.at ? *c.at : n;
      torch::jit::SourceRange range =
          at.sourceRange().findSourceRangeThatGenerated().value_or(
              at.sourceRange());
      const std::string module =
          c.path.empty() ? "the root module" : "module " + c.path;
      auto source = range.source();
      if (!source || !source->filename() || source->filename()->empty()) {
        // torch.jit.trace leaves its own nodes (prim::NumToTensor,
        // aten::Int) without a source: the node as TorchScript prints it.
        std::ostringstream node;
        node << at;
        std::string text = node.str();
        if (!text.empty() && text.back() == '\n') text.pop_back();
        out << "  In " << c.function->qualname().name() << " of " << module
            << ", at the TorchScript node\n    " << text << "\n";
        continue;
      }
      out << "  In " << module << ":\n";
      range.print_with_context(out, /*context=*/3, /*highlight=*/true,
                               c.function->qualname().name());
    }
    throw Located(out.str());
  }

  Tracer* tracer_;
  std::vector<Call> frames_;
  std::string next_path_;  // the module path of the method being called
  Stack stack_;
  // With size tracking, the 0-dimensional tensors holding sizes
  // (prim::NumToTensor's and arithmetic on them, in traced files): the
  // sizes' nodes, and the tensor, kept so that its address stays its own.
  struct SizeTensor {
    at::Tensor tensor;
    Argument sizes;
    at::Tensor proxy;  // see size_tensor_proxy
  };
  absl::flat_hash_map<const c10::TensorImpl*, SizeTensor> size_tensors_;
  // By pointer: a plan stays put while the map grows under its call.
  absl::flat_hash_map<const Graph*, std::unique_ptr<GraphPlan>> plans_;
};

}  // namespace

c10::IValue run_torchscript_method(const torch::jit::Method& method,
                                   std::vector<c10::IValue> inputs,
                                   Tracer* tracer) {
  torch::jit::GraphFunction* graph = graph_function(method.function());
  inputs.insert(inputs.begin(), method.owner()._ivalue());
  graph->getSchema().checkAndNormalizeInputs(inputs, {});
  Values out = Interpreter(tracer).call(*graph, {std::move(inputs), {}});
  if (!out.sizes.empty() && out.sizes[0].contains_node()) {
    tracer->specialize_sizes("forward's output");  // sizes: constants
  }
  return std::move(out.values.at(0));
}

}  // namespace fx::internal
