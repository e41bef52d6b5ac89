#include "codegen/module_codegen.h"

#include <cctype>
#include <map>
#include <set>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "fx/emit/cpp_code.h"
#include "fx/ir/errors.h"
#include "fx/ir/function.h"

namespace fx {
namespace codegen {
namespace {

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

std::string sizes_literal(c10::IntArrayRef sizes) {
  return absl::StrCat("{", absl::StrJoin(sizes, ", "), "}");
}

std::string dtype_literal(c10::ScalarType dtype) {
  return absl::StrCat("at::ScalarType::", c10::toString(dtype));
}

// "at::Tensor forward(at::Tensor x)" -> "at::Tensor Net::forward(at::Tensor x)"
std::string qualify(const std::string& signature, const std::string& function,
                    const std::string& class_name) {
  const std::string needle = absl::StrCat(" ", function, "(");
  size_t at = signature.find(needle);
  if (at == std::string::npos) {
    throw GraphError(absl::StrCat("emit_module: unexpected signature '",
                                  signature, "'"));
  }
  return absl::StrCat(signature.substr(0, at + 1), class_name, "::",
                      signature.substr(at + 1));
}

// The definition of `f` (named `name`) and of the parts it continues in, as
// members of `class_name`.
void define(std::string* out, const Forward& f, const std::string& name,
            const std::string& class_name) {
  absl::StrAppend(out, "\n", qualify(f.signature, name, class_name), " {\n",
                  f.body, "}\n");
  for (const Forward::Part& part : f.parts) {
    // Named in its signature: forward_part_1, a body of control flow
    // (forward_true_graph_0).
    const size_t paren = part.signature.find('(');
    size_t start = paren;
    while (start > 0 && (std::isalnum(static_cast<unsigned char>(
                             part.signature[start - 1])) ||
                         part.signature[start - 1] == '_')) {
      --start;
    }
    absl::StrAppend(out, "\n",
                    qualify(part.signature,
                            part.signature.substr(start, paren - start),
                            class_name),
                    " {\n", part.body, "}\n");
  }
}

class ModuleEmitter {
 public:
  ModuleEmitter(const GraphModuleImpl& module, const ModuleOptions& options)
      : module_(module), options_(options) {}

  // The class: names checked, members named, the init steps' and forward's
  // code emitted, then the header and the source around them.
  GeneratedModule emit() {
    check_names();
    name_members();
    emit_functions();
    collect_members();
    GeneratedModule out;
    out.header = header();
    out.source = source(&out.bound_tensors);
    return out;
  }

 private:
  void check_names() const {
    if (!is_identifier(options_.class_name)) {
      throw GraphError(absl::StrCat("emit_module: class name '",
                                    options_.class_name,
                                    "' is not a C++ identifier"));
    }
    for (absl::string_view part :
         absl::StrSplit(options_.namespace_name, "::", absl::SkipEmpty())) {
      if (!is_identifier(std::string(part))) {
        throw GraphError(absl::StrCat("emit_module: namespace '",
                                      options_.namespace_name,
                                      "' is not a C++ namespace name"));
      }
    }
  }

  // Init steps, then forward, sharing the member names.
  void emit_functions() {
    const auto& steps = module_.init_steps();
    for (size_t i = 0; i < steps.size(); ++i) {
      CodegenOptions o;
      o.guards = false;
      o.function_name = absl::StrCat("init_", i);
      o.member_names = members_;
      o.tensors_as_vector = true;
      o.max_nodes_per_function = options_.max_nodes_per_function;
      o.objects = object_paths();
      init_.push_back(emit_forward(*steps[i].graph, o));
      for (const std::string& path : steps[i].outputs) computed_.insert(path);
    }
    CodegenOptions o;
    o.member_names = members_;
    o.max_nodes_per_function = options_.max_nodes_per_function;
    o.objects = object_paths();
    forward_ = emit_forward(module_.graph(), o);
  }

  std::set<std::string> object_paths() const {
    std::set<std::string> paths;
    for (const auto& item : module_.object_attributes()) paths.insert(item.first);
    return paths;
  }

