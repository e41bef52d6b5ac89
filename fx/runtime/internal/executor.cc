#include "fx/runtime/internal/executor.h"

#include <algorithm>
#include <optional>
#include <string_view>
#include <utility>

#include <ATen/core/dispatch/Dispatcher.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "fx/ir/control_flow.h"
#include "fx/ir/errors.h"
#include "fx/ir/function.h"
#include "fx/ir/operator_schemas.h"

namespace fx {
namespace {

// Where one value pushed on a stack comes from.
struct Source {
  enum class Kind : uint8_t { kConstant, kSlot, kList, kTuple };
  Kind kind = Kind::kConstant;
  // For kSlot: this is the value's last use, so it is moved, not copied.
  bool move = false;
  int32_t slot = -1;
  c10::IValue constant;
  // For kList: the schema's element type (nullptr: decided by the values).
  c10::TypePtr element_type;
  std::vector<Source> elements;
};

struct Instruction {
  enum class Kind : uint8_t { kOperator, kFunction, kModule };
  Kind kind = Kind::kOperator;
  const Node* node = nullptr;
  std::optional<c10::OperatorHandle> op;
  size_t num_returns = 1;
  const Function* function = nullptr;
  const LeafModule* module = nullptr;
  std::vector<Source> inputs;
  // The operator's in-place twin, run instead when the call holds the only
  // reference to `self` (in_place_twin; kept only where inputs[0] is a
  // value's last use).
  std::optional<c10::OperatorHandle> in_place;
  // inputs[0] is a placeholder's value: written in place only when the run's
  // inputs were donated.
  bool self_is_input = false;
  int32_t output_slot = -1;
  // Slots to clear after this instruction (values nothing uses later that
  // were not moved out by their last use).
  std::vector<int32_t> release;
};

c10::IValue build_list(std::vector<c10::IValue> values,
                       const c10::TypePtr& element_type) {
  if (element_type == nullptr) {
    bool all_tensors = !values.empty();
    for (const c10::IValue& v : values) all_tensors = all_tensors && v.isTensor();
    if (all_tensors) {
      c10::List<at::Tensor> list;
      list.reserve(values.size());
      for (c10::IValue& v : values) list.push_back(std::move(v).toTensor());
      return list;
    }
    c10::impl::GenericList list(c10::AnyType::get());
    for (c10::IValue& v : values) list.push_back(std::move(v));
    return list;
  }
  if (element_type->kind() == c10::TypeKind::TensorType) {
    c10::List<at::Tensor> list;
    list.reserve(values.size());
    for (c10::IValue& v : values) list.push_back(std::move(v).toTensor());
    return list;
  }
  c10::impl::GenericList list(c10::AnyType::get());
  for (c10::IValue& v : values) list.push_back(std::move(v));
  return coerce_to_type(std::move(list), c10::ListType::create(element_type));
}

// Functional operators whose result is a copy of `self` (its sizes, strides
// and dtype) written over, paired with the in-place operator that writes
// the same values into `self`: at::index_copy is self.clone() then
// index_copy_, and so on.
constexpr std::pair<std::string_view, std::string_view> kInPlaceTwins[] = {
    {"aten::index_copy", "aten::index_copy_"},
    {"aten::index_put", "aten::index_put_"},
    {"aten::scatter.src", "aten::scatter_.src"},
    {"aten::scatter.value", "aten::scatter_.value"},
};

std::optional<c10::OperatorHandle> in_place_twin(const c10::OperatorHandle& op) {
  const c10::OperatorName& name = op.operator_name();
  const std::string qualified =
      name.overload_name.empty() ? name.name
                                 : absl::StrCat(name.name, ".", name.overload_name);
  for (const auto& [functional, in_place] : kInPlaceTwins) {
    if (qualified != functional) continue;
    const size_t dot = in_place.find('.');
    const std::string twin(in_place.substr(0, dot));
    const std::string overload(
        dot == std::string_view::npos ? "" : in_place.substr(dot + 1));
    // (c10::optional, not std::optional, in LibTorch 1.13.)
    const auto handle =
        c10::Dispatcher::singleton().findSchema({twin, overload});
    if (!handle.has_value()) return std::nullopt;
    return *handle;
  }
  return std::nullopt;
}

// Whether writing over `stack[0]` in place is invisible: a CPU tensor whose
// TensorImpl and storage the stack alone holds, its memory an allocator's
// (not a caller's buffer wrapped by from_blob), dense without overlap (as
// the copy would be), and no autograd history to keep.
bool only_reference(const std::vector<c10::IValue>& stack) {
  if (stack.empty() || !stack[0].isTensor()) return false;
  const at::Tensor& self = stack[0].toTensor();
  if (!self.defined() || !self.has_storage() || self.use_count() != 1 ||
      self.storage().use_count() != 1 ||
      self.storage().allocator() == nullptr || !self.device().is_cpu() ||
      !self.is_non_overlapping_and_dense()) {
    return false;
  }
  for (const c10::IValue& v : stack) {
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().requires_grad()) {
      return false;
    }
  }
  return true;
}

// A subgraph compiled for cond and while_loop.
class ExecutorBody : public Body {
 public:
  explicit ExecutorBody(std::unique_ptr<Executor> executor)
      : executor_(std::move(executor)) {}
  c10::IValue run(std::vector<c10::IValue> inputs) const override {
    return executor_->run(std::move(inputs));
  }
  c10::IValue run_donated(std::vector<c10::IValue> inputs) const override {
    return executor_->run(std::move(inputs), /*donated=*/true);
  }

