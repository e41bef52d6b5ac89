#include "fx/io/serialization.h"

#include <cstring>
#include <exception>
#include <istream>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <utility>
#include <vector>

#include <caffe2/serialize/inline_container.h>
#include <torch/serialize.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fx/io/internal/files.h"
#include "fx/io/parser.h"
#include "fx/ir/errors.h"

namespace fx {
namespace {

constexpr const char* kFormat = "fx.GraphModule";
constexpr int64_t kVersion = 1;

c10::impl::GenericDict make_dict() {
  return c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get());
}

c10::IValue int_list(const std::vector<int64_t>& values) {
  return c10::IValue(c10::List<int64_t>(values));
}

// --- Meta to IValues --------------------------------------------------------
// tensor_meta: (sizes, strides, dtype, device, requires_grad,
// memory_format[, symbolic_sizes, symbolic_strides]); the last two, lists of
// SizeExpr strings ("B", "4*T"), when a size varies with a dynamic one.
c10::IValue encode(const TensorMeta& m) {
  std::vector<c10::IValue> fields = {
      int_list(m.sizes), int_list(m.strides), format_dtype(m.dtype),
      m.device.str(), m.requires_grad, format_memory_format(m.memory_format)};
  if (!m.symbolic_sizes.empty()) {
    for (const auto* exprs : {&m.symbolic_sizes, &m.symbolic_strides}) {
      c10::List<std::string> texts;
      for (const SizeExpr& e : *exprs) texts.push_back(e.to_string());
      fields.emplace_back(texts);
    }
  }
  return c10::ivalue::Tuple::create(std::move(fields));
}

const char* guard_kind_name(InputGuard::Kind kind) {
  switch (kind) {
    case InputGuard::Kind::kTensor: return "tensor";
    case InputGuard::Kind::kValue: return "value";
    case InputGuard::Kind::kTensorList: return "tensor_list";
  }
  return "tensor";
}

// guard: (kind, dtype, device, dim, check_sizes, sizes, value, elements,
// check_strides, strides[, dynamic]); files written before strides were
// guarded have the first eight; `dynamic` is there when a dimension is, as
// a list of (input, dim, symbol, min, max, multiple_of).
c10::IValue encode(const InputGuard& g) {
  c10::impl::GenericList elements(c10::AnyType::get());
  for (const InputGuard& e : g.elements) elements.push_back(encode(e));
  std::vector<c10::IValue> fields = {
      guard_kind_name(g.kind), format_dtype(g.dtype), g.device.str(), g.dim,
      g.check_sizes, int_list(g.sizes), g.value, elements, g.check_strides,
      int_list(g.strides)};
  if (!g.dynamic.empty()) {
    c10::impl::GenericList dynamic(c10::AnyType::get());
    for (const DynamicDim& d : g.dynamic) {
      dynamic.push_back(c10::ivalue::Tuple::create(
          {static_cast<int64_t>(d.input), d.dim, d.symbol, d.min, d.max,
           d.multiple_of}));
    }
    fields.emplace_back(std::move(dynamic));
  }
  return c10::ivalue::Tuple::create(std::move(fields));
}

// The graph ("") and its bodies at every depth ("body:", "body.inner:"):
// the prefixes of their nodes' keys in the file's meta.
std::vector<std::pair<std::string, const Graph*>> graphs_by_path(
    const Graph& graph, const std::string& path = "") {
  std::vector<std::pair<std::string, const Graph*>> out{
      {path.empty() ? "" : path + ":", &graph}};
  for (const auto& [name, body] : graph.subgraphs()) {
    auto inner = graphs_by_path(*body, path.empty() ? name : path + "." + name);
    out.insert(out.end(), inner.begin(), inner.end());
  }
  return out;
}

c10::impl::GenericDict encode_meta(const Node& node) {
  c10::impl::GenericDict out = make_dict();
  const Meta& meta = node.meta();
  if (const auto* m = meta.get(kTensorMeta)) out.insert("tensor_meta", encode(*m));
  if (const auto* list = meta.get(kTensorMetaList)) {
    c10::impl::GenericList metas(c10::AnyType::get());
    for (const TensorMeta& m : *list) metas.push_back(encode(m));
    out.insert("tensor_meta_list", metas);
  }
  if (const auto* path = meta.get(kModulePath)) out.insert("module_path", *path);
  if (const auto* trace = meta.get(kStackTrace)) out.insert("stack_trace", *trace);
  if (const auto* guard = meta.get(kGuard)) out.insert("guard", encode(*guard));
  return out;
}

// --- Reading ----------------------------------------------------------------
// Checked access to the loaded IValues; errors name the file and the entry.
class Reader {
 public:
  // `source` names what is read: "'model.fx'" or "the stream".
  explicit Reader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& where,
                         const std::string& problem) const {
    throw GraphError(absl::StrCat("fx::load: ", source_, ": ", where, " ",
                                  problem,
                                  "; the file is damaged or was not written "
                                  "by fx::save"));
  }

