// TorchScript out: to_torchscript.
#include "fx/torchscript/torchscript.h"

#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/jit/api/compilation_unit.h>
#include <torch/csrc/jit/ir/ir.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "fx/ir/argument.h"
#include "fx/ir/control_flow.h"
#include "fx/ir/errors.h"
#include "fx/ir/function.h"
#include "fx/ir/meta.h"
#include "fx/runtime/guards.h"

namespace fx {
namespace {

using JitValue = torch::jit::Value;

class Exporter {
 public:
  explicit Exporter(const GraphModuleImpl& gm)
      : gm_(gm),
        cu_(std::make_shared<torch::jit::CompilationUnit>()),
        root_(c10::QualifiedName("__torch__.fx.GraphModule"), cu_,
              /*shouldMangle=*/true),
        graph_(std::make_shared<torch::jit::Graph>()) {}

  torch::jit::Module run() {
    for (const auto& [path, tensor] : gm_.tensor_attributes()) {
      add_tensor(path, tensor, gm_.is_parameter(path));
    }
    // Script objects (packed weights) as attributes of their class's type:
    // torch::jit::save pickles them with their own __getstate__.
    for (const auto& [path, object] : gm_.object_attributes()) {
      std::string name;
      torch::jit::Module parent = parent_of(path, &name);
      parent.register_attribute(name, object.type(), object);
    }
    self_ = graph_->addInput("self");
    self_->setType(root_.type());
    for (const Node* n : gm_.graph().nodes()) node(*n);
    auto* fn = cu_->create_function(
        c10::QualifiedName(*root_.type()->name(), "forward"), graph_);
    root_.type()->addMethod(fn);
    return root_;
  }

 private:
  [[noreturn]] void fail(const Node& n, const std::string& why) const {
    throw GraphError(absl::StrCat("to_torchscript: %", n.name(), " (",
                                  n.format_node(), "): ", why));
  }

  // The submodule holding `path`'s last part (made as needed), which is
  // stored in `name`.
  torch::jit::Module parent_of(const std::string& path, std::string* name) {
    std::vector<std::string> parts = absl::StrSplit(path, '.');
    torch::jit::Module parent = root_;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      if (parent.hasattr(parts[i])) {
        parent = parent.attr(parts[i]).toModule();
      } else {
        torch::jit::Module child(c10::QualifiedName("__torch__.fx.Module"),
                                 cu_, /*shouldMangle=*/true);
        parent.register_module(parts[i], child);
        parent = child;
      }
    }
    *name = parts.back();
    return parent;
  }

  void add_tensor(const std::string& path, const at::Tensor& tensor,
                  bool parameter) {
    std::string name;
    torch::jit::Module parent = parent_of(path, &name);
    if (parameter) {
      parent.register_parameter(name, tensor, /*is_buffer=*/false);
    } else {
      parent.register_buffer(name, tensor);
    }
  }

  // Emits `if failed: raise Exception(message)`; `message` may hold one
  // "{}", filled with `detail`.
  void raise_if(JitValue* failed, const std::string& message,
                JitValue* detail = nullptr) {
    torch::jit::Node* branch =
        graph_->insertNode(graph_->create(c10::prim::If, {failed}, 0));
    torch::jit::WithInsertPoint in_then(branch->addBlock());
    branch->addBlock();
    JitValue* text = graph_->insertConstant(guard_failure_message(
        "fx::to_torchscript module", message, " and export it again"));
    if (detail) {
      text = graph_->insert(c10::Symbol::fromQualString("aten::format"),
                            {text, detail});
    }
    graph_->insert(c10::prim::RaiseException, {text});
  }