 private:
  std::unique_ptr<Executor> executor_;
};

}  // namespace

struct Executor::Program {
  std::vector<int32_t> input_slots;
  std::vector<int32_t> release_after_inputs;
  std::vector<Instruction> instructions;
  Source output;
  int32_t num_slots = 0;
  size_t max_stack = 0;

  void push(const Source& s, std::vector<c10::IValue>& slots,
            std::vector<c10::IValue>& stack) const {
    switch (s.kind) {
      case Source::Kind::kConstant:
        stack.push_back(s.constant);
        return;
      case Source::Kind::kSlot:
        if (s.move) {
          stack.push_back(std::move(slots[s.slot]));
        } else {
          stack.push_back(slots[s.slot]);
        }
        return;
      case Source::Kind::kList:
      case Source::Kind::kTuple: {
        std::vector<c10::IValue> values;
        values.reserve(s.elements.size());
        for (const Source& e : s.elements) push(e, slots, values);
        if (s.kind == Source::Kind::kTuple) {
          stack.push_back(c10::ivalue::Tuple::create(std::move(values)));
        } else {
          stack.push_back(build_list(std::move(values), s.element_type));
        }
        return;
      }
    }
  }
};

// The per-run state: value slots and the call stack. Frames are pooled so
// that a run allocates nothing of its own (a fresh 16 KB slot vector per run
// made glibc consolidate its free lists on every call, costing ~0.5 us per
// node on graphs of tiny ops).
struct Executor::Frame {
  std::vector<c10::IValue> slots;
  std::vector<c10::IValue> stack;
};

namespace {

class Compiler {
 public:
  Compiler(const Graph& graph, const ExecutionEnvironment& env,
           Executor::Program* program)
      : graph_(graph), env_(env), program_(program) {}

  void compile() {
    for (Node* n : graph_.nodes()) {
      switch (n->op()) {
        case Opcode::kPlaceholder:
          slots_[n] = program_->num_slots;
          program_->input_slots.push_back(program_->num_slots++);
          break;
        case Opcode::kGetAttr:
          if (const Graph* body = graph_.subgraph(n->target().str())) {
            // A body of control flow: compiled once, in the same
            // environment, and called by cond or while_loop.
            constants_[n] = compile_body(*body, env_);
          } else {
            constants_[n] = env_.attribute(n->target().str());
          }
          break;
        case Opcode::kOutput:
          program_->output = source(*n, n->args().at(0), nullptr);
          break;
        default:
          compile_call(*n);
      }
    }
    if (graph_.output_node() == nullptr) {
      throw GraphError("the graph has no output node: add one with "
                       "Graph::output");
    }
    plan_liveness();
  }

 private:
  [[noreturn]] void fail(const Node& n, const std::string& what) {
    throw GraphError(absl::StrCat("cannot compile ", n.format_node(), ": ",
                                  what));
  }

  Source source(const Node& user, const Argument& arg,
                const c10::TypePtr& type) {
    Source s;
    if (!arg.contains_node()) {
      try {
        s.constant = argument_to_ivalue(arg, type);
      } catch (const GraphError& e) {
        fail(user, e.msg());
      }
      return s;
    }
    if (arg.is_node()) {
      Node* n = arg.to_node();
      auto c = constants_.find(n);
      if (c != constants_.end()) {
        s.constant = c->second;
        return s;
      }
      auto it = slots_.find(n);
      if (it == slots_.end()) {
        fail(user, absl::StrCat("%", n->name(),
                                " is used before it is defined"));
      }
      s.kind = Source::Kind::kSlot;
      s.slot = it->second;
      return s;
    }
    c10::TypePtr elem_type;
    c10::TypePtr t = type;
    if (t && t->kind() == c10::TypeKind::OptionalType) {
      t = t->castRaw<c10::OptionalType>()->getElementType();
    }
    if (arg.is_list()) {
      s.kind = Source::Kind::kList;
      if (t && t->kind() == c10::TypeKind::ListType) {
        elem_type = t->castRaw<c10::ListType>()->getElementType();
      }
      s.element_type = elem_type;
    } else {
      s.kind = Source::Kind::kTuple;
    }
    for (const Argument& e : arg.elements()) {
      s.elements.push_back(source(user, e, elem_type));
    }
    return s;
  }