  const c10::IValue& entry(const c10::impl::GenericDict& dict,
                           const std::string& key,
                           const std::string& where) const {
    auto it = dict.find(key);
    if (it == dict.end()) fail(where, absl::StrCat("has no '", key, "' entry"));
    return it->value();
  }
  const std::string& string(const c10::IValue& v, const std::string& where) const {
    if (!v.isString()) fail(where, absl::StrCat("is a ", v.tagKind(), ", not a string"));
    return v.toStringRef();
  }
  int64_t integer(const c10::IValue& v, const std::string& where) const {
    if (!v.isInt()) fail(where, absl::StrCat("is a ", v.tagKind(), ", not an int"));
    return v.toInt();
  }
  bool boolean(const c10::IValue& v, const std::string& where) const {
    if (!v.isBool()) fail(where, absl::StrCat("is a ", v.tagKind(), ", not a bool"));
    return v.toBool();
  }
  std::vector<int64_t> ints(const c10::IValue& v, const std::string& where) const {
    std::vector<int64_t> out;
    for (const c10::IValue& e : list(v, where)) out.push_back(integer(e, where));
    return out;
  }
  std::vector<SizeExpr> size_exprs(const c10::IValue& v,
                                   const std::string& where) const {
    std::vector<SizeExpr> out;
    for (const c10::IValue& e : list(v, where)) {
      std::optional<SizeExpr> expr = SizeExpr::parse(string(e, where));
      if (!expr) {
        fail(where, absl::StrCat("has '", e.toStringRef(),
                                 "', which is no symbolic size"));
      }
      out.push_back(*expr);
    }
    return out;
  }
  std::vector<c10::IValue> list(const c10::IValue& v,
                                const std::string& where) const {
    if (!v.isList()) fail(where, absl::StrCat("is a ", v.tagKind(), ", not a list"));
    return v.toListRef().vec();
  }
  std::vector<c10::IValue> tuple(const c10::IValue& v, size_t size,
                                        const std::string& where) const {
    if (!v.isTuple() || v.toTupleRef().elements().size() != size) {
      fail(where, absl::StrCat("is not a tuple of ", size));
    }
    return v.toTupleRef().elements().vec();
  }
  c10::impl::GenericDict dict(const c10::IValue& v,
                              const std::string& where) const {
    if (!v.isGenericDict()) fail(where, absl::StrCat("is a ", v.tagKind(), ", not a dict"));
    return v.toGenericDict();
  }
  c10::ScalarType dtype(const c10::IValue& v, const std::string& where) const {
    const std::string& name = string(v, where);
    std::optional<Argument> named = parse_torch_name(name);
    if (!named || !named->is_dtype()) {
      fail(where, absl::StrCat("names no dtype: '", name, "'"));
    }
    return named->to_dtype();
  }
  c10::Device device(const c10::IValue& v, const std::string& where) const {
    const std::string& name = string(v, where);
    try {
      return c10::Device(name);
    } catch (const c10::Error&) {
      fail(where, absl::StrCat("names no device: '", name, "'"));
    }
  }
  c10::MemoryFormat memory_format(const c10::IValue& v,
                                  const std::string& where) const {
    const std::string& name = string(v, where);
    std::optional<Argument> named = parse_torch_name(name);
    if (!named || !named->is_memory_format()) {
      fail(where, absl::StrCat("names no memory format: '", name, "'"));
    }
    return named->to_memory_format();
  }