  // fx_guard::check_size(a, b, relation, what) as TorchScript:
  //   if not a <relation> b: raise Exception("... {} and {} ...".format(a, b))
  void check_size(const Node& n) {
    if (n.args().size() != 4 || !n.args()[2].is_string() ||
        !n.args()[3].is_string()) {
      fail(n, "fx_guard::check_size takes (a, b, relation, what)");
    }
    static const std::map<std::string, c10::Symbol> kRelations = {
        {"==", c10::aten::eq}, {"!=", c10::aten::ne}, {"<", c10::aten::lt},
        {"<=", c10::aten::le}, {">", c10::aten::gt},  {">=", c10::aten::ge}};
    auto relation = kRelations.find(n.args()[2].to_string_ref());
    if (relation == kRelations.end()) {
      fail(n, "fx_guard::check_size: an unknown relation");
    }
    JitValue* a = value(n, n.args()[0]);
    JitValue* b = value(n, n.args()[1]);
    JitValue* failed = graph_->insert(
        c10::aten::__not__, {graph_->insert(relation->second, {a, b})});
    torch::jit::Node* branch =
        graph_->insertNode(graph_->create(c10::prim::If, {failed}, 0));
    torch::jit::WithInsertPoint in_then(branch->addBlock());
    branch->addBlock();
    JitValue* text = graph_->insert(
        c10::Symbol::fromQualString("aten::format"),
        {graph_->insertConstant(size_check_failure(
             "fx::to_torchscript module", n.args()[3].to_string_ref(), "{}",
             "{}", " and export it again")),
         a, b});
    graph_->insert(c10::prim::RaiseException, {text});
  }

  // fx_guard::check_length(list, n, what) as TorchScript:
  //   if len(list) != n: raise Exception("... {} now".format(len(list)))
  void check_length(const Node& n) {
    if (n.args().size() != 3 || !n.args()[1].is_int() ||
        !n.args()[2].is_string()) {
      fail(n, "fx_guard::check_length takes (list, length, what)");
    }
    JitValue* length = graph_->insert(c10::aten::len, {value(n, n.args()[0])});
    raise_if(differs(length, graph_->insertConstant(n.args()[1].to_int())),
             absl::StrCat("has sizes the trace did not allow: ",
                          n.args()[2].to_string_ref(), " returned ",
                          n.args()[1].to_int(),
                          " tensors while tracing, but {} now"),
             length);
  }

  JitValue* differs(JitValue* actual, JitValue* expected) {
    return graph_->insert(c10::aten::ne, {actual, expected});
  }

  // The checks fx::check_input makes on a GraphModule's input
  // (fx/runtime/guards.h), as TorchScript at the top of forward.
  void check(JitValue* v, const InputGuard& guard, const std::string& who) {
    if (guard.kind == InputGuard::Kind::kTensorList) {
      JitValue* length = graph_->insert(c10::aten::len, {v});
      raise_if(differs(length, graph_->insertConstant(static_cast<int64_t>(
                                   guard.elements.size()))),
               length_mismatch(who, "{}", guard.elements.size()), length);
      for (size_t i = 0; i < guard.elements.size(); ++i) {
        JitValue* element = graph_->insert(
            c10::aten::__getitem__,
            {v, graph_->insertConstant(static_cast<int64_t>(i))});
        check(element, guard.elements[i], absl::StrCat(who, "[", i, "]"));
      }
      return;
    }
    if (guard.kind != InputGuard::Kind::kTensor) return;
    // TorchScript has a dtype as a number, so this one message names only
    // the dtype expected.
    raise_if(differs(graph_->insert(c10::prim::dtype, {v}),
                     graph_->insertConstant(
                         static_cast<int64_t>(guard.dtype))),
             absl::StrCat(who, " does not have dtype ",
                          format_dtype(guard.dtype), ", which the trace saw"));
    JitValue* device = graph_->insert(c10::prim::device, {v});
    raise_if(differs(device, graph_->insertConstant(guard.device)),
             device_mismatch(who, "{}", guard.device), device);
    JitValue* dim = graph_->insert(c10::aten::dim, {v});
    raise_if(differs(dim, graph_->insertConstant(guard.dim)),
             rank_mismatch(who, "{}", guard.dim), dim);
    if (!guard.dynamic.empty()) {
      check_dynamic(v, guard, who);
      return;
    }
    if (!guard.check_sizes) return;
    JitValue* sizes = graph_->insert(c10::aten::size, {v});
    raise_if(differs(sizes, graph_->insertConstant(guard.sizes)),
             shape_mismatch(who, "{}", guard.sizes), sizes);
    if (!guard.check_strides) return;
    JitValue* strides = graph_->insert(c10::aten::stride, {v});
    raise_if(differs(strides, graph_->insertConstant(guard.strides)),
             stride_mismatch(who, "{}", guard.strides), strides);
  }