  // Sources for an operator call: one per schema argument, in order.
  std::vector<Source> bind_operator(const Node& n,
                                    const c10::FunctionSchema& schema) {
    const auto& params = schema.arguments();
    // One binding for the executor, the code generator and the passes
    // (fx/ir/operator_schemas.h): too many positional arguments, unknown or
    // repeated keywords are GraphErrors naming the node and the schema.
    std::vector<std::optional<Argument>> bound;
    try {
      bound = bind_node_arguments(n, schema);
    } catch (const GraphError& e) {
      fail(n, e.what());
    }
    std::vector<Source> sources;
    sources.reserve(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      if (bound[i]) {
        sources.push_back(source(n, *bound[i], params[i].type()));
      } else if (params[i].default_value()) {
        Source s;
        s.constant = *params[i].default_value();
        sources.push_back(std::move(s));
      } else {
        fail(n, absl::StrCat("missing argument '", params[i].name(), "' of ",
                             schema_string(schema)));
      }
    }
    return sources;
  }

  std::vector<Source> positional_sources(const Node& n) {
    if (!n.kwargs().empty()) {
      fail(n, "kwargs are not supported for registered functions and leaf "
              "modules (C++ has no keyword arguments): pass them "
              "positionally");
    }
    std::vector<Source> sources;
    for (const Argument& a : n.args()) sources.push_back(source(n, a, nullptr));
    return sources;
  }

  void compile_call(const Node& n) {
    Instruction inst;
    inst.node = &n;
    if (n.op() == Opcode::kCallFunction && n.target().is_operator()) {
      inst.op = n.target().op();
    } else if (n.op() == Opcode::kCallMethod) {
      try {
        inst.op = resolve_method(n);
      } catch (const GraphError& e) {
        fail(n, e.msg());
      }
    }
    if (inst.op) {
      inst.kind = Instruction::Kind::kOperator;
      inst.num_returns = inst.op->schema().returns().size();
      inst.inputs = bind_operator(n, inst.op->schema());
      inst.in_place = in_place_twin(*inst.op);
    } else if (n.op() == Opcode::kCallFunction) {
      inst.kind = Instruction::Kind::kFunction;
      inst.function = &n.target().function();
      inst.inputs = positional_sources(n);
    } else {
      inst.kind = Instruction::Kind::kModule;
      inst.module = env_.module(n.target().str());
      if (inst.module == nullptr) {
        fail(n, absl::StrCat("no leaf module at '", n.target().str(), "'"));
      }
      inst.inputs = positional_sources(n);
    }
    inst.output_slot = program_->num_slots++;
    slots_[&n] = inst.output_slot;
    program_->max_stack =
        std::max(program_->max_stack,
                 std::max(inst.inputs.size(), inst.num_returns));
    program_->instructions.push_back(std::move(inst));
  }

  // Marks each value's last use as a move and schedules values nothing
  // uses for release right after they are produced.
  void plan_liveness() {
    const int32_t kOutputIndex =
        static_cast<int32_t>(program_->instructions.size());
    std::vector<int32_t> last_use(program_->num_slots, -1);
    std::vector<Source*> last_source(program_->num_slots, nullptr);
    std::function<void(Source&, int32_t)> visit = [&](Source& s,
                                                      int32_t index) {
      if (s.kind == Source::Kind::kSlot) {
        last_use[s.slot] = index;
        last_source[s.slot] = &s;
      }
      for (Source& e : s.elements) visit(e, index);
    };
    for (int32_t i = 0; i < kOutputIndex; ++i) {
      for (Source& s : program_->instructions[i].inputs) visit(s, i);
    }
    visit(program_->output, kOutputIndex);
    for (int32_t slot = 0; slot < program_->num_slots; ++slot) {
      if (last_source[slot] != nullptr) {
        last_source[slot]->move = true;
      }
    }
    // Values never used: release right after they are made.
    for (int32_t slot : program_->input_slots) {
      if (last_use[slot] < 0) program_->release_after_inputs.push_back(slot);
    }
    for (Instruction& inst : program_->instructions) {
      if (last_use[inst.output_slot] < 0) {
        inst.release.push_back(inst.output_slot);
      }
      // In place only on a value's last use: no later instruction reads it.
      const Source* self = inst.inputs.empty() ? nullptr : &inst.inputs[0];
      if (inst.in_place && (self == nullptr || self->kind != Source::Kind::kSlot ||
                            !self->move)) {
        inst.in_place.reset();
      }
      if (inst.in_place) {
        inst.self_is_input =
            std::find(program_->input_slots.begin(), program_->input_slots.end(),
                      self->slot) != program_->input_slots.end();
      }
    }
  }