  TensorMeta tensor_meta(const c10::IValue& v, const std::string& where) const {
    const bool symbolic = v.isTuple() && v.toTupleRef().elements().size() == 8;
    const auto& t = tuple(v, symbolic ? 8 : 6, where);
    TensorMeta m;
    m.sizes = ints(t[0], where);
    m.strides = ints(t[1], where);
    m.dtype = dtype(t[2], where);
    m.device = device(t[3], where);
    m.requires_grad = boolean(t[4], where);
    m.memory_format = memory_format(t[5], where);
    if (m.sizes.size() != m.strides.size()) {
      fail(where, "has sizes and strides of different lengths");
    }
    if (symbolic) {
      m.symbolic_sizes = size_exprs(t[6], where);
      m.symbolic_strides = size_exprs(t[7], where);
      if (m.symbolic_sizes.size() != m.sizes.size() ||
          m.symbolic_strides.size() != m.strides.size()) {
        fail(where, "has symbolic sizes or strides of another rank");
      }
    }
    return m;
  }

  InputGuard guard(const c10::IValue& v, const std::string& where,
                   int depth = 0) const {
    const size_t fields = v.isTuple() ? v.toTupleRef().elements().size() : 0;
    const bool has_strides = fields >= 10;
    const bool has_dynamic = fields == 11;
    const auto& t = tuple(v, has_dynamic ? 11 : has_strides ? 10 : 8, where);
    InputGuard g;
    const std::string& kind = string(t[0], where);
    if (kind == "tensor") {
      g.kind = InputGuard::Kind::kTensor;
    } else if (kind == "value") {
      g.kind = InputGuard::Kind::kValue;
    } else if (kind == "tensor_list") {
      g.kind = InputGuard::Kind::kTensorList;
    } else {
      fail(where, absl::StrCat("has an unknown guard kind '", kind, "'"));
    }
    g.dtype = dtype(t[1], where);
    g.device = device(t[2], where);
    g.dim = integer(t[3], where);
    g.check_sizes = boolean(t[4], where);
    g.sizes = ints(t[5], where);
    g.value = string(t[6], where);
    if (has_strides) {
      g.check_strides = boolean(t[8], where);
      g.strides = ints(t[9], where);
      if (g.check_strides && g.strides.size() != g.sizes.size()) {
        fail(where, "has sizes and strides of different lengths");
      }
    }
    if (has_dynamic) {
      for (const c10::IValue& e : list(t[10], where)) {
        const auto& d = tuple(e, 6, where);
        DynamicDim dim;
        dim.input = static_cast<size_t>(integer(d[0], where));
        dim.dim = integer(d[1], where);
        dim.symbol = string(d[2], where);
        dim.min = integer(d[3], where);
        dim.max = integer(d[4], where);
        dim.multiple_of = integer(d[5], where);
        if (dim.dim < 0 || dim.dim >= g.dim || dim.symbol.empty() ||
            dim.min < 0 || dim.max < dim.min || dim.multiple_of < 1) {
          fail(where, absl::StrCat("has an invalid dynamic dimension (",
                                   dim.dim, ", '", dim.symbol, "', ",
                                   dim.relation(), ")"));
        }
        g.dynamic.push_back(std::move(dim));
      }
    }
    if (depth > 8) fail(where, "nests guards too deeply");
    for (const c10::IValue& e : list(t[7], where)) {
      g.elements.push_back(guard(e, where, depth + 1));
    }
    return g;
  }

  void apply_meta(const c10::impl::GenericDict& entries, Node& node) const {
    const std::string where = absl::StrCat("the meta of %", node.name());
    for (const auto& item : entries) {
      const std::string& key = string(item.key(), where);
      const std::string at = absl::StrCat(where, "['", key, "']");
      const c10::IValue& value = item.value();
      if (key == "tensor_meta") {
        node.meta().set(kTensorMeta, tensor_meta(value, at));
      } else if (key == "tensor_meta_list") {
        std::vector<TensorMeta> metas;
        for (const c10::IValue& m : list(value, at)) {
          metas.push_back(tensor_meta(m, at));
        }
        node.meta().set(kTensorMetaList, std::move(metas));
      } else if (key == "module_path") {
        node.meta().set(kModulePath, string(value, at));
      } else if (key == "stack_trace") {
        node.meta().set(kStackTrace, string(value, at));
      } else if (key == "guard") {
        node.meta().set(kGuard, guard(value, at));
      } else {
        fail(where, absl::StrCat("has an unknown key '", key, "'"));
      }
    }
  }

  std::unique_ptr<Graph> graph(const c10::IValue& v,
                               const std::string& where) const {
    const std::string& text = string(v, where);
    try {
      return parse_graph(text);
    } catch (const ParseError& e) {
      throw ParseError(absl::StrCat("fx::load: ", source_, ": ", where, ": ",
                                    e.what()),
                       e.line(), e.column());
    }
  }