  // A tensor with dynamic dimensions, as fx::check_input checks it: fixed
  // sizes exactly, dynamic ones against their relations, a symbol equal
  // across the inputs, the example's memory format.
  void check_dynamic(JitValue* v, const InputGuard& guard,
                     const std::string& who) {
    std::vector<const DynamicDim*> by_dim(guard.dim, nullptr);
    for (const DynamicDim& d : guard.dynamic) by_dim.at(d.dim) = &d;
    auto constant = [&](int64_t i) { return graph_->insertConstant(i); };
    for (int64_t i = 0; i < guard.dim; ++i) {
      const DynamicDim* d = by_dim[i];
      if (d == nullptr && !guard.check_sizes) continue;
      JitValue* size = graph_->insert(c10::aten::size, {v, constant(i)});
      if (d == nullptr) {
        raise_if(differs(size, constant(guard.sizes.at(i))),
                 absl::StrCat(who, " has size {} at dimension ", i,
                              " but the traced code read its sizes: it must "
                              "be ", guard.sizes[i], " as in the example"),
                 size);
        continue;
      }
      const std::string outside = outside_bounds(who, "{}", *d);
      raise_if(graph_->insert(c10::aten::lt, {size, constant(d->min)}),
               outside, size);
      if (d->max != std::numeric_limits<int64_t>::max()) {
        raise_if(graph_->insert(c10::aten::gt, {size, constant(d->max)}),
                 outside, size);
      }
      if (d->multiple_of > 1) {
        JitValue* rest = graph_->insert(c10::aten::remainder,
                                        {size, constant(d->multiple_of)});
        raise_if(differs(rest, constant(0)), outside, size);
      }
      auto [it, added] = symbols_.emplace(d->symbol, std::make_pair(size, who));
      if (!added) {
        raise_if(differs(size, it->second.first),
                 absl::StrCat(who, " has ", d->symbol, " = {} (dimension ", i,
                              ") but ", it->second.second, " has another ",
                              d->symbol, ": dimensions named ", d->symbol,
                              " must be equal (the traced program relied on "
                              "it)"),
                 size);
      }
    }
    if (guard.check_strides) {
      const c10::MemoryFormat format =
          memory_format_of(guard.sizes, guard.strides);
      JitValue* laid_out = graph_->insert(
          c10::Symbol::fromQualString("aten::is_contiguous"),
          {v, graph_->insertConstant(static_cast<int64_t>(format))});
      raise_if(graph_->insert(c10::aten::__not__, {laid_out}),
               absl::StrCat(who, " is not ",
                            format == c10::MemoryFormat::ChannelsLast
                                ? "channels-last"
                                : "contiguous",
                            " as the example was, whose strides the traced "
                            "code read"));
    }
  }

