#include "fx/io/parser.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fx/ir/errors.h"
#include "fx/ir/function.h"
#include "fx/ir/meta.h"

namespace fx {
namespace {

// short_dtype_name read back: "f32" -> Float.
struct Spellings {
  absl::flat_hash_map<std::string, c10::ScalarType> short_dtypes;

  Spellings() {
    for (int i = 0; i < static_cast<int>(c10::ScalarType::NumOptions); ++i) {
      auto dtype = static_cast<c10::ScalarType>(i);
      short_dtypes.emplace(short_dtype_name(dtype), dtype);
    }
  }
};

const Spellings& spellings() {
  static const Spellings* s = new Spellings();
  return *s;
}

bool is_name_char(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
}

struct Opcodes {
  std::string_view name;
  Opcode op;
};
constexpr Opcodes kOpcodes[] = {
    {"placeholder", Opcode::kPlaceholder},
    {"get_attr", Opcode::kGetAttr},
    {"call_function", Opcode::kCallFunction},
    {"call_module", Opcode::kCallModule},
    {"call_method", Opcode::kCallMethod},
};

class Parser {
 public:
  explicit Parser(std::string_view text)
      : text_(text), graph_(std::make_unique<Graph>()) {}

  std::unique_ptr<Graph> parse() {
    bool header = false;
    Node* output = nullptr;
    size_t output_pos = 0;
    while (next_line()) {
      skip_spaces();
      if (at_eol() || peek() == '#') continue;
      if (!header) {
        expect("graph()", "a graph starts with the line 'graph():'");
        expect(":", "a graph starts with the line 'graph():'");
        end_of_line();
        header = true;
        continue;
      }
      if (output) {
        if (!starts_subgraph()) {
          fail(pos_, "nothing may follow a graph's return line (line " +
                         std::to_string(line_of(output_pos)) +
                         ") but a subgraph ('name = graph():')");
        }
        start_subgraph();
        output = nullptr;
        continue;
      }
      if (peek() == '%') {
        parse_node();
      } else if (accept_word("return")) {
        output_pos = pos_;
        Argument value = parse_value(/*bare_names=*/true);
        end_of_line();
        output = current_->output(std::move(value));
      } else {
        fail(pos_, "expected a node ('%name : ... = opcode[target=...]...') "
                   "or the return line ('return value')");
      }
    }
    if (!header) fail(pos_, "the text is empty: expected 'graph():'");
    if (!output) {
      fail(pos_, "the graph has no return line: it must end with "
                 "'return value' (e.g. 'return relu')");
    }
    try {
      graph_->lint();
    } catch (const GraphError& e) {
      fail(output_pos, e.what());
    }
    return std::move(graph_);
  }

 private:
  // --- Positions and errors ------------------------------------------------
  int line_of(size_t pos) const {
    int line = 1;
    for (size_t i = 0; i < pos && i < text_.size(); ++i) line += text_[i] == '\n';
    return line;
  }

  [[noreturn]] void fail(size_t pos, const std::string& message) const {
    pos = std::min(pos, text_.size());
    size_t start = text_.rfind('\n', pos == 0 ? 0 : pos - 1);
    start = (start == std::string_view::npos || pos == 0) ? 0 : start + 1;
    if (pos > 0 && text_[pos - 1] == '\n' && pos == text_.size()) {
      start = pos;
    }
    size_t end = text_.find('\n', start);
    if (end == std::string_view::npos) end = text_.size();
    std::string line(text_.substr(start, end - start));
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const int line_number = line_of(pos);
    const int column = static_cast<int>(pos - start) + 1;
    std::string caret(static_cast<size_t>(column - 1), ' ');
    for (size_t i = 0; i + 1 < static_cast<size_t>(column) && i < line.size();
         ++i) {
      if (line[i] == '\t') caret[i] = '\t';
    }
    throw ParseError(absl::StrCat("parse_graph: line ", line_number,
                                  ", column ", column, ": ", message, "\n  ",
                                  line, "\n  ", caret, "^"),
                     line_number, column);
  }