 private:
  std::string source_;
};

// The bytes fx::save writes.
std::string save_to_bytes(const GraphModuleImpl& gm) {
  c10::impl::GenericDict root = make_dict();
  root.insert("format", kFormat);
  root.insert("version", kVersion);
  root.insert("graph", gm.graph().to_string());

  c10::Dict<std::string, at::Tensor> parameters;
  c10::Dict<std::string, at::Tensor> buffers;
  for (const auto& [name, tensor] : gm.tensor_attributes()) {
    (gm.is_parameter(name) ? parameters : buffers).insert(name, tensor);
  }
  root.insert("parameters", parameters);
  root.insert("buffers", buffers);

  c10::List<std::string> leaves;
  for (const auto& item : gm.leaf_modules()) leaves.push_back(item.first);
  root.insert("leaf_modules", leaves);

  c10::impl::GenericList steps(c10::AnyType::get());
  for (const auto& step : gm.init_steps()) {
    steps.push_back(c10::ivalue::Tuple::create(
        {step.graph->to_string(), c10::List<std::string>(step.outputs)}));
  }
  root.insert("init_steps", steps);

  root.insert("traced_training", gm.traced_training()
                                     ? c10::IValue(*gm.traced_training())
                                     : c10::IValue());

  // By node name; a body's nodes by its path and name ("body.inner:mul").
  c10::impl::GenericDict meta = make_dict();
  for (const auto& [prefix, graph] : graphs_by_path(gm.graph())) {
    for (const Node* node : graph->nodes()) {
      c10::impl::GenericDict entries = encode_meta(*node);
      if (!entries.empty()) meta.insert(prefix + node->name(), entries);
    }
  }
  root.insert("meta", meta);

  std::vector<char> bytes = torch::pickle_save(c10::IValue(root));
  return std::string(bytes.data(), bytes.size());
}

}  // namespace

void save(const GraphModuleImpl& gm, const std::string& path) {
  write_file_atomically(path, save_to_bytes(gm));
}

void save(const GraphModuleImpl& gm, std::ostream& out) {
  const std::string bytes = save_to_bytes(gm);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    throw GraphError("fx::save: the stream refused the bytes (its badbit or "
                     "failbit is set): check that it is open for writing");
  }
}

namespace {

// Loads what save_to_bytes wrote; `source` names it in errors ("'a.fx'",
// "the stream").
GraphModule load_from_bytes(const std::string& bytes,
                            const std::string& source, Attributes attributes) {
  c10::IValue value;
  try {
    caffe2::serialize::PyTorchStreamReader reader(bytes_reader(bytes));
    if (!reader.hasRecord("data.pkl")) {
      throw GraphError(absl::StrCat(
          "fx::load: ", source, " is not a file written by fx::save (the "
          "archive has no data.pkl)"));
    }
    std::string problem;
    std::optional<c10::IValue> loaded = checked_pickle_load(bytes, &problem);
    if (!loaded) {
      throw GraphError(absl::StrCat(
          "fx::load: ", source, " is corrupt or is not a file written by "
          "fx::save (", problem, ")"));
    }
    value = std::move(*loaded);
  } catch (const fx::Error&) {
    throw;
  } catch (const c10::Error& e) {
    throw GraphError(absl::StrCat(
        "fx::load: ", source, " is truncated or is not a file written by "
        "fx::save (", e.what_without_backtrace(), ")"));
  } catch (const std::exception& e) {
    // libtorch's unpickler also throws std::runtime_error, e.g. "Can't hash
    // IValues with tag 'GenericList'" for a dict keyed by a list.
    throw GraphError(absl::StrCat(
        "fx::load: ", source, " is corrupt or is not a file written by "
        "fx::save (", e.what(), ")"));
  }
  Reader r(source);
  if (!value.isGenericDict()) {
    r.fail("the file", absl::StrCat("holds a ", value.tagKind(),
                                    " where fx::save writes a dict"));
  }
  const c10::impl::GenericDict root = value.toGenericDict();
  const std::string& format = r.string(r.entry(root, "format", "the file"), "'format'");
  if (format != kFormat) {
    r.fail("the file", absl::StrCat("has format '", format, "', not '",
                                    kFormat, "'"));
  }
  const int64_t version = r.integer(r.entry(root, "version", "the file"), "'version'");
  if (version > kVersion) {
    throw GraphError(absl::StrCat(
        "fx::load: ", source, " has format version ", version,
        "; this program reads version ", kVersion,
        " and older: load it with a newer fx for LibTorch"));
  }

  std::unique_ptr<Graph> graph = r.graph(r.entry(root, "graph", "the file"), "the graph");

  // Node meta, by node name.
  absl::flat_hash_map<std::string, Node*> by_name;
  for (const auto& [prefix, body] : graphs_by_path(*graph)) {
    for (Node* n : body->nodes()) by_name[prefix + n->name()] = n;
  }
  for (const auto& item : r.dict(r.entry(root, "meta", "the file"), "'meta'")) {
    const std::string& name = r.string(item.key(), "a 'meta' key");
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      r.fail("'meta'", absl::StrCat("names %", name, ", which the graph lacks"));
    }
    r.apply_meta(r.dict(item.value(), "the meta of %" + name), *it->second);
  }