  JitValue* value(const Node& user, const Argument& arg) {
    switch (arg.kind()) {
      case ArgumentKind::kNode: return values_.at(arg.to_node());
      case ArgumentKind::kNone: return graph_->insertConstant(c10::IValue());
      case ArgumentKind::kBool: return graph_->insertConstant(arg.to_bool());
      case ArgumentKind::kInt: return graph_->insertConstant(arg.to_int());
      case ArgumentKind::kDouble: return graph_->insertConstant(arg.to_double());
      case ArgumentKind::kComplex:
        return graph_->insertConstant(c10::IValue(arg.to_complex()));
      case ArgumentKind::kString:
        return graph_->insertConstant(arg.to_string_ref());
      case ArgumentKind::kDtype:
        return graph_->insertConstant(static_cast<int64_t>(arg.to_dtype()));
      case ArgumentKind::kLayout:
        return graph_->insertConstant(static_cast<int64_t>(arg.to_layout()));
      case ArgumentKind::kMemoryFormat:
        return graph_->insertConstant(
            static_cast<int64_t>(arg.to_memory_format()));
      case ArgumentKind::kDevice: return graph_->insertConstant(arg.to_device());
      case ArgumentKind::kList:
      case ArgumentKind::kTuple: {
        std::vector<JitValue*> items;
        for (const Argument& e : arg.elements()) items.push_back(value(user, e));
        if (arg.is_tuple()) {
          return graph_->insertNode(graph_->createTuple(items))->output();
        }
        c10::TypePtr element = items.empty() ? c10::IntType::get()
                                              : items.front()->type();
        // The last non-None element's type; Optional of it if any is None.
        bool has_none = false;
        for (JitValue* v : items) {
          if (v->type()->kind() == c10::TypeKind::NoneType) {
            has_none = true;
          } else {
            element = v->type();
          }
        }
        if (element->kind() == c10::TypeKind::TensorType) {
          element = c10::TensorType::get();
        }
        if (has_none) element = c10::OptionalType::create(element);
        return graph_->insertNode(graph_->createList(element, items))->output();
      }
    }
    fail(user, "an argument TorchScript cannot hold");
  }

  void node(const Node& n) {
    switch (n.op()) {
      case Opcode::kPlaceholder: {
        JitValue* v = graph_->addInput(n.name());
        const InputGuard* guard = n.meta().get(kGuard);
        if (guard && guard->kind == InputGuard::Kind::kTensorList) {
          v->setType(c10::ListType::ofTensors());
        } else if (guard && guard->kind == InputGuard::Kind::kValue) {
          fail(n, "non-tensor inputs are baked into the graph; TorchScript "
                  "export takes tensor inputs only");
        } else {
          v->setType(c10::TensorType::get());
        }
        if (guard) {
          check(v, *guard, describe_input(n.name(), inputs_));
        }
        ++inputs_;
        values_[&n] = v;
        return;
      }
      case Opcode::kGetAttr: {
        // A body of control flow: emitted by its cond or while_loop.
        if (Graph::reads_subgraph(n)) return;
        JitValue* v = self_;
        for (absl::string_view part :
             absl::StrSplit(n.target().str(), '.')) {
          v = graph_->insertGetAttr(v, std::string(part));
        }
        values_[&n] = v;
        return;
      }
      case Opcode::kOutput:
        graph_->registerOutput(value(n, n.args().at(0)));
        return;
      case Opcode::kCallModule:
        fail(n, "leaf modules are C++ code, which TorchScript cannot hold; "
                "trace through the module instead");
      case Opcode::kCallFunction:
      case Opcode::kCallMethod:
        break;
    }
    if (n.op() == Opcode::kCallFunction && n.target().is_function() &&
        n.target().function().name() == "dict") {
      // dict(keys, values) -> prim::DictConstruct.
      std::vector<JitValue*> keys, values;
      for (const Argument& k : n.args().at(0).elements()) {
        keys.push_back(value(n, k));
      }
      c10::TypePtr value_type = c10::TensorType::get();
      for (const Argument& v : n.args().at(1).elements()) {
        values.push_back(value(n, v));
        if (!values.back()->type()->isSubtypeOf(*c10::TensorType::get())) {
          value_type = c10::AnyType::get();
        }
      }
      values_[&n] = graph_->insertNode(graph_->createDict(
                                           c10::StringType::get(), value_type,
                                           keys, values))
                        ->output();
      return;
    }
    if (n.op() == Opcode::kCallFunction && n.target().is_operator() &&
        n.target().op().schema().name() == "fx_guard::check_size") {
      check_size(n);
      return;
    }
    if (n.op() == Opcode::kCallFunction && n.target().is_operator() &&
        n.target().op().schema().name() == "fx_guard::check_length") {
      check_length(n);
      return;
    }
    if (is_control_flow_call(n)) {
      values_[&n] = control_flow(n);
      return;
    }
    if (is_sym_call(n)) {
      // Sizes and their arithmetic, as TorchScript computes them.
      const Function& f = n.target().function();
      const char* op = &f == sym_size()  ? "aten::size"
                       : &f == sym_add() ? "aten::add"
                       : &f == sym_mul() ? "aten::mul"
                       : &f == sym_mod() ? "aten::remainder"
                                         : "aten::floordiv";
      values_[&n] = graph_->insert(
          c10::Symbol::fromQualString(op),
          {value(n, n.args().at(0)), value(n, n.args().at(1))});
      return;
    }
    if (n.op() == Opcode::kCallFunction && n.target().is_function()) {
      if (n.target().function().name() != "getitem") {
        fail(n, "functions registered with fx::wrap are C++ code, which "
                "TorchScript cannot hold");
      }
      JitValue* container = value(n, n.args().at(0));
      JitValue* index = value(n, n.args().at(1));
      if (auto tuple = container->type()->cast<c10::TupleType>()) {
        int64_t i = n.args().at(1).to_int();
        values_[&n] = graph_->insertNode(graph_->createTupleIndex(
                                             container, index,
                                             tuple->elements().at(i)))
                          ->output();
      } else {
        values_[&n] = graph_->insert(c10::Symbol::fromQualString(
                                         "aten::__getitem__"),
                                     {container, index});
      }
      return;
    }
    std::string name = n.op() == Opcode::kCallMethod
                           ? "aten::" + n.target().str()
                           : n.target().op().operator_name().name;
    std::vector<torch::jit::NamedValue> args;
    for (const Argument& a : n.args()) args.emplace_back(value(n, a));
    std::vector<torch::jit::NamedValue> kwargs;
    for (const auto& [key, a] : n.kwargs()) kwargs.emplace_back(key, value(n, a));
    try {
      values_[&n] =
          graph_->insert(c10::Symbol::fromQualString(name), args, kwargs);
    } catch (const std::exception& e) {
      fail(n, absl::StrCat("TorchScript has no matching call: ", e.what()));
    }
  }