  const Graph& graph_;
  const ExecutionEnvironment& env_;
  Executor::Program* program_;
  absl::flat_hash_map<const Node*, int32_t> slots_;
  absl::flat_hash_map<const Node*, c10::IValue> constants_;
};

}  // namespace

void rethrow_for_node(const Node& node) {
  std::string what;
  try {
    throw;
  } catch (const GuardError&) {
    // A guard inside the graph (fx_guard::check_not_equal): the input is
    // wrong, not the node.
    throw;
  } catch (const c10::Error& e) {
    what = e.what_without_backtrace();
  } catch (const std::exception& e) {
    what = e.what();
  }
  std::string where;
  if (const std::string* path = node.meta().get(kModulePath)) {
    if (!path->empty()) where = absl::StrCat(" (in module ", *path, ")");
  }
  throw ExecutionError(absl::StrCat("While executing ", node.format_node(),
                                    where, "\n", what));
}

Executor::Executor(const Graph& graph, const ExecutionEnvironment& environment)
    : program_(std::make_unique<Program>()) {
  Compiler(graph, environment, program_.get()).compile();
}

Executor::~Executor() = default;

c10::IValue compile_body(const Graph& body,
                         const ExecutionEnvironment& environment) {
  return body_value(c10::make_intrusive<ExecutorBody>(
      std::make_unique<Executor>(body, environment)));
}

std::unique_ptr<Executor::Frame> Executor::acquire_frame() const {
  {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    if (!pool_.empty()) {
      std::unique_ptr<Frame> frame = std::move(pool_.back());
      pool_.pop_back();
      return frame;
    }
  }
  auto frame = std::make_unique<Frame>();
  frame->slots.resize(program_->num_slots);
  frame->stack.reserve(program_->max_stack);
  return frame;
}

void Executor::release_frame(std::unique_ptr<Frame> frame) const {
  std::lock_guard<std::mutex> lock(pool_mutex_);
  pool_.push_back(std::move(frame));
}

c10::IValue Executor::run(std::vector<c10::IValue> inputs, bool donated) const {
  const Program& p = *program_;
  if (inputs.size() != p.input_slots.size()) {
    throw ExecutionError(absl::StrCat("the graph takes ", p.input_slots.size(),
                                      " input(s) but ", inputs.size(),
                                      " were given"));
  }
  std::unique_ptr<Frame> frame = acquire_frame();
  std::vector<c10::IValue>& slots = frame->slots;
  std::vector<c10::IValue>& stack = frame->stack;
  for (size_t i = 0; i < inputs.size(); ++i) {
    slots[p.input_slots[i]] = std::move(inputs[i]);
  }
  for (int32_t slot : p.release_after_inputs) slots[slot] = c10::IValue();
  for (const Instruction& inst : p.instructions) {
    stack.clear();
    for (const Source& s : inst.inputs) p.push(s, slots, stack);
    try {
      switch (inst.kind) {
        case Instruction::Kind::kOperator:
          if (inst.in_place && (donated || !inst.self_is_input) &&
              only_reference(stack)) {
            inst.in_place->callBoxed(&stack);
          } else {
            inst.op->callBoxed(&stack);
          }
          if (inst.num_returns == 1) {
            slots[inst.output_slot] = std::move(stack[0]);
          } else if (inst.num_returns > 1) {
            slots[inst.output_slot] = c10::ivalue::Tuple::create(
                std::vector<c10::IValue>(std::make_move_iterator(stack.begin()),
                                         std::make_move_iterator(stack.end())));
          }
          break;
        case Instruction::Kind::kFunction:
          slots[inst.output_slot] = (*inst.function)(stack);
          break;
        case Instruction::Kind::kModule:
          slots[inst.output_slot] = inst.module->forward(stack);
          break;
      }
    } catch (...) {
      // The frame may hold values: drop it rather than pool it.
      frame.reset();
      rethrow_for_node(*inst.node);
    }
    for (int32_t slot : inst.release) slots[slot] = c10::IValue();
  }
  stack.clear();
  std::vector<c10::IValue> result;
  p.push(p.output, slots, result);
  release_frame(std::move(frame));
  return std::move(result[0]);
}

}  // namespace fx