  // Tensors: the caller's win. Those the graph does not read (the inputs of
  // init steps) are registered after construction.
  struct SavedTensor {
    at::Tensor tensor;
    bool is_parameter;
  };
  std::map<std::string, SavedTensor> saved;
  for (const char* kind : {"parameters", "buffers"}) {
    const bool is_parameter = std::string(kind) == "parameters";
    for (const auto& item : r.dict(r.entry(root, kind, "the file"), kind)) {
      const std::string& name = r.string(item.key(), kind);
      if (!item.value().isTensor()) {
        r.fail(absl::StrCat("'", kind, "'"),
               absl::StrCat("holds a ", item.value().tagKind(), " at '", name,
                            "'"));
      }
      if (!attributes.parameters.count(name) && !attributes.buffers.count(name)) {
        saved[name] = {item.value().toTensor(), is_parameter};
        (is_parameter ? attributes.parameters : attributes.buffers)
            .emplace(name, item.value().toTensor());
      }
    }
  }

  std::vector<std::string> missing;
  for (const c10::IValue& leaf :
       r.list(r.entry(root, "leaf_modules", "the file"), "'leaf_modules'")) {
    const std::string& name = r.string(leaf, "'leaf_modules'");
    if (!attributes.modules.count(name)) missing.push_back(name);
  }
  if (!missing.empty()) {
    throw GraphError(absl::StrCat(
        "fx::load: ", source, " calls leaf module",
        missing.size() > 1 ? "s " : " ", absl::StrJoin(missing, ", "),
        ", which a file cannot hold (they are C++ code): pass ",
        missing.size() > 1 ? "them" : "it",
        " in attributes.modules, e.g. attributes.modules[\"", missing[0],
        "\"] = fx::make_leaf_module(model->", missing[0], ")"));
  }

  const c10::IValue& training =
      r.entry(root, "traced_training", "the file");
  if (!attributes.traced_training && !training.isNone()) {
    attributes.traced_training = r.boolean(training, "'traced_training'");
  }

  std::vector<GraphModuleImpl::InitStep> steps;
  const auto step_values =
      r.list(r.entry(root, "init_steps", "the file"), "'init_steps'");
  for (size_t i = 0; i < step_values.size(); ++i) {
    const std::string where = absl::StrCat("init step ", i);
    const auto& t = r.tuple(step_values[i], 2, where);
    GraphModuleImpl::InitStep step;
    step.graph = r.graph(t[0], where);
    for (const c10::IValue& out : r.list(t[1], where)) {
      step.outputs.push_back(r.string(out, where));
    }
    steps.push_back(std::move(step));
  }

  if (steps.empty()) {
    GraphModule gm(std::move(graph), std::move(attributes));
    for (const auto& [name, t] : saved) {
      if (!gm->has_tensor_attribute(name)) {
        gm->register_tensor_attribute(name, t.tensor, t.is_parameter);
      }
    }
    return gm;
  }
  // The steps run before the graph is taken: it may read objects they make
  // (packed weights), which a file does not hold.
  return GraphModule(std::make_shared<GraphModuleImpl>(
      std::move(graph), std::move(attributes), std::move(steps)));
}

}  // namespace

GraphModule load(const std::string& path, Attributes attributes) {
  return load_from_bytes(read_file(path, "fx::load"), "'" + path + "'",
                         std::move(attributes));
}

GraphModule load(std::istream& in, Attributes attributes) {
  return load_from_bytes(read_stream(in, "fx::load"), "the stream",
                         std::move(attributes));
}

}  // namespace fx