  // The nodes of `body` at the insert point, its placeholders standing for
  // `inputs`; returns its outputs.
  std::vector<JitValue*> inline_body(const Node& user, const Graph& body,
                                     const std::vector<JitValue*>& inputs) {
    const std::vector<Node*> placeholders = body.placeholders();
    if (placeholders.size() != inputs.size()) {
      fail(user, absl::StrCat("a body takes ", placeholders.size(),
                              " inputs and is given ", inputs.size()));
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      values_[placeholders[i]] = inputs[i];
    }
    std::vector<JitValue*> outputs;
    for (const Node* b : body.nodes()) {
      if (b->op() == Opcode::kPlaceholder) continue;
      if (b->op() == Opcode::kOutput) {
        const Argument& out = b->args().at(0);
        if (out.is_sequence()) {
          for (const Argument& e : out.elements()) {
            outputs.push_back(value(*b, e));
          }
        } else {
          outputs.push_back(value(*b, out));
        }
        continue;
      }
      node(*b);
    }
    return outputs;
  }

  std::vector<JitValue*> values_of(const Node& n, const Argument& list) {
    std::vector<JitValue*> out;
    for (const Argument& e : list.elements()) out.push_back(value(n, e));
    return out;
  }

  JitValue* truth(JitValue* v) {
    return v->type()->kind() == c10::TypeKind::BoolType
               ? v
               : graph_->insert(c10::aten::Bool, {v});
  }

  // Raises `message` where `condition` (a bool) is true (raise_if's
  // message is a guard's).
  void raise_error_if(JitValue* condition, const std::string& message) {
    torch::jit::Node* check =
        graph_->insertNode(graph_->create(c10::prim::If, {condition}, 0));
    torch::jit::WithInsertPoint in_then(check->addBlock());
    check->addBlock();
    graph_->insert(c10::prim::RaiseException,
                   {graph_->insertConstant(message)});
  }