  // Every member, in order of first use.
  void collect_members() {
    absl::flat_hash_set<std::string> seen;
    auto collect = [&](const Forward& f) {
      for (const auto& m : f.tensors) {
        if (seen.insert(m.path).second) tensors_.push_back(m);
      }
      for (const auto& m : f.leaf_modules) {
        if (seen.insert(m.path).second) leaves_.push_back(m);
      }
      for (const auto& m : f.objects) {
        if (seen.insert(m.path).second) objects_.push_back(m);
      }
    };
    for (const Forward& f : init_) collect(f);
    collect(forward_);
    // Outputs of init steps nothing reads are still members (run_init
    // assigns them).
    for (const auto& step : module_.init_steps()) {
      for (const std::string& path : step.outputs) {
        if (seen.insert(path).second) {
          (module_.has_object_attribute(path) ? objects_ : tensors_)
              .push_back({members_.at(path), path});
        }
      }
    }
  }

  std::vector<std::string> namespaces() const {
    return absl::StrSplit(options_.namespace_name, "::", absl::SkipEmpty());
  }

  void open_namespaces(std::string* out) const {
    const std::vector<std::string> names = namespaces();
    for (const auto& ns : names) absl::StrAppend(out, "namespace ", ns, " {\n");
    if (!names.empty()) *out += "\n";
  }

  void close_namespaces(std::string* out) const {
    const std::vector<std::string> names = namespaces();
    if (!names.empty()) *out += "\n";
    for (auto it = names.rbegin(); it != names.rend(); ++it) {
      absl::StrAppend(out, "}  // namespace ", *it, "\n");
    }
  }

  std::string header() const {
    const std::string& cls = options_.class_name;
    std::string h;
    absl::StrAppend(&h,
                    "// Generated by fx for LibTorch (codegen/module_codegen.h) "
                    "from a traced\n// GraphModule. Do not edit: generate it "
                    "again.\n#pragma once\n\n#include <string>\n#include "
                    "<vector>\n\n#include <ATen/core/Tensor.h>\n#include "
                    "<ATen/core/ivalue.h>\n#include <torch/nn/module.h>\n\n"
                    "#include \"codegen/runtime.h\"\n\n");
    open_namespaces(&h);
    absl::StrAppend(
        &h, "class ", cls, " {\n public:\n",
        "  // Binds the tensors by qualified name (fx::named_tensors(model), or\n"
        "  // fx::load_tensors(file)) and the leaf modules by path, then runs\n"
        "  // the init steps. Throws fx::GraphError naming what is missing or\n"
        "  // has another dtype or shape than the code was generated for.\n",
        "  explicit ", cls,
        "(const fx::TensorMap& tensors,\n      const fx::LeafModuleMap& "
        "leaf_modules = {});\n",
        "  explicit ", cls,
        "(const torch::nn::Module& model,\n      const fx::LeafModuleMap& "
        "leaf_modules = {})\n      : ",
        cls, "(fx::named_tensors(model), leaf_modules) {}\n\n",
        "  ", forward_.signature, ";\n\n",
        "  // Computes the folded tensors again from the bound ones (after new\n"
        "  // weights were loaded into them).\n  void run_init();\n\n",
        "  // The qualified names of the tensors the constructor binds.\n",
        "  static const std::vector<std::string>& tensor_names();\n\n",
        " private:\n");
    bool private_functions = false;
    for (const Forward* f : all_functions()) {
      if (f != &forward_) {
        absl::StrAppend(&h, "  ", f->signature, ";\n");
        private_functions = true;
      }
      for (const Forward::Part& part : f->parts) {
        absl::StrAppend(&h, "  ", part.signature, ";\n");
        private_functions = true;
      }
    }
    if (private_functions) h += "\n";
    for (const auto& m : tensors_) {
      absl::StrAppend(&h, "  at::Tensor ", m.name, ";  // ", m.path, "\n");
    }
    for (const auto& m : leaves_) {
      absl::StrAppend(&h, "  fx::LeafModule ", m.name, ";  // ", m.path, "\n");
    }
    for (const auto& m : objects_) {
      absl::StrAppend(&h, "  c10::IValue ", m.name, ";  // ", m.path,
                      " (script object, made by run_init)\n");
    }
    h += "};\n";
    close_namespaces(&h);
    return h;
  }

  // What the constructor does with the tensors, leaf modules and
  // registered functions, and the tables it reads.
  struct Bindings {
    std::string constants;           // embedded constant arrays
    std::vector<std::string> binds;  // constructor statements
    // The tensors bound by path, as a table the constructor loops over (a
    // statement per tensor makes a constructor too large to compile for
    // graphs of 100k nodes).
    std::string sizes_table, bound_table, members_table;
    size_t sizes_offset = 0;
  };

