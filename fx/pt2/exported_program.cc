#include "fx/pt2/exported_program.h"

#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <caffe2/serialize/inline_container.h>
#include <nlohmann/json.hpp>
#include <torch/version.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "fx/io/internal/files.h"
#include "fx/ir/control_flow.h"
#include "fx/ir/function.h"
#include "fx/ir/graph.h"
#include "fx/ir/meta.h"
#include "fx/ir/target.h"
#include "fx/pt2/sym_expr.h"

namespace fx {
namespace {

using Json = nlohmann::json;

// Largest tensor a weight record may describe (elements): a size field of
// a hostile file must not become an allocation.
constexpr int64_t kMaxElements = int64_t{1} << 40;

class Loader {
 public:
  // `name` for messages: the path, or "a stream"; `bytes` the archive.
  Loader(std::string name, std::string bytes)
      : path_(std::move(name)), bytes_(std::move(bytes)) {}

  GraphModule load() {
    open_archive();
    const Json program = parse(record("models/model.json"), "models/model.json");
    check_version(program);
    read_ranges(program);
    const Json& module = field(program, "graph_module", "the program");
    const Json& graph = field(module, "graph", "graph_module");
    const Json& signature = field(module, "signature", "graph_module");
    read_weights();
    read_constants();
    tensor_values_ = &field(graph, "tensor_values", "graph");
    auto g = std::make_unique<Graph>();
    graph_ = g.get();
    check_outputs(field(signature, "output_specs", "signature"));
    add_inputs(field(graph, "inputs", "graph"),
               field(signature, "input_specs", "signature"));
    for (const Json& node : array(field(graph, "nodes", "graph"), "graph.nodes")) {
      add_node(node);
    }
    add_outputs(field(signature, "output_specs", "signature"));
    GraphModule gm(std::move(g), std::move(attributes_));
    // The graph holds its mode (batch_norm's and dropout's training
    // arguments): the module is in training mode where one of them is true
    // (a training-mode export, which post-training quantization refuses),
    // else in eval mode, as the model was exported.
    gm->train(has_training_call(gm->graph()));
    return gm;
  }

 private:
  // Whether a call passes true for an argument its schema names
  // "training" or "train".
  static bool has_training_call(const Graph& graph) {
    for (const Node* n : graph.nodes()) {
      if (n->op() != Opcode::kCallFunction || !n->target().is_operator()) continue;
      const std::vector<c10::Argument>& schema =
          n->target().op().schema().arguments();
      for (size_t i = 0; i < schema.size(); ++i) {
        if (schema[i].name() != "training" && schema[i].name() != "train") continue;
        const Argument* a = i < n->args().size() ? &n->args()[i] : nullptr;
        for (const auto& [name, value] : n->kwargs()) {
          if (name == schema[i].name()) a = &value;
        }
        if (a != nullptr && a->is_bool() && a->to_bool()) return true;
      }
    }
    return false;
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw ExportedProgramError(
        absl::StrCat("load_exported_program(", path_, "): ", what));
  }

  // --- The archive --------------------------------------------------------

  void open_archive() {
    try {
      zip_ = std::make_unique<caffe2::serialize::PyTorchStreamReader>(
          bytes_reader(bytes_));
    } catch (const c10::Error& e) {
      fail(absl::StrCat("not a torch.export.save archive (a zip file): ",
                        first_line(e.what_without_backtrace())));
    }
  }

  std::tuple<at::DataPtr, size_t> record_data(const std::string& name) const {
    if (!zip_->hasRecord(name)) {
      fail(absl::StrCat("the archive has no ", name,
                        ": not a file torch.export.save wrote"));
    }
    try {
      return zip_->getRecord(name);
    } catch (const c10::Error& e) {
      fail(absl::StrCat("cannot read ", name, " from the archive: ",
                        first_line(e.what_without_backtrace())));
    }
  }

  std::string record(const std::string& name) const {
    auto [data, size] = record_data(name);
    return std::string(static_cast<const char*>(data.get()), size);
  }

  static std::string first_line(const std::string& text) {
    return std::string(text.substr(0, text.find('\n')));
  }

  Json parse(const std::string& text, const std::string& name) const {
    Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) fail(absl::StrCat(name, " is not valid JSON"));
    return j;
  }

  void check_version(const Json& program) const {
    const Json& version = field(program, "schema_version", "the program");
    const int64_t major = integer(field(version, "major", "schema_version"),
                                  "schema_version.major");
    if (major != kExportSchemaMajor) {
      const Json* minor = version.contains("minor") ? &version["minor"] : nullptr;
      fail(absl::StrCat("schema version ", major,
                        minor != nullptr && minor->is_number_integer()
                            ? absl::StrCat(".", minor->get<int64_t>())
                            : "",
                        " is not one this reader knows (", kExportSchemaMajor,
                        ".x): export with a torch whose schema is ",
                        kExportSchemaMajor, ".x, or read it with a newer "
                        "fx for LibTorch"));
    }
  }

  // --- JSON, checked -----------------------------------------------------