  // Each next carried value checked to keep its dtype and sizes, as fx's
  // while_loop and scan check.
  void check_carried(const Node& n, const char* function,
                     const std::vector<JitValue*>& current,
                     const std::vector<JitValue*>& next) {
    for (size_t i = 0; i < next.size() && i < current.size(); ++i) {
      JitValue* same = graph_->insert(
          c10::aten::__and__,
          {graph_->insert(c10::aten::eq,
                          {graph_->insert(c10::prim::dtype, {next[i]}),
                           graph_->insert(c10::prim::dtype, {current[i]})}),
           graph_->insert(c10::aten::eq,
                          {graph_->insert(c10::aten::size, {next[i]}),
                           graph_->insert(c10::aten::size, {current[i]})})});
      raise_error_if(graph_->insert(c10::aten::__not__, {same}),
               absl::StrCat(function, " %", n.name(), ": an iteration changed "
                            "carried value ", i, " in dtype or sizes; a loop's "
                            "carried values keep their dtypes and sizes, as "
                            "torch.", function, "'s do"));
    }
  }

  // scan and map as prim::Loop over dimension 0 of the xs (their length
  // checked to be at least 1), each step's ys appended to lists stacked
  // after it.
  std::vector<JitValue*> scan(const Node& n, const Graph& body) {
    const bool is_scan = &n.target().function() == scan_function();
    const std::vector<JitValue*> carried =
        is_scan ? values_of(n, n.args().at(1)) : std::vector<JitValue*>{};
    const std::vector<JitValue*> xs = values_of(n, n.args().at(is_scan ? 2 : 1));
    const std::vector<JitValue*> additional =
        values_of(n, n.args().at(is_scan ? 3 : 2));
    const char* function = is_scan ? "scan" : "map";
    if (xs.empty()) {
      throw GraphError(absl::StrCat("to_torchscript: %", n.name(), " (",
                                    function, ") runs over no xs"));
    }
    JitValue* zero = graph_->insertConstant(0);
    JitValue* length = graph_->insert(c10::aten::size, {xs[0], zero});
    for (size_t k = 1; k < xs.size(); ++k) {
      raise_error_if(graph_->insert(
                   c10::aten::ne,
                   {graph_->insert(c10::aten::size, {xs[k], zero}), length}),
               absl::StrCat(function, " %", n.name(), ": the xs differ in "
                            "length along dimension 0"));
    }
    raise_error_if(graph_->insert(c10::aten::eq, {length, zero}),
             absl::StrCat(function, " %", n.name(), " over xs of length 0: no "
                          "step would run to give its outputs' shapes"));
    const size_t ys = body.output_node()->args().at(0).is_sequence()
                          ? body.output_node()->args().at(0).elements().size() -
                                carried.size()
                          : 1 - carried.size();
    std::vector<JitValue*> lists;
    for (size_t k = 0; k < ys; ++k) {
      lists.push_back(graph_->insertNode(
          graph_->createList(c10::TensorType::get(), {}))->output());
    }
    std::vector<JitValue*> loop_inputs = {length,
                                          graph_->insertConstant(true)};
    loop_inputs.insert(loop_inputs.end(), carried.begin(), carried.end());
    torch::jit::Node* loop =
        graph_->insertNode(graph_->create(c10::prim::Loop, loop_inputs, 0));
    torch::jit::Block* block = loop->addBlock();
    JitValue* i = block->addInput()->setType(c10::IntType::get());
    std::vector<JitValue*> current;
    for (JitValue* v : carried) {
      current.push_back(block->addInput()->setType(v->type()));
    }
    {
      torch::jit::WithInsertPoint in_block(block);
      std::vector<JitValue*> in = current;
      for (JitValue* x : xs) {
        in.push_back(graph_->insert(c10::aten::select, {x, zero, i}));
      }
      in.insert(in.end(), additional.begin(), additional.end());
      const std::vector<JitValue*> out = inline_body(n, body, in);
      const std::vector<JitValue*> next(out.begin(),
                                        out.begin() + carried.size());
      check_carried(n, function, current, next);
      for (size_t k = 0; k < ys; ++k) {
        graph_->insert(c10::aten::append, {lists[k], out.at(carried.size() + k)});
      }
      block->registerOutput(graph_->insertConstant(true));
      for (JitValue* v : next) block->registerOutput(v);
    }
    std::vector<JitValue*> outputs;
    for (JitValue* v : carried) {
      outputs.push_back(loop->addOutput()->setType(v->type()));
    }
    for (JitValue* list : lists) {
      outputs.push_back(graph_->insert(c10::aten::stack, {list, zero}));
    }
    return outputs;
  }