  Bindings bindings(std::vector<std::string>* bound_tensors) const {
    const std::string& cls = options_.class_name;
    Bindings b;
    int constant_index = 0;
    for (const auto& m : tensors_) {
      if (computed_.count(m.path)) continue;
      at::Tensor t = module_.fetch_attr(m.path);
      if (absl::StartsWith(m.path, "_tensor_constant")) {
        b.binds.push_back(embed_constant(m, t, constant_index++, &b.constants));
        continue;
      }
      bound_tensors->push_back(m.path);
      absl::StrAppend(&b.sizes_table, "\n    ", absl::StrJoin(t.sizes(), ", "),
                      t.dim() ? ",  // " : "// ", m.path);
      absl::StrAppend(&b.bound_table, "\n    {", string_literal(m.path), ", ",
                      dtype_literal(t.scalar_type()), ", kSizes + ",
                      b.sizes_offset, ", ", t.dim(), "},");
      absl::StrAppend(&b.members_table, "\n      &", cls, "::", m.name, ",");
      b.sizes_offset += t.dim();
    }
    if (!bound_tensors->empty()) {
      b.binds.insert(
          b.binds.begin(),
          absl::StrCat("  static constexpr at::Tensor ", cls,
                       "::*kMembers[] = {", b.members_table,
                       "\n  };\n  for (size_t i = 0; i < ",
                       bound_tensors->size(),
                       "; ++i) {\n    this->*kMembers[i] = "
                       "fx::bind_tensor(tensors, kBoundTensors[i], kClass);\n"
                       "  }\n"));
    }
    for (const auto& m : leaves_) {
      b.binds.push_back(absl::StrCat("  ", m.name,
                                     " = fx::bind_leaf_module(leaf_modules, ",
                                     string_literal(m.path), ", kClass);\n"));
    }
    for (const std::string& f : registered_functions()) {
      b.binds.push_back(absl::StrCat("  fx::bind_function(", string_literal(f),
                                     ", kClass);\n"));
    }
    return b;
  }

  // A constant the trace made, as a byte array in the source; returns the
  // constructor statement that makes the tensor from it.
  static std::string embed_constant(const Forward::Member& m,
                                    const at::Tensor& t, int index,
                                    std::string* constants) {
    at::Tensor contiguous = t.contiguous().cpu();
    const auto* bytes = static_cast<const unsigned char*>(contiguous.data_ptr());
    const size_t n = contiguous.nbytes();
    std::string array = absl::StrCat("kConstant", index);
    absl::StrAppend(constants, "// ", m.path, "\nconst unsigned char ", array,
                    "[", std::max<size_t>(n, 1), "] = {");
    for (size_t i = 0; i < n; ++i) {
      if (i % 16 == 0) *constants += "\n    ";
      absl::StrAppend(constants, static_cast<int>(bytes[i]),
                      i + 1 < n ? "," : "");
    }
    *constants += "};\n";
    return absl::StrCat("  ", m.name, " = fx::embedded_tensor(", array, ", ", n,
                        ", ", dtype_literal(t.scalar_type()), ", ",
                        sizes_literal(t.sizes()), ");\n");
  }

  // Registered functions the init steps and forward call.
  std::set<std::string> registered_functions() const {
    std::set<std::string> functions;
    auto collect = [&](const Graph& g) {
      for (Node* n : g.find_nodes(Opcode::kCallFunction)) {
        if (n->target().is_function() &&
            n->target().function().name() != "getitem" &&
            n->target().function().name() != "dict") {
          functions.insert(n->target().function().name());
        }
      }
    };
    for (const auto& step : module_.init_steps()) collect(*step.graph);
    collect(module_.graph());
    return functions;
  }

