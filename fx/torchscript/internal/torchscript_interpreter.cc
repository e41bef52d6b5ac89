#include "fx/torchscript/internal/torchscript_interpreter.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ops/empty.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/operator.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "fx/ir/errors.h"

namespace fx::internal {
namespace {

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
  Slots inputs;
  Slots outputs;
  mutable std::optional<torch::jit::Operation> operation;  // an operator's
  c10::IValue constant;             // prim::Constant's
  // prim::GetAttr's slot and prim::CallMethod's and prim::CallFunction's
  // callee, when the graph's types tell them (not for interfaces).
  std::optional<size_t> attribute;
  torch::jit::GraphFunction* callee = nullptr;
  std::vector<BlockPlan> blocks;    // prim::If's and prim::Loop's
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
        out.operation = op->getOperation(&n);
        out.vararg = op->schema().is_vararg();
      }
    }
    return out;
  }

  std::vector<uint32_t>* table_ = nullptr;
  uint32_t slots_ = 0;
};

class Interpreter {
 public:
  Stack call(const torch::jit::GraphFunction& function, Stack args) {
    const GraphPlan& plan = this->plan(*function.graph());
    std::vector<c10::IValue> frame(plan.slots);
    bind(plan.body.inputs, std::move(args), &frame);
    frames_.push_back({&function, nullptr, std::move(next_path_)});
    next_path_.clear();
    run(plan.body, &frame);
    frames_.pop_back();
    return read(plan.body.outputs, frame);
  }

 private:
  using Frame = std::vector<c10::IValue>;

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

  static void bind(Slots slots, Stack values, Frame* frame) {
    for (size_t i = 0; i < slots.size(); ++i) {
      (*frame)[slots[i]] = std::move(values[i]);
    }
  }

  static Stack read(Slots slots, const Frame& frame) {
    Stack out;
    out.reserve(slots.size());
    for (uint32_t s : slots) out.push_back(frame[s]);
    return out;
  }

  void run(const BlockPlan& block, Frame* frame) {
    for (const Step& s : block.steps) {
      try {
        step(s, frame);
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
  Stack run_block(const BlockPlan& block, Stack inputs, Frame* frame) {
    bind(block.inputs, std::move(inputs), frame);
    run(block, frame);
    return read(block.outputs, *frame);
  }

  void step(const Step& s, Frame* frame) {
    const Node& n = *s.node;
    auto in = [&](size_t i) -> const c10::IValue& {
      return (*frame)[s.inputs[i]];
    };
    auto set = [&](c10::IValue v) { (*frame)[s.outputs[0]] = std::move(v); };
    switch (n.kind()) {
      case prim::Constant:
        set(s.constant);
        return;
      case prim::GetAttr:
        set(s.attribute ? in(0).toObjectRef().getSlot(*s.attribute)
                        : in(0).toObjectRef().getAttr(n.s(attr::name)));
        return;
      case prim::SetAttr:
        throw TraceError(absl::StrCat(
            "forward sets the module attribute '", n.s(attr::name),
            "', which a graph cannot record; keep state outside forward"));
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
        const BlockPlan& taken = s.blocks.at(in(0).toBool() ? 0 : 1);
        bind(s.outputs, run_block(taken, {}, frame), frame);
        return;
      }
      case prim::Loop: {
        const int64_t trips = in(0).toInt();
        bool more = in(1).toBool();
        Stack carried;
        for (size_t i = 2; i < s.inputs.size(); ++i) carried.push_back(in(i));
        for (int64_t i = 0; i < trips && more; ++i) {
          carried.insert(carried.begin(), c10::IValue(i));
          Stack out = run_block(s.blocks.at(0), std::move(carried), frame);
          more = out.at(0).toBool();
          carried.assign(std::make_move_iterator(out.begin() + 1),
                         std::make_move_iterator(out.end()));
        }
        bind(s.outputs, std::move(carried), frame);
        return;
      }
      case prim::ListConstruct: {
        c10::impl::GenericList list(
            n.output()->type()->expectRef<c10::ListType>().getElementType());
        list.reserve(s.inputs.size());
        for (size_t i = 0; i < s.inputs.size(); ++i) list.push_back(in(i));
        set(std::move(list));
        return;
      }
      case prim::ListUnpack: {
        const auto& list = in(0).toListRef();
        if (list.size() != s.outputs.size()) {
          throw TraceError(absl::StrCat("a list of ", list.size(),
                                        " values unpacked into ",
                                        s.outputs.size()));
        }
        bind(s.outputs, Stack(list.begin(), list.end()), frame);
        return;
      }
      case prim::TupleConstruct: {
        Stack items = read(s.inputs, *frame);
        auto type = n.output()->type()->cast<c10::TupleType>();
        set(type && type->schema()
                ? c10::ivalue::Tuple::createNamed(std::move(items), type)
                : c10::ivalue::Tuple::create(std::move(items)));
        return;
      }
      case prim::TupleUnpack:
        bind(s.outputs, in(0).toTupleRef().elements().vec(), frame);
        return;
      case prim::DictConstruct: {
        const auto& type = n.output()->type()->expectRef<c10::DictType>();
        c10::impl::GenericDict dict(type.getKeyType(), type.getValueType());
        for (size_t i = 0; i + 1 < s.inputs.size(); i += 2) {
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
        // known (a size the trace reads, and guards), so the tensor is made
        // from it as C++ data is (an empty tensor filled in): the tracer
        // computes with it for real and aten::Int reads it back, where a
        // recorded factory would leave aten::Int nothing to read.
        const c10::IValue& number = in(0);
        const c10::Scalar value = number.toScalar();
        at::Tensor out = at::empty({}, at::TensorOptions().dtype(
                                           number.isInt()    ? at::kLong
                                           : number.isBool() ? at::kBool
                                                             : at::kDouble));
        out.fill_(value);
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
    // One stack for all operator calls (an operator does not call back
    // into this interpreter), so that it keeps its capacity.
    stack_.clear();
    for (uint32_t slot : s.inputs) stack_.push_back((*frame)[slot]);
    if (s.vararg) stack_.emplace_back(static_cast<int64_t>(s.inputs.size()));
    (*s.operation)(stack_);
    for (size_t i = 0; i < s.outputs.size(); ++i) {
      (*frame)[s.outputs[i]] =
          std::move(stack_[stack_.size() - s.outputs.size() + i]);
    }
  }

  void call_function(const Step& s, const torch::jit::GraphFunction& callee,
                     size_t first_argument, Frame* frame) {
    Stack args;
    args.reserve(s.inputs.size() - first_argument);
    for (size_t i = first_argument; i < s.inputs.size(); ++i) {
      args.push_back((*frame)[s.inputs[i]]);
    }
    frames_.back().at = s.node;
    next_path_ = callee_path(*s.node, first_argument);
    Stack out = call(callee, std::move(args));
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

  std::vector<Call> frames_;
  std::string next_path_;  // the module path of the method being called
  Stack stack_;
  // By pointer: a plan stays put while the map grows under its call.
  absl::flat_hash_map<const Graph*, std::unique_ptr<GraphPlan>> plans_;
};

}  // namespace

c10::IValue run_torchscript_method(const torch::jit::Method& method,
                                   std::vector<c10::IValue> inputs) {
  torch::jit::GraphFunction* graph = graph_function(method.function());
  inputs.insert(inputs.begin(), method.owner()._ivalue());
  graph->getSchema().checkAndNormalizeInputs(inputs, {});
  Stack out = Interpreter().call(*graph, std::move(inputs));
  return std::move(out.at(0));
}

}  // namespace fx::internal