  const Json& field(const Json& j, const char* key, const std::string& where) const {
    if (!j.is_object() || !j.contains(key)) {
      fail(absl::StrCat(where, " has no field '", key, "'"));
    }
    return j[key];
  }
  const Json& array(const Json& j, const std::string& where) const {
    if (!j.is_array()) fail(absl::StrCat(where, " is not a list"));
    return j;
  }
  int64_t integer(const Json& j, const std::string& where) const {
    if (!j.is_number_integer()) fail(absl::StrCat(where, " is not an integer"));
    return j.get<int64_t>();
  }
  std::string string(const Json& j, const std::string& where) const {
    if (!j.is_string()) fail(absl::StrCat(where, " is not a string"));
    return j.get<std::string>();
  }
  double real(const Json& j, const std::string& where) const {
    if (j.is_number()) return j.get<double>();
    if (j.is_string()) {
      const std::string s = j.get<std::string>();
      if (s == "Infinity") return std::numeric_limits<double>::infinity();
      if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
      if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
    }
    fail(absl::StrCat(where, " is not a number"));
  }
  bool boolean(const Json& j, const std::string& where) const {
    if (!j.is_boolean()) fail(absl::StrCat(where, " is not true or false"));
    return j.get<bool>();
  }
  // A union ({"as_int": 3}): its one field set.
  std::pair<std::string, const Json*> one_of(const Json& j,
                                             const std::string& where) const {
    if (!j.is_object()) fail(absl::StrCat(where, " is not an object"));
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!it.value().is_null()) return {it.key(), &it.value()};
    }
    fail(absl::StrCat(where, " has no value"));
  }

  c10::ScalarType scalar_type(const Json& j, const std::string& where) const {
    const int64_t code = integer(j, where);
    switch (code) {
      case 1: return c10::ScalarType::Byte;
      case 2: return c10::ScalarType::Char;
      case 3: return c10::ScalarType::Short;
      case 4: return c10::ScalarType::Int;
      case 5: return c10::ScalarType::Long;
      case 6: return c10::ScalarType::Half;
      case 7: return c10::ScalarType::Float;
      case 8: return c10::ScalarType::Double;
      case 10: return c10::ScalarType::ComplexFloat;
      case 11: return c10::ScalarType::ComplexDouble;
      case 12: return c10::ScalarType::Bool;
      case 13: return c10::ScalarType::BFloat16;
      default:
        fail(absl::StrCat(where, ": scalar type ", code,
                          " (torch.export's ScalarType) is not read yet"));
    }
  }

  // Sizes or strides: integers, or symbolic sizes (a dynamic dimension, a
  // size computed from one) with the size the export saw (its hint).
  struct Sizes {
    std::vector<int64_t> hints;
    std::vector<SizeExpr> exprs;
    bool symbolic = false;
  };
  Sizes sizes_of(const Json& list, const std::string& where) const {
    Sizes out;
    for (const Json& e : array(list, where)) {
      auto [kind, value] = one_of(e, where);
      if (kind == "as_int") {
        out.hints.push_back(integer(*value, where));
        out.exprs.push_back(SizeExpr::constant(out.hints.back()));
        continue;
      }
      if (kind != "as_expr") {
        fail(absl::StrCat(where, " has a size of kind ", kind));
      }
      const std::string text =
          string(field(*value, "expr_str", where), where + ".expr_str");
      const Json* hint = value->contains("hint") ? &(*value)["hint"] : nullptr;
      if (hint == nullptr || !hint->is_object() || !hint->contains("as_int")) {
        fail(absl::StrCat(where, " has the symbolic size ", text,
                          " without the size it had when exported (its "
                          "hint): a size known only at run time (data "
                          "dependent) is not read yet"));
      }
      out.hints.push_back(integer((*hint)["as_int"], where + ".hint"));
      out.exprs.push_back(pt2::parse_sym_expr(text));
      out.symbolic = true;
    }
    return out;
  }
  // Integers only (a weight's or constant's sizes).
  std::vector<int64_t> ints_of(const Json& list, const std::string& where) const {
    Sizes s = sizes_of(list, where);
    if (s.symbolic) fail(absl::StrCat(where, " has a symbolic size"));
    return s.hints;
  }

  TensorMeta tensor_meta(const Json& meta, const std::string& where) const {
    TensorMeta m;
    m.dtype = scalar_type(field(meta, "dtype", where), where + ".dtype");
    Sizes sizes = sizes_of(field(meta, "sizes", where), where + ".sizes");
    Sizes strides = sizes_of(field(meta, "strides", where), where + ".strides");
    m.sizes = sizes.hints;
    m.strides = strides.hints;
    if (sizes.symbolic || strides.symbolic) {
      m.symbolic_sizes = std::move(sizes.exprs);
      m.symbolic_strides = std::move(strides.exprs);
    }
    if (m.strides.size() != m.sizes.size()) {
      fail(absl::StrCat(where, " has ", m.sizes.size(), " sizes and ",
                        m.strides.size(), " strides"));
    }
    if (meta.contains("requires_grad") && meta["requires_grad"].is_boolean()) {
      m.requires_grad = meta["requires_grad"].get<bool>();
    }
    if (meta.contains("device") && meta["device"].is_object()) {
      const std::string type =
          string(field(meta["device"], "type", where + ".device"), where + ".device.type");
      if (type != "cpu") {
        fail(absl::StrCat(where, " is on device '", type,
                          "': only CPU programs are read"));
      }
    }
    m.memory_format = c10::MemoryFormat::Contiguous;
    return m;
  }

  // --- Symbols -------------------------------------------------------------

  // range_constraints: each symbol's bounds ({"min_val": 0, "max_val": 64};
  // null for none).
  void read_ranges(const Json& program) {
    if (!program.contains("range_constraints")) return;
    const Json& ranges = program["range_constraints"];
    if (!ranges.is_object()) fail("range_constraints is not an object");
    for (auto it = ranges.begin(); it != ranges.end(); ++it) {
      const std::string where = absl::StrCat("range_constraints '", it.key(), "'");
      const Json& r = it.value();
      auto bound = [&](const char* key, int64_t none) {
        if (!r.is_object() || !r.contains(key) || r[key].is_null()) return none;
        // Python's ints are unbounded: a bound past int64's range is none.
        if (r[key].is_number_unsigned() &&
            r[key].get<uint64_t>() >
                static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return none;
        }
        if (r[key].is_number_float()) return none;  // inf
        return integer(r[key], absl::StrCat(where, ".", key));
      };
      const int64_t min = bound("min_val", 0);
      const int64_t max = bound("max_val", std::numeric_limits<int64_t>::max());
      if (min < 0 || max < min) {
        fail(absl::StrCat(where, " is the range [", min, ", ", max,
                          "]: a size's range is within 0 and up"));
      }
      ranges_[it.key()] = {min, max};
    }
  }

  // --- Weights and constants ---------------------------------------------

  // A tensor stored raw in `record_name` as `meta` describes it.
  at::Tensor raw_tensor(const std::string& record_name, const TensorMeta& m,
                        int64_t storage_offset, const std::string& where) const {
    int64_t extent = 1;  // elements the strides reach, plus one
    int64_t numel = 1;
    for (size_t i = 0; i < m.sizes.size(); ++i) {
      if (m.sizes[i] < 0 || m.strides[i] < 0) {
        fail(absl::StrCat(where, " has a negative size or stride"));
      }
      if (m.sizes[i] == 0) {
        numel = 0;
        break;
      }
      if (m.sizes[i] > kMaxElements / std::max<int64_t>(numel, 1)) {
        fail(absl::StrCat(where, " has more than 2^40 elements"));
      }
      numel *= m.sizes[i];
      if (m.sizes[i] > 1 &&
          m.strides[i] > (kMaxElements - extent) / (m.sizes[i] - 1)) {
        fail(absl::StrCat(where, " has strides reaching past 2^40 elements"));
      }
      extent += (m.sizes[i] - 1) * m.strides[i];
    }
    if (numel == 0) extent = 0;
    if (storage_offset < 0 || extent > kMaxElements) {
      fail(absl::StrCat(where, " has an offset or strides out of range"));
    }
    auto [data, size] = record_data(record_name);
    const int64_t item = static_cast<int64_t>(c10::elementSize(m.dtype));
    const int64_t needed = (storage_offset + extent) * item;
    if (numel > 0 && static_cast<int64_t>(size) < needed) {
      fail(absl::StrCat(where, " (", record_name, ") holds ", size,
                        " bytes where its sizes and strides need ", needed));
    }
    const at::TensorOptions options = at::TensorOptions().dtype(m.dtype);
    if (numel == 0) return at::empty(m.sizes, options);
    // The tensor holds the record's memory as the zip reader read it (one
    // copy of the weights, not three), unless it is misaligned for the type.
    if (reinterpret_cast<uintptr_t>(data.get()) % static_cast<uintptr_t>(item) != 0) {
      at::Tensor copy = at::empty({static_cast<int64_t>(size) / item}, options);
      std::memcpy(copy.data_ptr(), data.get(),
                  static_cast<size_t>(copy.numel() * item));
      return copy.as_strided(m.sizes, m.strides, storage_offset);
    }
    c10::Storage storage(c10::Storage::use_byte_size_t(), size, std::move(data),
                         /*allocator=*/nullptr, /*resizable=*/false);
    return at::empty({0}, options).set_(storage, storage_offset, m.sizes,
                                        m.strides);
  }

  // A config of named tensors (data/weights/model_weights_config.json,
  // data/constants/model_constants_config.json), each stored raw beside it.
  std::map<std::string, at::Tensor> read_tensor_config(
      const std::string& dir, const std::string& config_name) const {
    std::map<std::string, at::Tensor> out;
    const std::string config_path = dir + "/" + config_name;
    if (!zip_->hasRecord(config_path)) return out;
    const Json config = parse(record(config_path), config_path);
    const Json& entries = field(config, "config", config_path);
    if (!entries.is_object()) fail(config_path + ".config is not an object");
    for (auto it = entries.begin(); it != entries.end(); ++it) {
      const std::string where = absl::StrCat(config_path, " '", it.key(), "'");
      const Json& e = it.value();
      if (e.contains("use_pickle") && e["use_pickle"].is_boolean() &&
          e["use_pickle"].get<bool>()) {
        fail(absl::StrCat(where, " is stored pickled: not read yet"));
      }
      const std::string file = string(field(e, "path_name", where), where + ".path_name");
      if (absl::StrContains(file, "/") || absl::StrContains(file, "..")) {
        fail(absl::StrCat(where, " names the record '", file,
                          "' outside its directory"));
      }
      const Json& meta = field(e, "tensor_meta", where);
      const TensorMeta m = tensor_meta(meta, where);
      if (!m.symbolic_sizes.empty()) fail(where + " has a symbolic size");
      int64_t offset = 0;
      if (meta.contains("storage_offset") && meta["storage_offset"].is_object()) {
        auto [kind, value] = one_of(meta["storage_offset"], where);
        if (kind != "as_int") fail(where + " has a symbolic storage offset");
        offset = integer(*value, where);
      }
      out.emplace(it.key(), raw_tensor(dir + "/" + file, m, offset, where));
    }
    return out;
  }

  void read_weights() {
    weights_ = read_tensor_config("data/weights", "model_weights_config.json");
  }
  void read_constants() {
    constants_ = read_tensor_config("data/constants",
                                    "model_constants_config.json");
  }

  // --- The graph --------------------------------------------------------------

  Node* value(const std::string& name, const std::string& where) const {
    auto it = values_.find(name);
    if (it == values_.end()) {
      fail(absl::StrCat(where, " names '", name,
                        "', which no input or earlier node defines"));
    }
    return it->second;
  }

  void define(const std::string& name, Node* node, const std::string& where) {
    if (conditions_.count(name) != 0 || !values_.emplace(name, node).second) {
      fail(absl::StrCat(where, " defines '", name, "' a second time"));
    }
    if (tensor_values_->is_object() && tensor_values_->contains(name)) {
      node->meta().set(kTensorMeta,
                       tensor_meta((*tensor_values_)[name], "tensor_values '" + name + "'"));
    }
  }

  std::string tensor_name(const Json& arg, const std::string& where) const {
    return string(field(arg, "name", where), where + ".name");
  }

  void add_inputs(const Json& inputs, const Json& specs) {
    array(inputs, "graph.inputs");
    array(specs, "signature.input_specs");
    if (inputs.size() != specs.size()) {
      fail(absl::StrCat("the graph has ", inputs.size(), " inputs and its "
                        "signature ", specs.size()));
    }
    for (size_t i = 0; i < specs.size(); ++i) {
      const std::string where = absl::StrCat("signature.input_specs[", i, "]");
      auto [kind, spec] = one_of(specs[i], where);
      if (kind == "user_input") {
        auto [arg_kind, arg] = one_of(field(*spec, "arg", where), where + ".arg");
        if (arg_kind != "as_tensor") {
          fail(absl::StrCat(where, ": a user input of kind ", arg_kind,
                            " (only tensors are read yet)"));
        }
        const std::string name = tensor_name(*arg, where);
        Node* p = graph_->placeholder(name);
        define(name, p, where);
        guard(p, where);
      } else if (kind == "parameter" || kind == "buffer" ||
                 kind == "tensor_constant") {
        const char* key = kind == "parameter" ? "parameter_name"
                          : kind == "buffer"  ? "buffer_name"
                                              : "tensor_constant_name";
        const std::string fqn = string(field(*spec, key, where), where + "." + key);
        const std::string name =
            tensor_name(field(*spec, "arg", where), where + ".arg");
        attach(fqn, kind, where);
        Node* attribute = graph_->get_attr(fqn);
        define(name, attribute, where);
        if (kind == "buffer") buffers_[fqn] = attribute;
      } else {
        fail(absl::StrCat(where, ": an input of kind '", kind,
                          "' is not read yet (user inputs, parameters, buffers "
                          "and tensor constants are)"));
      }
    }
  }

  // The tensor `fqn` from the weights or constants, as a parameter or a
  // buffer of the GraphModule.
  void attach(const std::string& fqn, const std::string& kind,
              const std::string& where) {
    const std::map<std::string, at::Tensor>& from =
        kind == "tensor_constant" ? constants_ : weights_;
    auto it = from.find(fqn);
    if (it == from.end()) {
      fail(absl::StrCat(where, " names ", kind, " '", fqn,
                        "', which the archive does not hold"));
    }
    if (kind == "parameter") {
      attributes_.parameters[fqn] = it->second;
    } else {
      attributes_.buffers[fqn] = it->second;
    }
  }

  // User inputs hold for the exported shape, dtype and device.
  void guard(Node* p, const std::string& where) {
    const TensorMeta* m = p->tensor_meta();
    if (m == nullptr) {
      fail(absl::StrCat(where, ": no tensor_values entry for input '",
                        p->name(), "'"));
    }
    InputGuard g;
    g.kind = InputGuard::Kind::kTensor;
    g.dtype = m->dtype;
    g.dim = static_cast<int64_t>(m->sizes.size());
    g.check_sizes = true;
    g.sizes = m->sizes;
    // A dynamic dimension: a symbol of range_constraints (torch.export's
    // Dim), the same symbol on every input that shares it.
    for (size_t d = 0; d < m->symbolic_sizes.size(); ++d) {
      const SizeExpr& e = m->symbolic_sizes[d];
      if (e.is_constant()) continue;
      if (!e.known) {
        fail(absl::StrCat(where, ": input '", p->name(), "' has dimension ",
                          d, " of a size this reader cannot read (not a "
                          "symbol, nor a product, sum or floor division of "
                          "symbols by numbers)"));
      }
      if (e.symbols.size() != 1 || e.p != 1 || e.q != 0 || e.r != 1) {
        fail(absl::StrCat(where, ": input '", p->name(), "' has dimension ",
                          d, " of size ", e.to_string(),
                          ", a function of another dimension's: inputs whose "
                          "sizes are derived from others are not read yet"));
      }
      auto range = ranges_.find(e.symbols[0]);
      if (range == ranges_.end()) {
        fail(absl::StrCat(where, ": input '", p->name(), "' has the dynamic "
                          "dimension ", e.symbols[0], ", which "
                          "range_constraints does not bound"));
      }
      DynamicDim dim;
      dim.input = user_inputs_;
      dim.dim = static_cast<int64_t>(d);
      dim.symbol = e.symbols[0];
      dim.min = range->second.first;
      dim.max = range->second.second;
      g.dynamic.push_back(dim);
    }
    ++user_inputs_;
    p->meta().set(kGuard, g);
  }

  // A symbolic int's value: a node of an earlier sym_size or arithmetic,
  // or an int (as_sym_int's as_name or as_int).
  Argument sym_int(const Json& j, const std::string& where) const {
    auto [kind, v] = one_of(j, where);
    if (kind == "as_int") return Argument(integer(*v, where));
    if (kind == "as_name") return value(string(*v, where), where);
    fail(absl::StrCat(where, ": a symbolic int of kind ", kind));
  }

  Argument argument(const Json& arg, const std::string& where) const {
    auto [kind, v] = one_of(arg, where);
    const Json& j = *v;
    if (kind == "as_none") return Argument();
    if (kind == "as_tensor") return value(tensor_name(j, where), where);
    if (kind == "as_tensors") {
      std::vector<Node*> nodes;
      for (const Json& t : array(j, where)) nodes.push_back(value(tensor_name(t, where), where));
      return Argument(nodes);
    }
    if (kind == "as_optional_tensors" || kind == "as_optional_tensor") {
      auto one = [&](const Json& e) -> Argument {
        auto [k, inner] = one_of(e, where);
        if (k == "as_none") return Argument();
        if (k == "as_tensor") return value(tensor_name(*inner, where), where);
        fail(absl::StrCat(where, ": an optional tensor of kind ", k));
      };
      if (kind == "as_optional_tensor") return one(j);
      std::vector<Argument> elements;
      for (const Json& e : array(j, where)) elements.push_back(one(e));
      return Argument::list(std::move(elements));
    }
    if (kind == "as_int") return Argument(integer(j, where));
    if (kind == "as_ints") {
      std::vector<int64_t> ints;
      for (const Json& e : array(j, where)) ints.push_back(integer(e, where));
      return Argument(ints);
    }
    // A list of floats, bools or strings, each read by `one`.
    auto list_of = [&](auto one) {
      std::vector<Argument> elements;
      for (const Json& e : array(j, where)) elements.emplace_back(one(e, where));
      return Argument::list(std::move(elements));
    };
    auto as_real = [this](const Json& e, const std::string& w) { return real(e, w); };
    auto as_bool = [this](const Json& e, const std::string& w) { return boolean(e, w); };
    auto as_text = [this](const Json& e, const std::string& w) { return string(e, w); };
    if (kind == "as_float") return Argument(real(j, where));
    if (kind == "as_floats") return list_of(as_real);
    if (kind == "as_bool") return Argument(boolean(j, where));
    if (kind == "as_bools") return list_of(as_bool);
    if (kind == "as_string") return Argument(string(j, where));
    if (kind == "as_strings") return list_of(as_text);
    if (kind == "as_scalar_type") return Argument(scalar_type(j, where));
    if (kind == "as_memory_format") {
      switch (integer(j, where)) {
        case 1: return Argument(c10::MemoryFormat::Contiguous);
        case 2: return Argument(c10::MemoryFormat::ChannelsLast);
        case 3: return Argument(c10::MemoryFormat::ChannelsLast3d);
        case 4: return Argument(c10::MemoryFormat::Preserve);
        default: fail(absl::StrCat(where, ": an unknown memory format"));
      }
    }
    if (kind == "as_layout") {
      if (integer(j, where) != 7) fail(absl::StrCat(where, ": a layout other than strided"));
      return Argument(c10::Layout::Strided);
    }
    if (kind == "as_device") {
      const std::string type = string(field(j, "type", where), where + ".type");
      if (type != "cpu") fail(absl::StrCat(where, ": device '", type, "' (only CPU programs are read)"));
      return Argument(c10::Device(c10::DeviceType::CPU));
    }
    if (kind == "as_sym_int") return sym_int(j, where);
    if (kind == "as_sym_ints") {
      std::vector<Argument> elements;
      for (const Json& e : array(j, where)) elements.push_back(sym_int(e, where));
      return Argument::list(std::move(elements));
    }
    if (absl::StartsWith(kind, "as_sym_")) {
      fail(absl::StrCat(where, ": a symbolic value of kind ", kind,
                        " (symbolic bools and floats: runtime assertions, "
                        "data-dependent conditions) is not read yet"));
    }
    if (kind == "as_graph") {
      fail(absl::StrCat(where, ": a subgraph (a higher-order operator's body) "
                        "is not read yet"));
    }
    fail(absl::StrCat(where, ": an argument of kind '", kind, "' is not read yet"));
  }

  // "torch.ops.aten.add.Tensor" -> "aten::add.Tensor"; ".default" -> none.
  std::string operator_name(const std::string& target, const std::string& where) const {
    const std::vector<std::string> parts = absl::StrSplit(target, '.');
    if (parts.size() != 5 || parts[0] != "torch" || parts[1] != "ops") {
      if (absl::StartsWith(target, "torch.ops.higher_order.")) {
        fail(absl::StrCat(where, ": the higher-order operator ", target,
                          " (control flow) is not read yet"));
      }
      fail(absl::StrCat(where, ": the target '", target,
                        "' is not an operator this reader knows (only "
                        "torch.ops.aten.NAME.OVERLOAD)"));
    }
    if (parts[2] != "aten") {
      fail(absl::StrCat(where, ": ", target, " is outside aten: only core "
                        "ATen operators are read yet"));
    }
    return parts[4] == "default" ? absl::StrCat("aten::", parts[3])
                                 : absl::StrCat("aten::", parts[3], ".", parts[4]);
  }

  // The operator `qualified` names (fx::op), or nullopt when LibTorch
  // registers none.
  static std::optional<Target> find_op(const std::string& qualified) {
    try {
      return op(qualified);
    } catch (const GraphError&) {
      return std::nullopt;
    }
  }

  void add_node(const Json& node) {
    const std::string name =
        node.contains("name") && node["name"].is_string() ? node["name"].get<std::string>() : "";
    const std::string where = absl::StrCat("node '", name, "'");
    const std::string target = string(field(node, "target", where), where + ".target");
    if (add_sym_node(node, target, name, where)) return;
    if (target == "torch.ops.higher_order.cond" ||
        target == "torch.ops.higher_order.while_loop" ||
        target == "torch.ops.higher_order.scan" ||
        target == "torch.ops.higher_order.map_impl") {
      add_control_flow(node, target, name, where);
      return;
    }
    const std::string qualified = operator_name(target, where);
    std::optional<Target> callee = find_op(qualified);
    if (!callee) {
      fail(absl::StrCat(where, ": ", qualified, " is not an operator this "
                        "LibTorch registers"));
    }
    std::vector<Argument> args;
    Kwargs kwargs;
    bool number_for_tensor = false;
    const Json& inputs = array(field(node, "inputs", where), where + ".inputs");
    std::vector<std::string> arg_names;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string at = absl::StrCat(where, ".inputs[", i, "]");
      const Json& input = inputs[i];
      const std::string arg_name = string(field(input, "name", at), at + ".name");
      Argument a = argument(field(input, "arg", at), at);
      number_for_tensor =
          number_for_tensor || is_number_for_tensor(*callee, arg_name, a);
      const bool keyword = input.contains("kind") && input["kind"].is_number_integer() &&
                           input["kind"].get<int64_t>() == 2;
      if (keyword) {
        kwargs.emplace_back(arg_name, std::move(a));
      } else {
        args.push_back(std::move(a));
      }
    }
    // A number given where the overload takes a Tensor (aten::mul.Tensor of
    // 2): the Scalar overload, as TorchScript and the dispatcher's Python
    // bindings resolve it.
    if (number_for_tensor) {
      const std::string base = qualified.substr(0, qualified.find('.'));
      callee = find_op(base + ".Scalar");
      if (!callee) {
        fail(absl::StrCat(where, ": ", qualified, " is given a number for a "
                          "tensor, and ", base, " has no Scalar overload"));
      }
    }
    // A keyword this LibTorch's schema does not have (an argument newer
    // than it): refused here, not when the graph first runs.
    for (const auto& [keyword, value] : kwargs) {
      bool known = false;
      for (const c10::Argument& a : callee->op().schema().arguments()) {
        known = known || a.name() == keyword;
      }
      if (!known) {
        fail(absl::StrCat(where, ": ", qualified, " has no argument '",
                          keyword, "' in this LibTorch (", TORCH_VERSION,
                          "): export with the torch of the LibTorch that "
                          "reads the program"));
      }
    }
    Node* call = graph_->create_node(Opcode::kCallFunction, *callee,
                                     std::move(args), std::move(kwargs), name);
    const Json& outputs = array(field(node, "outputs", where), where + ".outputs");
    if (outputs.size() == 1) {
      auto [kind, out] = one_of(outputs[0], where + ".outputs[0]");
      if (kind == "as_tensor") {
        define(tensor_name(*out, where), call, where);
        return;
      }
      if (kind == "as_tensors") {
        define_elements(call, array(*out, where), where);
        return;
      }
      if (kind == "as_none") return;
      fail(absl::StrCat(where, ": an output of kind ", kind, " is not read yet"));
    }
    // Several outputs: each an element of the call's tuple.
    std::vector<Json> elements;
    for (const Json& o : outputs) {
      auto [kind, out] = one_of(o, where + ".outputs");
      if (kind == "as_none") {
        elements.push_back(Json());
        continue;
      }
      if (kind != "as_tensor") {
        fail(absl::StrCat(where, ": an output of kind ", kind, " is not read yet"));
      }
      elements.push_back(*out);
    }
    define_elements(call, elements, where);
  }

  // torch.cond, torch.while_loop, scan and map: our cond, while_loop,
  // scan and map, each body (as_graph) a subgraph read as the program's
  // graph is, in names of its own. cond(pred, true_graph, false_graph,
  // operands); while_loop(cond_graph, body_graph, carried, additional);
  // scan(combine_graph, init, xs, additional); map_impl(body_graph, xs,
  // additional).
  void add_control_flow(const Json& node, const std::string& target,
                        const std::string& name, const std::string& where) {
    const bool is_cond = target == "torch.ops.higher_order.cond";
    const bool is_loop = target == "torch.ops.higher_order.while_loop";
    const bool is_map = target == "torch.ops.higher_order.map_impl";
    const size_t arity = is_map ? 3 : 4;
    const Json& inputs = array(field(node, "inputs", where), where + ".inputs");
    if (inputs.size() != arity) {
      fail(absl::StrCat(where, ": ", target, " with ", inputs.size(),
                        " inputs (", arity, " expected)"));
    }
    std::vector<Argument> args;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string at = absl::StrCat(where, ".inputs[", i, "]");
      const Json& arg = field(inputs[i], "arg", at);
      const bool body =
          is_cond ? (i == 1 || i == 2) : is_loop ? i < 2 : i == 0;
      auto [kind, v] = one_of(arg, at);
      if (body != (kind == "as_graph")) {
        fail(absl::StrCat(at, ": ", target, " takes ",
                          body ? "a subgraph" : "no subgraph", " here, got ",
                          kind));
      }
      if (body) {
        args.emplace_back(add_body(*v, at));
      } else if (!is_cond || i == 3) {
        if (kind != "as_tensors") {
          fail(absl::StrCat(at, ": ", target, "'s operands as ", kind,
                            " (a list of tensors expected)"));
        }
        std::vector<Argument> tensors;
        for (const Json& t : array(*v, at)) {
          tensors.emplace_back(value(tensor_name(t, at), at));
        }
        args.push_back(Argument::list(std::move(tensors)));
      } else {
        args.push_back(argument(arg, at));
      }
    }
    Node* call = graph_->create_node(
        Opcode::kCallFunction,
        Target(is_cond   ? cond_function()
               : is_loop ? while_loop_function()
               : is_map  ? map_function()
                         : scan_function()),
        std::move(args), {}, name);
    std::vector<Json> elements;
    for (const Json& o : array(field(node, "outputs", where), where + ".outputs")) {
      auto [kind, out] = one_of(o, where + ".outputs");
      if (kind == "as_tensor") {
        elements.push_back(*out);
      } else if (kind == "as_tensors") {
        for (const Json& t : array(*out, where)) elements.push_back(t);
      } else {
        fail(absl::StrCat(where, ": an output of kind ", kind, " of ", target,
                          " is not read yet"));
      }
    }
    define_elements(call, elements, where);
  }

  // A body's inputs or outputs (`what`: "input" or "output"), tensors
  // only: each name, with where it stands for messages.
  std::vector<std::pair<std::string, std::string>> body_tensors(
      const Json& graph, const std::string& what, const std::string& where) {
    const std::string list = absl::StrCat(where, ".", what, "s");
    const Json& items = array(field(graph, (what + "s").c_str(), where), list);
    std::vector<std::pair<std::string, std::string>> out;
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string at = absl::StrCat(list, "[", i, "]");
      auto [kind, tensor] = one_of(items[i], at);
      if (kind != "as_tensor") {
        fail(absl::StrCat(at, ": a body ", what, " of kind ", kind,
                          " is not read yet"));
      }
      out.emplace_back(tensor_name(*tensor, at), at);
    }
    return out;
  }

  // A body: its graph read into a subgraph of the graph being read, with
  // names of its own; the get_attr reading it.
  Node* add_body(const Json& as_graph, const std::string& where) {
    const std::string body_name =
        string(field(as_graph, "name", where), where + ".name");
    const Json& graph = field(as_graph, "graph", where);
    auto body = std::make_unique<Graph>();
    struct Scope {
      Loader& l;
      Graph* graph;
      const Json* tensor_values;
      std::map<std::string, Node*> values;
      std::map<std::string, Condition> conditions;
      Scope(Loader& loader, Graph* body, const Json* body_values)
          : l(loader), graph(loader.graph_), tensor_values(loader.tensor_values_) {
        values.swap(l.values_);
        conditions.swap(l.conditions_);
        l.graph_ = body;
        l.tensor_values_ = body_values;
      }
      ~Scope() {
        l.graph_ = graph;
        l.tensor_values_ = tensor_values;
        values.swap(l.values_);
        conditions.swap(l.conditions_);
      }
    };
    {
      Scope scope(*this, body.get(),
                  &field(graph, "tensor_values", where + ".graph"));
      for (const auto& [input, at] : body_tensors(graph, "input", where)) {
        define(input, graph_->placeholder(input), at);
      }
      for (const Json& n : array(field(graph, "nodes", where), where + ".nodes")) {
        add_node(n);
      }
      std::vector<Argument> results;
      for (const auto& [output, at] : body_tensors(graph, "output", where)) {
        results.emplace_back(value(output, at));
      }
      graph_->output(Argument::tuple(std::move(results)));
    }
    const std::string sub = graph_->unique_subgraph_name(body_name);
    graph_->add_subgraph(sub, std::move(body));
    return graph_->create_node(Opcode::kGetAttr, Target(sub), {}, {}, sub);
  }

  // Size arithmetic: aten.sym_size.int and Python's operators on its
  // results, as our sym_size / sym_add / sym_mul / sym_floordiv / sym_mod;
  // comparisons of sizes and torch.sym_not, kept by the reader until a
  // runtime assertion (aten._assert_scalar) checks one, as our
  // fx_guard::check_size. Returns false for any other target.
  bool add_sym_node(const Json& node, const std::string& target,
                    const std::string& name, const std::string& where) {
    if (add_condition(node, target, name, where)) return true;
    const bool size = target == "torch.ops.aten.sym_size.int";
    const bool arithmetic =
        target == "_operator.add" || target == "_operator.sub" ||
        target == "_operator.mul" || target == "_operator.floordiv" ||
        target == "_operator.mod";
    if (!size && !arithmetic) {
      if (absl::StartsWith(target, "_operator.") ||
          absl::StrContains(target, "sym_constrain_range") ||
          absl::StartsWith(target, "torch.ops.aten.sym_")) {
        fail(absl::StrCat(where, ": ", target, " (a condition or size "
                          "arithmetic beyond +, -, *, //, %, comparisons and "
                          "not, or a size known only at run time) is not "
                          "read yet"));
      }
      return false;
    }
    const Json& inputs = array(field(node, "inputs", where), where + ".inputs");
    if (inputs.size() != 2) {
      fail(absl::StrCat(where, ": ", target, " with ", inputs.size(),
                        " inputs (two expected)"));
    }
    std::vector<Argument> args;
    for (size_t i = 0; i < 2; ++i) {
      const std::string at = absl::StrCat(where, ".inputs[", i, "]");
      args.push_back(argument(field(inputs[i], "arg", at), at));
    }
    Node* call = nullptr;
    if (size) {
      if (!args[0].is_node() || !args[1].is_int()) {
        fail(where + ": sym_size.int takes a tensor and a dimension");
      }
      call = graph_->create_node(Opcode::kCallFunction, Target(sym_size()),
                                 std::move(args), {}, name);
    } else {
      for (const Argument& a : args) {
        if (!a.is_node() && !a.is_int()) {
          fail(absl::StrCat(where, ": ", target, " of something not an int"));
        }
      }
      if (target == "_operator.sub") {
        // a - b as a + (-1) * b.
        Argument negated;
        if (args[1].is_int()) {
          if (args[1].to_int() == std::numeric_limits<int64_t>::min()) {
            fail(where + ": subtracts the smallest int64");
          }
          negated = Argument(-args[1].to_int());
        } else {
          negated = Argument(graph_->create_node(
              Opcode::kCallFunction, Target(sym_mul()),
              {args[1], int64_t{-1}}, {}, name + "_negated"));
        }
        args[1] = negated;
      }
      const Function* f = target == "_operator.mul"        ? sym_mul()
                          : target == "_operator.floordiv" ? sym_floordiv()
                          : target == "_operator.mod"      ? sym_mod()
                                                           : sym_add();
      call = graph_->create_node(Opcode::kCallFunction, Target(f),
                                 std::move(args), {}, name);
    }
    const Json& outputs = array(field(node, "outputs", where), where + ".outputs");
    if (outputs.size() != 1) fail(where + ": size arithmetic has one output");
    auto [kind, out] = one_of(outputs[0], where + ".outputs[0]");
    if (kind != "as_sym_int") {
      fail(absl::StrCat(where, ": an output of kind ", kind,
                        " for size arithmetic"));
    }
    define(string(field(*out, "as_name", where), where + ".as_name"), call,
           where);
    return true;
  }

  // A comparison of two sizes, or its negation (torch.sym_not), as a
  // runtime assertion will check it: a relation fx_guard::check_size takes.
  struct Condition {
    Argument a, b;
    std::string relation;
  };

  static std::string negated(const std::string& relation) {
    if (relation == "==") return "!=";
    if (relation == "!=") return "==";
    if (relation == "<") return ">=";
    if (relation == ">=") return "<";
    if (relation == "<=") return ">";
    return "<=";  // >
  }

  // _operator.eq / ne / lt / le / gt / ge of sizes, torch.sym_not of one,
  // and aten._assert_scalar of one (with the message torch.export wrote:
  // "Runtime assertion failed for expression Eq(Mod(s0, 2), 0) on node
  // 'eq'"). Returns false for any other target.
  bool add_condition(const Json& node, const std::string& target,
                     const std::string& name, const std::string& where) {
    static const std::map<std::string, std::string> relations = {
        {"_operator.eq", "=="}, {"_operator.ne", "!="}, {"_operator.lt", "<"},
        {"_operator.le", "<="}, {"_operator.gt", ">"},  {"_operator.ge", ">="}};
    const auto relation = relations.find(target);
    const bool is_not = target == "torch.sym_not";
    const bool is_assert = target == "torch.ops.aten._assert_scalar.default";
    if (relation == relations.end() && !is_not && !is_assert) return false;
    const Json& inputs = array(field(node, "inputs", where), where + ".inputs");
    const size_t arity = relation != relations.end() ? 2 : is_not ? 1 : 2;
    if (inputs.size() != arity) {
      fail(absl::StrCat(where, ": ", target, " with ", inputs.size(),
                        " inputs (", arity, " expected)"));
    }
    auto input = [&](size_t i) -> const Json& {
      const std::string at = absl::StrCat(where, ".inputs[", i, "]");
      return field(inputs[i], "arg", at);
    };
    if (relation != relations.end()) {
      Condition c;
      c.a = size_argument(input(0), absl::StrCat(where, ".inputs[0]"));
      c.b = size_argument(input(1), absl::StrCat(where, ".inputs[1]"));
      c.relation = relation->second;
      define_condition(node, std::move(c), where);
      return true;
    }
    // A condition: a comparison above, or a constant (as_bool).
    auto [kind, v] = one_of(input(0), where + ".inputs[0]");
    if (kind != "as_sym_bool") {
      fail(absl::StrCat(where, ": ", target, " of an argument of kind ", kind));
    }
    auto [bool_kind, b] = one_of(*v, where + ".inputs[0]");
    std::optional<Condition> c;
    if (bool_kind == "as_name") {
      const std::string condition = string(*b, where + ".inputs[0]");
      auto it = conditions_.find(condition);
      if (it == conditions_.end()) {
        fail(absl::StrCat(where, " names the condition '", condition,
                          "', which no earlier comparison of sizes defines"));
      }
      c = it->second;
    } else if (bool_kind == "as_bool") {
      if (boolean(*b, where + ".inputs[0]") == is_not) {
        fail(absl::StrCat(where, ": ", target, " of a condition that is "
                          "always false"));
      }
    } else {
      fail(absl::StrCat(where, ": a condition of kind ", bool_kind));
    }
    if (is_not) {
      if (!c) fail(where + ": torch.sym_not of a constant");
      c->relation = negated(c->relation);
      define_condition(node, std::move(*c), where);
      return true;
    }
    if (!c) return true;  // asserts true: nothing to check
    note_multiple(*c);
    auto [message_kind, message] =
        one_of(field(inputs[1], "arg", where + ".inputs[1]"), where + ".inputs[1]");
    if (message_kind != "as_string") {
      fail(absl::StrCat(where, ": an assertion's message of kind ", message_kind));
    }
    graph_->create_node(
        Opcode::kCallFunction, op("fx_guard::check_size"),
        {c->a, c->b, c->relation,
         assertion(string(*message, where + ".inputs[1]"), name)},
        {}, name);
    return true;
  }

  // An assertion that an input's dynamic dimension is a multiple of k
  // (Eq(Mod(s0, k), 0)) also becomes the dimension's multiple_of
  // (fx::Dim::multiple_of): its input guard refuses other sizes, and the
  // sizes a pass samples (ShapeProp's symbolic runs, the ONNX export's)
  // are multiples of k.
  void note_multiple(const Condition& c) {
    if (c.relation != "==" || !c.b.is_int() || c.b.to_int() != 0 ||
        !c.a.is_node()) {
      return;
    }
    const Node* mod = c.a.to_node();
    if (!is_sym_call(*mod) || &mod->target().function() != sym_mod() ||
        !mod->args().at(0).is_node() || !mod->args().at(1).is_int()) {
      return;
    }
    const int64_t k = mod->args().at(1).to_int();
    const Node* size = mod->args().at(0).to_node();
    if (k <= 1 || k > (int64_t{1} << 32) || !is_sym_call(*size) ||
        &size->target().function() != sym_size() ||
        !size->args().at(0).is_node() || !size->args().at(1).is_int()) {
      return;
    }
    Node* input = size->args().at(0).to_node();
    const InputGuard* guard = input->meta().get(kGuard);
    if (input->op() != Opcode::kPlaceholder || guard == nullptr) return;
    InputGuard g = *guard;
    for (DynamicDim& d : g.dynamic) {
      if (d.dim != size->args().at(1).to_int()) continue;
      d.multiple_of = std::lcm(d.multiple_of, k);
      // The same symbol on every input that has it.
      for (Node* p : graph_->placeholders()) {
        const InputGuard* other = p->meta().get(kGuard);
        if (other == nullptr || p == input) continue;
        InputGuard copy = *other;
        for (DynamicDim& e : copy.dynamic) {
          if (e.symbol == d.symbol) e.multiple_of = d.multiple_of;
        }
        p->meta().set(kGuard, copy);
      }
    }
    input->meta().set(kGuard, g);
  }

  // What fx_guard::check_size names when the assertion fails:
  // "Eq(Mod(s0, 2), 0) (torch.export's runtime assertion on node 'eq')".
  static std::string assertion(const std::string& message,
                               const std::string& name) {
    const std::string kPrefix = "Runtime assertion failed for expression ";
    std::string expression = message;
    if (absl::StartsWith(message, kPrefix)) {
      expression = message.substr(kPrefix.size());
      const size_t on = expression.rfind(" on node '");
      const std::string node = on == std::string::npos
                                   ? name
                                   : expression.substr(on + 10, expression.size() - on - 11);
      if (on != std::string::npos) expression.resize(on);
      return absl::StrCat(expression, " (torch.export's runtime assertion on node '",
                          node, "')");
    }
    return absl::StrCat(expression, " (torch.export's runtime assertion ", name, ")");
  }

  // An int or a size computed earlier (as_int, as_sym_int).
  Argument size_argument(const Json& arg, const std::string& where) const {
    auto [kind, v] = one_of(arg, where);
    if (kind == "as_int") return Argument(integer(*v, where));
    if (kind == "as_sym_int") return sym_int(*v, where);
    fail(absl::StrCat(where, ": a comparison of sizes given an argument of "
                      "kind ", kind));
  }

  void define_condition(const Json& node, Condition c, const std::string& where) {
    const Json& outputs = array(field(node, "outputs", where), where + ".outputs");
    if (outputs.size() != 1) fail(where + ": a condition has one output");
    auto [kind, out] = one_of(outputs[0], where + ".outputs[0]");
    if (kind != "as_sym_bool") {
      fail(absl::StrCat(where, ": an output of kind ", kind, " for a condition"));
    }
    const std::string name =
        string(field(*out, "as_name", where), where + ".outputs[0].as_name");
    if (values_.count(name) != 0 || !conditions_.emplace(name, std::move(c)).second) {
      fail(absl::StrCat(where, " defines '", name, "' a second time"));
    }
  }

  void define_elements(Node* call, const Json& elements, const std::string& where) {
    for (size_t i = 0; i < elements.size(); ++i) {
      if (elements[i].is_null()) continue;
      const std::string name = tensor_name(elements[i], where);
      Node* item = graph_->create_node(Opcode::kCallFunction, Target(getitem()),
                                       {call, static_cast<int64_t>(i)}, {}, name);
      define(name, item, where);
    }
  }

  // Whether `a` is a number where `callee`'s schema has a Tensor argument
  // named `arg_name`.
  static bool is_number_for_tensor(const Target& callee,
                                   const std::string& arg_name, const Argument& a) {
    // A size computed in the graph (b - 1) is a number too.
    const bool size = a.is_node() && is_sym_call(*a.to_node());
    if (!a.is_int() && !a.is_double() && !a.is_bool() && !size) return false;
    for (const c10::Argument& arg : callee.op().schema().arguments()) {
      if (arg.name() == arg_name) {
        return arg.type()->kind() == c10::TypeKind::TensorType;
      }
    }
    return false;
  }

  // Before the nodes: a program whose outputs this reader cannot give is
  // refused for that, whatever its operators. Read: user outputs, and the
  // buffers and user inputs the program mutates (a functionalized program
  // returns their new values; we copy them in, as ep.module() does).
  void check_outputs(const Json& specs) const {
    array(specs, "signature.output_specs");
    for (size_t i = 0; i < specs.size(); ++i) {
      const std::string where = absl::StrCat("signature.output_specs[", i, "]");
      auto [kind, spec] = one_of(specs[i], where);
      if (kind == "user_output" || kind == "buffer_mutation" ||
          kind == "user_input_mutation") {
        continue;
      }
      const char* why =
          kind == "loss_output" || absl::StartsWith(kind, "gradient_to_")
              ? " (a training step's joint graph: export the model's forward)"
          : kind == "token" ? " (the effect tokens of an operator with side effects)"
                            : "";
      fail(absl::StrCat(where, ": an output of kind '", kind,
                        "' is not read yet", why));
    }
  }

  // After check_outputs and the nodes: each mutation as aten::copy_ into
  // the buffer or input it names, then the user outputs.
  void add_outputs(const Json& specs) {
    std::vector<Argument> results;
    for (size_t i = 0; i < specs.size(); ++i) {
      const std::string where = absl::StrCat("signature.output_specs[", i, "]");
      auto [kind, spec] = one_of(specs[i], where);
      if (kind == "user_output") {
        results.push_back(argument(field(*spec, "arg", where), where + ".arg"));
        continue;
      }
      const bool buffer = kind == "buffer_mutation";
      const char* key = buffer ? "buffer_name" : "user_input_name";
      const std::string target_name =
          string(field(*spec, key, where), absl::StrCat(where, ".", key));
      Node* target = nullptr;
      if (buffer) {
        auto it = buffers_.find(target_name);
        if (it == buffers_.end()) {
          fail(absl::StrCat(where, " mutates '", target_name,
                            "', which is not a buffer of the program"));
        }
        target = it->second;
      } else {
        target = value(target_name, where);
        if (target->op() != Opcode::kPlaceholder) {
          fail(absl::StrCat(where, " mutates '", target_name,
                            "', which is not a user input"));
        }
      }
      Node* update = value(tensor_name(field(*spec, "arg", where), where + ".arg"),
                           where + ".arg");
      if (update == target) continue;
      graph_->create_node(Opcode::kCallFunction, op("aten::copy_"),
                          {target, update}, {}, "copy_");
    }
    if (results.size() == 1) {
      graph_->output(results[0]);
    } else {
      graph_->output(Argument::tuple(std::move(results)));
    }
  }

  std::string path_;
  std::string bytes_;
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> zip_;
  std::map<std::string, at::Tensor> weights_;
  std::map<std::string, at::Tensor> constants_;
  const Json* tensor_values_ = nullptr;
  Graph* graph_ = nullptr;
  std::map<std::string, Node*> values_;
  std::map<std::string, Condition> conditions_;
  // Each buffer's get_attr, by its fully qualified name.
  std::map<std::string, Node*> buffers_;
  Attributes attributes_;
  // range_constraints: each symbol's [min, max].
  std::map<std::string, std::pair<int64_t, int64_t>> ranges_;
  size_t user_inputs_ = 0;
};

}  // namespace

GraphModule load_exported_program(const std::string& path) {
  return Loader(path, read_file(path, "load_exported_program")).load();
}

GraphModule load_exported_program(std::istream& in) {
  return Loader("a stream", read_stream(in, "load_exported_program")).load();
}

}  // namespace fx