  std::string source(std::vector<std::string>* bound_tensors) const {
    const std::string& cls = options_.class_name;
    std::string c;
    absl::StrAppend(&c,
                    "// Generated by fx for LibTorch (codegen/module_codegen.h). "
                    "Do not edit.\n#include ",
                    string_literal(options_.header_include),
                    "\n\n#include <ATen/ATen.h>\n#include <ATen/Operators.h>\n"
                    "#include <ATen/core/dispatch/Dispatcher.h>\n"
                    "#include <ATen/core/grad_mode.h>\n\n");
    open_namespaces(&c);
    Bindings b = bindings(bound_tensors);
    c += "namespace {\n\n";
    absl::StrAppend(&c, "constexpr char kClass[] = ", string_literal(cls), ";\n");
    if (!bound_tensors->empty()) {
      if (b.sizes_offset == 0) b.sizes_table = "\n    0,  // (all 0-dim)";
      absl::StrAppend(
          &c,
          "\n// The tensors the constructor binds by qualified path, with the "
          "dtype and\n// sizes the code was generated for.\nconstexpr int64_t "
          "kSizes[] = {",
          b.sizes_table, "\n};\nconstexpr fx::BoundTensor kBoundTensors[] = {",
          b.bound_table, "\n};\n");
    }
    if (!b.constants.empty()) absl::StrAppend(&c, "\n", b.constants);
    c += "\n}  // namespace\n\n";
    absl::StrAppend(&c, cls, "::", cls,
                    "(const fx::TensorMap& tensors,\n    const "
                    "fx::LeafModuleMap& leaf_modules) {\n");
    if (bound_tensors->empty()) c += "  (void)tensors;\n";
    if (leaves_.empty()) c += "  (void)leaf_modules;\n";
    for (const std::string& bind : b.binds) c += bind;
    c += "  run_init();\n}\n\n";
    append_run_init(&c);
    absl::StrAppend(&c, "const std::vector<std::string>& ", cls,
                    "::tensor_names() {\n");
    if (bound_tensors->empty()) {
      c += "  static const std::vector<std::string> names;\n";
    } else {
      c += "  static const std::vector<std::string> names(\n"
           "      std::begin(kBoundTensors), std::end(kBoundTensors));\n";
    }
    c += "  return names;\n}\n";
    for (size_t i = 0; i < init_.size(); ++i) {
      define(&c, init_[i], absl::StrCat("init_", i), cls);
    }
    define(&c, forward_, "forward", cls);
    close_namespaces(&c);
    return c;
  }

  void append_run_init(std::string* c) const {
    const auto& steps = module_.init_steps();
    absl::StrAppend(c, "void ", options_.class_name, "::run_init() {\n");
    if (!init_.empty()) *c += "  at::NoGradGuard no_grad;\n";
    for (size_t i = 0; i < steps.size(); ++i) {
      bool objects = false;
      for (const std::string& path : steps[i].outputs) {
        objects = objects || module_.has_object_attribute(path);
      }
      absl::StrAppend(c, "  {\n    std::vector<",
                      objects ? "c10::IValue" : "at::Tensor", "> out = init_",
                      i, "();\n");
      for (size_t k = 0; k < steps[i].outputs.size(); ++k) {
        const std::string& path = steps[i].outputs[k];
        const bool tensor = objects && !module_.has_object_attribute(path);
        absl::StrAppend(c, "    ", members_.at(path), " = std::move(out[", k,
                        "])", tensor ? ".toTensor()" : "", ";\n");
      }
      *c += "  }\n";
    }
    *c += "}\n\n";
  }

  // One member name per tensor and leaf path, in order of first use: init
  // graphs, then the main graph, then init outputs.
  void name_members() {
    absl::flat_hash_set<std::string> used;
    auto add = [&](const std::string& path) {
      if (members_.count(path)) return;
      const std::string base = member_base_name(path);
      std::string name = base + "_";
      for (int i = 1; used.contains(name); ++i) {
        name = absl::StrCat(base, "_", i, "_");
      }
      used.insert(name);
      members_[path] = name;
    };
    auto walk = [&](const Graph& g) {
      for (Node* n : g.nodes()) {
        if (n->op() == Opcode::kGetAttr || n->op() == Opcode::kCallModule) {
          add(n->target().str());
        }
      }
    };
    for (const auto& step : module_.init_steps()) walk(*step.graph);
    walk(module_.graph());
    for (const auto& step : module_.init_steps()) {
      for (const std::string& path : step.outputs) add(path);
    }
  }

  const GraphModuleImpl& module_;
  const ModuleOptions& options_;
  std::map<std::string, std::string> members_;
  // The init functions, then forward.
  std::vector<const Forward*> all_functions() const {
    std::vector<const Forward*> out;
    for (const Forward& f : init_) out.push_back(&f);
    out.push_back(&forward_);
    return out;
  }

  std::vector<Forward> init_;
  Forward forward_;
  // Paths the init steps compute (not bound by the constructor).
  std::set<std::string> computed_;
  // Members in order of first use.
  std::vector<Forward::Member> tensors_, leaves_, objects_;
};

}  // namespace

GeneratedModule emit_module(const GraphModuleImpl& module,
                            const ModuleOptions& options) {
  return ModuleEmitter(module, options).emit();
}

}  // namespace codegen
}  // namespace fx