  // --- Characters ----------------------------------------------------------
  // Moves to the next line; false at the end of the text.
  bool next_line() {
    if (eol_ == std::string_view::npos) {
      eol_ = 0;
      pos_ = 0;
    } else {
      if (eol_ >= text_.size()) return false;
      pos_ = eol_ + 1;
    }
    if (pos_ > text_.size()) return false;
    if (pos_ == text_.size() && pos_ != 0) return false;
    eol_ = text_.find('\n', pos_);
    if (eol_ == std::string_view::npos) eol_ = text_.size();
    return true;
  }
  char peek() const { return pos_ < eol_ ? text_[pos_] : '\n'; }
  bool at_eol() const { return pos_ >= eol_; }
  void skip_spaces() {
    while (pos_ < eol_ &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool starts_with(std::string_view s) const {
    return text_.substr(pos_, std::min(s.size(), eol_ - pos_)) == s;
  }
  std::string describe_here() const {
    if (at_eol()) return "the end of the line";
    return absl::StrCat("'", std::string(1, text_[pos_]), "'");
  }
  void expect(std::string_view s, std::string_view what = "") {
    skip_spaces();
    if (!starts_with(s)) {
      fail(pos_, what.empty()
                     ? absl::StrCat("expected '", std::string(s), "', found ",
                                    describe_here())
                     : absl::StrCat(std::string(what), "; found ",
                                    describe_here()));
    }
    pos_ += s.size();
  }
  bool accept(char c) {
    skip_spaces();
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  // A whole word (not a prefix of a longer name).
  bool accept_word(std::string_view word) {
    skip_spaces();
    if (!starts_with(word)) return false;
    size_t after = pos_ + word.size();
    if (after < eol_ && is_name_char(text_[after])) return false;
    pos_ = after;
    return true;
  }
  void end_of_line() {
    skip_spaces();
    if (!at_eol()) {
      fail(pos_, absl::StrCat("unexpected ", describe_here(),
                              ": expected the end of the line"));
    }
  }
  std::string parse_name(std::string_view what) {
    skip_spaces();
    size_t start = pos_;
    while (pos_ < eol_ && is_name_char(text_[pos_])) ++pos_;
    if (pos_ == start) {
      fail(pos_, absl::StrCat("expected ", std::string(what), " (letters, digits and _), "
                              "found ", describe_here()));
    }
    return std::string(text_.substr(start, pos_ - start));
  }
  int64_t parse_int() {
    skip_spaces();
    size_t start = pos_;
    if (peek() == '-') ++pos_;
    while (pos_ < eol_ && absl::ascii_isdigit(text_[pos_])) ++pos_;
    int64_t value = 0;
    auto [ptr, ec] =
        std::from_chars(text_.data() + start, text_.data() + pos_, value);
    if (ec != std::errc() || ptr != text_.data() + pos_) {
      fail(start, ec == std::errc::result_out_of_range
                      ? "integer out of range of int64"
                      : absl::StrCat("expected an integer, found ",
                                     describe_here()));
    }
    return value;
  }
  std::vector<int64_t> parse_ints(char close) {
    std::vector<int64_t> out;
    if (accept(close)) return out;
    do {
      out.push_back(parse_int());
    } while (accept(','));
    expect(std::string(1, close));
    return out;
  }

  // Whether the line starts `name =` or `a.b =`: a subgraph's first line.
  bool starts_subgraph() const {
    size_t i = pos_;
    while (i < eol_ && (is_name_char(text_[i]) || text_[i] == '.')) ++i;
    if (i == pos_) return false;
    while (i < eol_ && text_[i] == ' ') ++i;
    return i < eol_ && text_[i] == '=';
  }

  // `path = graph():`, a subgraph's first line: its nodes follow. A nested
  // one's path names its parent, printed before it (a.b is b in a).
  void start_subgraph() {
    const size_t start = pos_;
    std::vector<std::string> path{parse_name("a subgraph's name")};
    while (accept('.')) path.push_back(parse_name("a subgraph's name"));
    expect("=", "a subgraph starts with 'name = graph():'");
    expect("graph()", "a subgraph starts with 'name = graph():'");
    expect(":", "a subgraph starts with 'name = graph():'");
    end_of_line();
    Graph* parent = graph_.get();
    for (size_t i = 0; i + 1 < path.size(); ++i) {
      parent = parent->subgraph(path[i]);
      if (parent == nullptr) {
        fail(start, absl::StrCat("subgraph '", absl::StrJoin(path, "."),
                                 "' comes before its parent '",
                                 absl::StrJoin(path.begin(),
                                               path.begin() + i + 1, "."),
                                 "'"));
      }
    }
    try {
      current_ = parent->add_subgraph(path.back(), std::make_unique<Graph>());
    } catch (const GraphError& e) {
      fail(start, e.msg());
    }
    defined_.clear();
  }

  // --- Nodes ---------------------------------------------------------------
  void parse_node() {
    const size_t name_pos = pos_;
    expect("%");
    std::string name = parse_name("a node name after '%'");
    if (auto it = defined_.find(name); it != defined_.end()) {
      fail(name_pos, absl::StrCat("%", name, " is defined twice (first on line ",
                                  line_of(it->second.second), ")"));
    }
    std::optional<std::vector<TensorMeta>> types;
    bool tuple_type = false;
    if (accept(':')) {
      skip_spaces();
      if (!starts_with("[#users") && peek() != '=') {
        types = parse_type(&tuple_type);
      }
      skip_spaces();
      if (starts_with("[#users")) {
        expect("[#users");
        expect("=");
        parse_int();
        expect("]");
      }
    }
    expect("=", "expected ':' or '=' after the node name");
    skip_spaces();
    const size_t op_pos = pos_;
    std::string opcode = parse_name("an opcode");
    std::optional<Opcode> op;
    for (const Opcodes& o : kOpcodes) {
      if (o.name == opcode) op = o.op;
    }
    if (!op) {
      fail(op_pos, absl::StrCat("unknown opcode '", opcode, "': expected "
                                "placeholder, get_attr, call_function, "
                                "call_module or call_method"));
    }
    expect("[target=", "expected '[target=...]' after the opcode");
    const size_t target_pos = pos_;
    size_t close = text_.find(']', pos_);
    if (close == std::string_view::npos || close >= eol_ || close == pos_) {
      fail(target_pos, "expected a target and ']' on this line");
    }
    std::string target_name(text_.substr(pos_, close - pos_));
    pos_ = close + 1;
    Target target = resolve_target(*op, target_name, target_pos);

    std::vector<Argument> args;
    Kwargs kwargs;
    if (*op != Opcode::kPlaceholder && *op != Opcode::kGetAttr) {
      expect("(args", "expected '(args = (...), kwargs = {...})'");
      expect("=");
      skip_spaces();
      const size_t args_pos = pos_;
      Argument tuple = parse_value(/*bare_names=*/false);
      if (!tuple.is_tuple()) {
        fail(args_pos, "args must be a tuple, e.g. (%x,) or (%x, 1) or ()");
      }
      args = tuple.elements();
      expect(",");
      expect("kwargs");
      expect("=");
      kwargs = parse_kwargs();
      expect(")");
    }
    end_of_line();

    Node* node = nullptr;
    try {
      node = current_->create_node(*op, std::move(target), std::move(args),
                                 std::move(kwargs), name);
    } catch (const GraphError& e) {
      fail(name_pos, e.what());
    }
    if (node->name() != name) {
      fail(name_pos + 1, absl::StrCat("'", name, "' cannot name a node (it is "
                                      "a C++ keyword or reserved name); the "
                                      "graph would call it '", node->name(),
                                      "'"));
    }
    if (types) {
      if (tuple_type) {
        node->meta().set(kTensorMetaList, std::move(*types));
      } else {
        node->meta().set(kTensorMeta, std::move(types->front()));
      }
    }
    defined_.emplace(name, std::make_pair(node, name_pos));
  }

  Target resolve_target(Opcode op, const std::string& name, size_t pos) {
    if (op != Opcode::kCallFunction) return Target(name);
    if (const Function* function = find_function(name)) return function;
    try {
      return fx::op(name);
    } catch (const GraphError& e) {
      fail(pos, absl::StrCat(
                    "call_function target '", name, "' is neither a registered "
                    "function (fx::wrap / register_function it before parsing) "
                    "nor an operator: ", e.what()));
    }
  }

  // Symbolic sizes or strides ("B*T", "?") up to `close`, which the text
  // cannot give back: it holds no example sizes for them.
  void refuse_symbolic(char close) {
    const size_t end = text_.find(close, pos_);
    if (end == std::string_view::npos) return;  // parse_ints says what is wrong
    const std::string_view dims = text_.substr(pos_, end - pos_);
    if (std::any_of(dims.begin(), dims.end(), [](char c) {
          return absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '?' ||
                 c == '(';
        })) {
      fail(pos_, absl::StrCat("symbolic sizes ('", std::string(dims),
                              "') cannot be read back: the text holds no "
                              "example sizes for them. Print the graph "
                              "without tensor metadata, or keep it with "
                              "fx::save, which does"));
    }
  }

  // f32[1, 3]{3, 1} or (f32[1], i64[]).
  std::vector<TensorMeta> parse_type(bool* tuple) {
    std::vector<TensorMeta> out;
    *tuple = accept('(');
    if (*tuple) {
      if (accept(')')) return out;
      do {
        skip_spaces();
        if (peek() == ')') break;
        out.push_back(parse_tensor_type());
      } while (accept(','));
      expect(")");
      return out;
    }
    out.push_back(parse_tensor_type());
    return out;
  }

  TensorMeta parse_tensor_type() {
    skip_spaces();
    const size_t start = pos_;
    std::string dtype = parse_name("a type such as f32[1, 3] or [#users=N]");
    auto it = spellings().short_dtypes.find(dtype);
    if (it == spellings().short_dtypes.end()) {
      fail(start, absl::StrCat("unknown dtype '", dtype,
                               "' in the type slot: expected f32, f64, i64, "
                               "b8, ... as in f32[1, 3]"));
    }
    TensorMeta meta;
    meta.dtype = it->second;
    expect("[");
    refuse_symbolic(']');
    meta.sizes = parse_ints(']');
    // Strides are products of sizes (size-0 dimensions counting as 1).
    int64_t extent = 1;
    for (int64_t size : meta.sizes) {
      if (size < 0) fail(start, "a size in the type slot is negative");
      if (__builtin_mul_overflow(extent, std::max<int64_t>(size, 1),
                                 &extent)) {
        fail(start, "the type's sizes multiply to more than int64 can hold");
      }
    }
    skip_spaces();
    if (accept('{')) {
      refuse_symbolic('}');
      meta.strides = parse_ints('}');
      if (meta.strides.size() != meta.sizes.size()) {
        fail(start, "the type's strides {...} need one entry per size");
      }
    } else {
      meta.strides = strides_for(meta.sizes, c10::MemoryFormat::Contiguous);
    }
    meta.memory_format = memory_format_of(meta.sizes, meta.strides);
    return meta;
  }

  // --- Values --------------------------------------------------------------
  Kwargs parse_kwargs() {
    expect("{", "kwargs must be a dict, e.g. {} or {alpha: 2}");
    Kwargs kwargs;
    if (accept('}')) return kwargs;
    do {
      skip_spaces();
      if (peek() == '}') break;
      const size_t key_pos = pos_;
      std::string key;
      if (peek() == '\'' || peek() == '"') {
        key = parse_string();
      } else {
        key = parse_name("a keyword name");
      }
      if (find_kwarg(kwargs, key)) {
        fail(key_pos, absl::StrCat("keyword '", key, "' is given twice"));
      }
      expect(":", "expected ':' after the keyword name");
      kwargs.emplace_back(std::move(key), parse_value(/*bare_names=*/false));
    } while (accept(','));
    expect("}", "expected ',' or '}' in kwargs");
    return kwargs;
  }

  Argument parse_value(bool bare_names) {
    skip_spaces();
    if (++depth_ > kMaxDepth) {
      fail(pos_, "values are nested too deeply (more than 256 levels)");
    }
    Argument value = parse_value_inner(bare_names);
    --depth_;
    return value;
  }

  Argument parse_value_inner(bool bare_names) {
    const size_t start = pos_;
    const char c = peek();
    if (c == '%') {
      ++pos_;
      return lookup(parse_name("a node name after '%'"), start);
    }
    if (c == '[') {
      ++pos_;
      std::vector<Argument> elements;
      if (accept(']')) return Argument::list({});
      do {
        skip_spaces();
        if (peek() == ']') break;
        elements.push_back(parse_value(bare_names));
      } while (accept(','));
      expect("]", "expected ',' or ']' in a list");
      return Argument::list(std::move(elements));
    }
    if (c == '(') {
      ++pos_;
      if (accept(')')) return Argument::tuple({});
      Argument first = parse_value(bare_names);
      skip_spaces();
      if ((first.is_int() || first.is_double()) &&
          (peek() == '+' || peek() == '-')) {
        // A complex number: (1+2j), (1.5-0.5j).
        const size_t imag_pos = pos_;
        Argument imag = parse_number();
        if (!imag.is_complex()) {
          fail(imag_pos, "expected the imaginary part of a complex number, "
                         "as in (1+2j)");
        }
        expect(")", "expected ')' after a complex number");
        return Argument(c10::complex<double>(first.to_double(),
                                             imag.to_complex().imag()));
      }
      std::vector<Argument> elements{std::move(first)};
      bool comma = false;
      while (accept(',')) {
        comma = true;
        skip_spaces();
        if (peek() == ')') break;
        elements.push_back(parse_value(bare_names));
      }
      expect(")", "expected ',' or ')' in a tuple");
      // (x) is x, as in Python; (x,) is a tuple.
      if (!comma) return elements.front();
      return Argument::tuple(std::move(elements));
    }
    if (c == '\'' || c == '"') return Argument(parse_string());
    if (absl::ascii_isdigit(c) || c == '-' || c == '+' || c == '.') {
      return parse_number();
    }
    if (is_name_char(c)) {
      size_t end = pos_;
      while (end < eol_ && (is_name_char(text_[end]) || text_[end] == '.')) {
        ++end;
      }
      std::string word(text_.substr(pos_, end - pos_));
      if (bare_names && defined_.contains(word)) {
        pos_ = end;
        return lookup(word, start);
      }
      if (word == "None" || word == "True" || word == "False") {
        pos_ = end;
        if (word == "None") return Argument();
        return Argument(word == "True");
      }
      if (word == "inf" || word == "nan" || word == "infj" || word == "nanj") {
        return parse_number();
      }
      if (word == "device") {
        pos_ = end;
        return parse_device(start);
      }
      if (std::optional<Argument> named = parse_torch_name(word)) {
        pos_ = end;
        return *named;
      }
      if (bare_names) {
        fail(start, absl::StrCat("'", word, "' is not a node defined above "
                                 "nor a value (None, True, a number, "
                                 "'string', torch.float32, ...)"));
      }
      fail(start, absl::StrCat("unknown value '", word, "'",
                               word.find('.') == std::string::npos
                                   ? " (node references start with '%')"
                                   : ""));
    }
    fail(start, absl::StrCat("expected a value, found ", describe_here()));
  }

  Argument lookup(const std::string& name, size_t pos) {
    auto it = defined_.find(name);
    if (it == defined_.end()) {
      fail(pos, absl::StrCat("%", name, " is not defined before this line: "
                             "a node may only use nodes above it"));
    }
    return Argument(it->second.first);
  }

  Argument parse_device(size_t start) {
    expect("(");
    expect("type");
    expect("=");
    skip_spaces();
    std::string type = parse_string();
    if (accept(',')) {
      expect("index");
      expect("=");
      type += ":" + std::to_string(parse_int());
    }
    expect(")");
    try {
      return Argument(c10::Device(type));
    } catch (const c10::Error&) {
      fail(start, absl::StrCat("'", type, "' is not a device (e.g. 'cpu', "
                               "'cuda:0')"));
    }
  }

  std::string parse_string() {
    skip_spaces();
    const size_t start = pos_;
    const char quote = peek();
    if (quote != '\'' && quote != '"') {
      fail(pos_, absl::StrCat("expected a quoted string, found ",
                              describe_here()));
    }
    ++pos_;
    std::string out;
    while (true) {
      if (at_eol()) fail(start, "this string is not closed on its line");
      char c = text_[pos_++];
      if (c == quote) return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_eol()) fail(start, "this string is not closed on its line");
      char e = text_[pos_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'x': {
          int value = 0;
          for (int i = 0; i < 2; ++i) {
            char h = peek();
            if (!absl::ascii_isxdigit(static_cast<unsigned char>(h))) {
              fail(pos_, "expected two hex digits after \\x");
            }
            value = value * 16 + (absl::ascii_isdigit(h)
                                      ? h - '0'
                                      : absl::ascii_tolower(h) - 'a' + 10);
            ++pos_;
          }
          out += static_cast<char>(value);
          break;
        }
        default:
          fail(pos_ - 2, absl::StrCat("unknown escape '\\", std::string(1, e),
                                      "' in a string"));
      }
    }
  }

  // 3, -1, 1.0, 1e-05, -inf, nan, 2j, +0.5j.
  Argument parse_number() {
    skip_spaces();
    const size_t start = pos_;
    size_t end = pos_;
    if (end < eol_ && (text_[end] == '-' || text_[end] == '+')) ++end;
    const size_t body = end;
    bool is_float = false;
    if (text_.substr(end, 3) == "inf" || text_.substr(end, 3) == "nan") {
      end += 3;
      is_float = true;
    } else {
      while (end < eol_) {
        char c = text_[end];
        if (absl::ascii_isdigit(c)) {
          ++end;
        } else if (c == '.') {
          is_float = true;
          ++end;
        } else if ((c == 'e' || c == 'E') && end > body) {
          is_float = true;
          ++end;
          if (end < eol_ && (text_[end] == '-' || text_[end] == '+')) ++end;
        } else {
          break;
        }
      }
    }
    bool imaginary = end < eol_ && text_[end] == 'j';
    std::string token(text_.substr(start, end - start));
    if (end == body) {
      fail(start, absl::StrCat("expected a number, found ", describe_here()));
    }
    pos_ = end + (imaginary ? 1 : 0);
    if (pos_ < eol_ && is_name_char(text_[pos_])) {
      fail(start, absl::StrCat("malformed number '", token,
                               std::string(1, text_[pos_]), "...'"));
    }
    if (!is_float && !imaginary) {
      int64_t value = 0;
      const char* first = token.data() + (token[0] == '+' ? 1 : 0);
      auto [ptr, ec] = std::from_chars(first, token.data() + token.size(), value);
      if (ec != std::errc() || ptr != token.data() + token.size()) {
        fail(start, ec == std::errc::result_out_of_range
                        ? absl::StrCat("integer '", token,
                                       "' is out of range of int64")
                        : absl::StrCat("malformed number '", token, "'"));
      }
      return Argument(value);
    }
    // std::from_chars, unlike strtod, ignores the C locale.
    double value = 0;
    const char* first = token.data() + (token[0] == '+' ? 1 : 0);
    auto [ptr, ec] = std::from_chars(first, token.data() + token.size(), value);
    if (ec == std::errc::result_out_of_range) {
      fail(start, absl::StrCat("number '", token,
                               "' is out of range of double"));
    }
    if (ec != std::errc() || ptr != token.data() + token.size()) {
      fail(start, absl::StrCat("malformed number '", token, "'"));
    }
    if (imaginary) return Argument(c10::complex<double>(0.0, value));
    return Argument(value);
  }

  static constexpr int kMaxDepth = 256;

  std::string_view text_;
  std::unique_ptr<Graph> graph_;
  // The graph whose lines are being read: graph_ or one of its subgraphs.
  Graph* current_ = graph_.get();
  size_t pos_ = 0;
  size_t eol_ = std::string_view::npos;
  int depth_ = 0;
  // Each defined node and the offset of its definition.
  absl::flat_hash_map<std::string, std::pair<Node*, size_t>> defined_;
};

}  // namespace

std::unique_ptr<Graph> parse_graph(std::string_view text) {
  return Parser(text).parse();
}

}  // namespace fx