  // cond as prim::If with a block per branch; scan and map as above;
  // while_loop as prim::Loop
  // (`while cond(carried): carried = body(carried)`), each carried value
  // checked to keep its dtype and sizes, as fx's while_loop checks. The
  // node's value is a tuple of the outputs, as the GraphModule's.
  JitValue* control_flow(const Node& n) {
    const std::vector<const Graph*> bodies = bodies_of(n);
    std::vector<JitValue*> outputs;
    if (&n.target().function() == scan_function() ||
        &n.target().function() == map_function()) {
      outputs = scan(n, *bodies[0]);
    } else if (&n.target().function() == cond_function()) {
      JitValue* pred = truth(value(n, n.args().at(0)));
      const std::vector<JitValue*> operands = values_of(n, n.args().at(3));
      torch::jit::Node* branch =
          graph_->insertNode(graph_->create(c10::prim::If, {pred}, 0));
      size_t count = 0;
      for (const Graph* body : bodies) {
        torch::jit::Block* block = branch->addBlock();
        torch::jit::WithInsertPoint in_block(block);
        const std::vector<JitValue*> out = inline_body(n, *body, operands);
        count = out.size();
        for (JitValue* v : out) block->registerOutput(v);
      }
      for (size_t i = 0; i < count; ++i) {
        outputs.push_back(branch->addOutput()->setType(c10::TensorType::get()));
      }
    } else {
      const std::vector<JitValue*> carried = values_of(n, n.args().at(2));
      const std::vector<JitValue*> additional = values_of(n, n.args().at(3));
      auto with_additional = [&](std::vector<JitValue*> values) {
        values.insert(values.end(), additional.begin(), additional.end());
        return values;
      };
      JitValue* first = truth(
          inline_body(n, *bodies[0], with_additional(carried)).at(0));
      std::vector<JitValue*> loop_inputs = {
          graph_->insertConstant(std::numeric_limits<int64_t>::max()), first};
      loop_inputs.insert(loop_inputs.end(), carried.begin(), carried.end());
      torch::jit::Node* loop =
          graph_->insertNode(graph_->create(c10::prim::Loop, loop_inputs, 0));
      torch::jit::Block* block = loop->addBlock();
      block->addInput()->setType(c10::IntType::get());
      std::vector<JitValue*> current;
      for (JitValue* v : carried) {
        current.push_back(block->addInput()->setType(v->type()));
      }
      {
        torch::jit::WithInsertPoint in_block(block);
        const std::vector<JitValue*> next =
            inline_body(n, *bodies[1], with_additional(current));
        check_carried(n, "while_loop", current, next);
        JitValue* again =
            truth(inline_body(n, *bodies[0], with_additional(next)).at(0));
        block->registerOutput(again);
        for (JitValue* v : next) block->registerOutput(v);
      }
      for (JitValue* v : carried) {
        outputs.push_back(loop->addOutput()->setType(v->type()));
      }
    }
    return graph_->insertNode(graph_->createTuple(outputs))->output();
  }

  const GraphModuleImpl& gm_;
  std::shared_ptr<torch::jit::CompilationUnit> cu_;
  torch::jit::Module root_;
  std::shared_ptr<torch::jit::Graph> graph_;
  JitValue* self_ = nullptr;
  size_t inputs_ = 0;
  absl::flat_hash_map<const Node*, JitValue*> values_;
  // The size of each dynamic symbol where an input first has it.
  std::map<std::string, std::pair<JitValue*, std::string>> symbols_;
};

}  // namespace

torch::jit::Module to_torchscript(const GraphModuleImpl& gm) {
  return Exporter(gm).run();
}

}  // namespace fx
