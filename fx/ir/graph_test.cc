#include "fx/ir/graph.h"

#include <limits>

#include "fx/ir/errors.h"
#include "fx/ir/function.h"
#include "third_party/catch.h"

namespace fx {
namespace {

// x -> linear -> relu -> output, as in the header's example.
struct SmallGraph {
  Graph g;
  Node* x = g.placeholder("x");
  Node* w = g.get_attr("linear.weight");
  Node* linear = g.call_function(op("aten::linear"), {x, w});
  Node* relu = g.call_function(op("aten::relu"), {linear});
  Node* out = g.output(relu);
};

std::vector<std::string> names(const std::vector<Node*>& nodes) {
  std::vector<std::string> out;
  for (Node* n : nodes) out.push_back(n->name());
  return out;
}

TEST_CASE("graph prints in torch.fx's format") {
  SmallGraph s;
  CHECK((s.g.to_string() ==
        "graph():\n"
        "    %x : [#users=1] = placeholder[target=x]\n"
        "    %linear_weight : [#users=1] = get_attr[target=linear.weight]\n"
        "    %linear : [#users=1] = call_function[target=aten::linear](args = "
        "(%x, %linear_weight), kwargs = {})\n"
        "    %relu : [#users=1] = call_function[target=aten::relu](args = "
        "(%linear,), kwargs = {})\n"
        "    return relu"));
  s.g.lint();
}

TEST_CASE("a node says what it calls, its one user and its tensor metadata") {
  SmallGraph s;
  Node* add = s.g.call_function(op("aten::add.Tensor"), {s.relu, s.relu});
  Node* m = s.g.call_method("relu", {add});
  Node* square = s.g.call_function(op("aten::mul.Tensor"), {m, m});
  CHECK(s.relu->is_call_to({"aten::relu"}));
  CHECK(s.relu->is_call_to({"aten::relu_", "aten::relu"}));
  CHECK_FALSE(s.relu->is_call_to({"aten::relu_", "aten::relu6"}));
  CHECK_FALSE(s.relu->is_call_to({"aten::rel", "aten::relu.Tensor", "aten"}));
  CHECK_FALSE(s.relu->is_call_to({}));
  CHECK(add->is_call_to({"aten::add.Tensor"}));
  CHECK_FALSE(add->is_call_to({"aten::add", "aten::add.Tenso", "aten::add.Tensor_"}));
  // A call_method of "relu" and a get_attr are no calls of aten::relu.
  CHECK_FALSE(m->is_call_to({"aten::relu"}));
  CHECK_FALSE(s.w->is_call_to({"linear.weight"}));

  CHECK(s.linear->is_call());
  CHECK(m->is_call());
  CHECK_FALSE(s.x->is_call());
  CHECK_FALSE(s.w->is_call());
  CHECK_FALSE(s.out->is_call());

  CHECK(s.x->only_user() == s.linear);
  CHECK(s.relu->only_user() == nullptr);  // add and the output
  CHECK(add->only_user() == m);
  CHECK(m->only_user() == square);  // square reads m twice: one user
  CHECK(square->only_user() == nullptr);

  CHECK(s.x->tensor_meta() == nullptr);
  TensorMeta meta;
  meta.sizes = {2, 3};
  meta.strides = {3, 1};
  s.x->meta().set(kTensorMeta, meta);
  REQUIRE(s.x->tensor_meta() != nullptr);
  CHECK(*s.x->tensor_meta() == meta);
}

TEST_CASE("an erase listener is told of each node erased while it lives") {
  SmallGraph s;
  Node* dead = s.g.call_function(op("aten::neg"), {s.x});
  Node* dead_too = s.g.call_function(op("aten::neg"), {dead});
  std::vector<std::string> told;
  {
    EraseListener listening =
        s.g.on_erase([&](const Node* n) { told.push_back(n->name()); });
    s.g.erase_node(dead_too);  // by hand
    CHECK_THROWS(s.g.erase_node(s.relu));  // has a user: not erased, not told
    CHECK(s.g.eliminate_dead_code());      // by dead-code elimination
    CHECK((told == std::vector<std::string>{"neg_1", "neg"}));
    // Moved, it keeps listening.
    EraseListener moved = std::move(listening);
    s.out->replace_input_with(s.relu, s.linear);
    s.g.erase_node(s.relu);
    CHECK(told.back() == "relu");
  }
  // Gone, it is told nothing.
  s.out->replace_input_with(s.linear, s.x);
  s.g.erase_node(s.linear);
  CHECK(told.size() == 3);
}

TEST_CASE("arguments print as torch.fx prints them") {
  Graph g;
  Node* x = g.placeholder("x");
  Node* n = g.call_function(
      op("aten::add.Tensor"), {x, x},
      {{"alpha", 2}, {"s", "it's"}, {"f", 1e-5}, {"t", Argument::tuple({x})}});
  CHECK((n->format_node() ==
        "%add : [#users=0] = call_function[target=aten::add.Tensor](args = "
        "(%x, %x), kwargs = {alpha: 2, s: 'it\\'s', f: 1e-05, t: (%x,)})"));
  CHECK(Argument(c10::ScalarType::Float).to_string() == "torch.float32");
  CHECK(Argument(c10::Device("cpu")).to_string() == "device(type='cpu')");
  CHECK(Argument(c10::MemoryFormat::ChannelsLast).to_string() ==
        "torch.channels_last");
  CHECK(Argument(c10::Layout::Strided).to_string() == "torch.strided");
  CHECK((Argument(std::vector<int64_t>{1, 2}).to_string() == "[1, 2]"));
  CHECK((Argument::list({}).to_string() == "[]"));
  CHECK((Argument::tuple({}).to_string() == "()"));
  CHECK(Argument().to_string() == "None");
  CHECK(Argument(true).to_string() == "True");
  CHECK(Argument(c10::complex<double>(1, 2)).to_string() == "(1.0+2.0j)");
}

TEST_CASE("doubles print as Python's repr") {
  CHECK(format_double(1.0) == "1.0");
  CHECK(format_double(0.1) == "0.1");
  CHECK(format_double(1e-5) == "1e-05");
  CHECK(format_double(0.0001) == "0.0001");
  CHECK(format_double(1e16) == "1e+16");
  CHECK(format_double(1234567890123456.0) == "1234567890123456.0");
  CHECK(format_double(-2.5) == "-2.5");
  CHECK(format_double(-0.0) == "-0.0");
  CHECK(format_double(1.0 / 3) == "0.3333333333333333");
  CHECK(format_double(123.456) == "123.456");
  CHECK(format_double(std::numeric_limits<double>::infinity()) == "inf");
  CHECK(format_double(std::nan("")) == "nan");
  CHECK(format_double(0.9) == "0.9");
  CHECK(format_double(1e22) == "1e+22");
}

TEST_CASE("names are unique, suffixed as torch.fx does") {
  Graph g;
  Node* x = g.placeholder("x");
  Node* a = g.call_function(op("aten::relu"), {x});
  Node* b = g.call_function(op("aten::relu"), {a});
  Node* c = g.call_function(op("aten::relu"), {b});
  CHECK(a->name() == "relu");
  CHECK(b->name() == "relu_1");
  CHECK(c->name() == "relu_2");
  // An explicit name with a suffix is kept when free, else bumped.
  CHECK((g.create_node(Opcode::kCallFunction, op("aten::relu"), {x}, {},
                      "relu_7")
            ->name() == "relu_7"));
  CHECK((g.create_node(Opcode::kCallFunction, op("aten::relu"), {x}, {},
                      "relu_1")
            ->name() == "relu_3"));
  // In-place and magic names, qualified paths, C++ keywords.
  CHECK((g.call_function(op("aten::relu_"), {x})->name() == "relu_"));
  CHECK((g.call_function(op("aten::__and__.Tensor"), {x, x})->name() ==
        "and_1"));
  CHECK(g.get_attr("layer1.0.conv1.weight")->name() ==
        "layer1_0_conv1_weight");
  CHECK(g.placeholder("3d")->name() == "_3d");
  CHECK(g.placeholder("int")->name() == "int_1");
}

TEST_CASE("unique naming stays linear on long chains") {
  // 100k same-named nodes: torch.fx 1.13's suffix rescan would be quadratic.
  Graph g;
  Node* x = g.placeholder("x");
  Node* prev = x;
  for (int i = 0; i < 100000; ++i) {
    prev = g.call_function(op("aten::relu"), {prev});
  }
  CHECK(prev->name() == "relu_99999");
  CHECK(g.size() == 100001);
}

TEST_CASE("users are one entry per user, in order, and follow edits") {
  SmallGraph s;
  Graph& g = s.g;
  Node* add = g.call_function(op("aten::add.Tensor"), {s.x, s.x});
  CHECK(s.x->users().size() == 2);  // linear and add, add once
  CHECK((names(s.x->users().to_vector()) ==
        std::vector<std::string>{"linear", "add"}));
  CHECK((names(add->all_input_nodes()) == std::vector<std::string>{"x"}));

  // Setting args moves the node to the end of each input's users.
  s.linear->set_args({s.x, s.w});
  CHECK((names(s.x->users().to_vector()) ==
        std::vector<std::string>{"add", "linear"}));

  add->update_arg(1, s.relu);
  CHECK((names(add->all_input_nodes()) ==
        std::vector<std::string>{"x", "relu"}));
  CHECK(s.relu->users().contains(add));

  add->update_kwarg("alpha", s.w);
  CHECK(s.w->users().contains(add));
  add->set_kwargs({});
  CHECK_FALSE(s.w->users().contains(add));

  add->replace_input_with(s.x, s.linear);
  CHECK((names(add->all_input_nodes()) ==
        std::vector<std::string>{"linear", "relu"}));
  CHECK_FALSE(s.x->users().contains(add));
  g.lint();
}

TEST_CASE("a node of another graph is rejected and nothing changes") {
  SmallGraph s;
  Graph other;
  Node* y = other.placeholder("y");
  size_t before = s.g.size();
  CHECK_THROWS_AS(s.g.call_function(op("aten::relu"), {y}), GraphError);
  CHECK(s.g.size() == before);
  CHECK_THROWS_WITH(s.relu->set_args({y}),
                    Catch::Contains("belongs to another graph"));
  CHECK(s.relu->args()[0].to_node() == s.linear);
  CHECK(s.linear->users().size() == 1);
  s.g.lint();
}

TEST_CASE("replace_all_uses_with rewires users and reports them") {
  SmallGraph s;
  Graph& g = s.g;
  Node* gelu;
  {
    auto guard = g.inserting_after(s.linear);
    gelu = g.call_function(op("aten::gelu"), {s.linear});
  }
  // gelu uses linear itself but is not rewired to use itself.
  auto changed = s.linear->replace_all_uses_with(gelu);
  CHECK((names(changed) == std::vector<std::string>{"relu"}));
  CHECK(s.relu->args()[0].to_node() == gelu);
  CHECK(gelu->args()[0].to_node() == s.linear);
  g.lint();

  // With a callback, only chosen users change.
  Node* t = g.call_function(op("aten::t"), {s.x});
  Node* u = g.call_function(op("aten::neg"), {s.x});
  auto only_t = s.x->replace_all_uses_with(
      t, [&](Node* user) { return user == u; });
  CHECK((names(only_t) == std::vector<std::string>{"neg"}));
  CHECK(s.linear->args()[0].to_node() == s.x);
}

TEST_CASE("erase_node refuses nodes with users and erasing while iterating is safe") {
  SmallGraph s;
  Graph& g = s.g;
  CHECK_THROWS_WITH(g.erase_node(s.linear),
                    Catch::Contains("still has 1 user(s): %relu"));
  // Erase the current node and the one after it inside one loop.
  Node* a = g.call_function(op("aten::neg"), {s.x});
  Node* b = g.call_function(op("aten::neg"), {a});
  std::vector<std::string> seen;
  for (Node* n : g.nodes()) {
    seen.push_back(n->name());
    if (n == a) {
      g.erase_node(b);
      g.erase_node(a);
      CHECK(a->is_erased());  // still readable while the range lives
    }
  }
  CHECK((seen == std::vector<std::string>{"x", "linear_weight", "linear",
                                         "relu", "output", "neg"}));
  CHECK(g.size() == 5);
  g.lint();
}

TEST_CASE("inserting_before and inserting_after set and restore the point") {
  SmallGraph s;
  Graph& g = s.g;
  {
    auto guard = g.inserting_before(s.relu);
    g.call_function(op("aten::neg"), {s.linear});
    g.call_function(op("aten::abs"), {s.linear});
  }
  {
    // torch.fx's order: each node goes right after the anchor.
    auto guard = g.inserting_after(s.x);
    g.call_function(op("aten::sin"), {s.x});
    g.call_function(op("aten::cos"), {s.x});
  }
  {
    auto guard = g.inserting_before(nullptr);  // the start
    g.placeholder("first");
  }
  g.call_function(op("aten::exp"), {s.x});  // restored: the end
  CHECK((names(g.nodes().to_vector()) ==
        std::vector<std::string>{"first", "x", "cos", "sin", "linear_weight",
                                 "linear", "neg", "abs", "relu", "output",
                                 "exp"}));
  g.lint();
}

TEST_CASE("prepend and append move nodes; lint catches use before def") {
  SmallGraph s;
  Graph& g = s.g;
  s.x->prepend(s.w);
  CHECK((names(g.nodes().to_vector()) ==
        std::vector<std::string>{"linear_weight", "x", "linear", "relu",
                                 "output"}));
  g.lint();
  s.relu->append(s.linear);  // linear now after its user
  CHECK_THROWS_WITH(g.lint(),
                    Catch::Contains("%relu: uses %linear before it is defined"));
  s.relu->prepend(s.linear);
  g.lint();
  CHECK(s.relu->prev() == s.linear);
  CHECK(s.out->next() == nullptr);
  CHECK(s.w->prev() == nullptr);
}

TEST_CASE("a graph has exactly one output") {
  SmallGraph s;
  CHECK_THROWS_WITH(s.g.output(s.x), Catch::Contains("exactly one"));
  Graph g;
  g.placeholder("x");
  CHECK_THROWS_WITH(g.lint(), Catch::Contains("0 output nodes"));
}

TEST_CASE("call_function needs an operator or function; unknown ops are named") {
  Graph g;
  Node* x = g.placeholder("x");
  CHECK_THROWS_WITH(op("aten::no_such_op"),
                    Catch::Contains("'aten::no_such_op'"));
  CHECK_THROWS_AS(g.call_function(Target("relu"), {x}), GraphError);
  CHECK((g.call_function(getitem(), {x, 0})->format_node() ==
        "%getitem : [#users=0] = call_function[target=getitem](args = (%x, "
        "0), kwargs = {})"));
}

TEST_CASE("node_copy, graph_copy and clone copy names, args and meta") {
  SmallGraph s;
  s.relu->meta().set(kModulePath, std::string("block"));
  auto copy = s.g.clone();
  CHECK(copy->to_string() == s.g.to_string());
  copy->lint();
  Node* relu_copy = copy->find_nodes(Opcode::kCallFunction, op("aten::relu"))[0];
  REQUIRE(relu_copy->meta().get(kModulePath) != nullptr);
  CHECK(*relu_copy->meta().get(kModulePath) == "block");

  // graph_copy with a pre-seeded placeholder inlines one graph in another.
  Graph outer;
  Node* y = outer.placeholder("y");
  NodeMap map{{s.x, y}};
  Argument result = outer.graph_copy(s.g, &map);
  outer.output(result);
  CHECK((outer.to_string() ==
        "graph():\n"
        "    %y : [#users=1] = placeholder[target=y]\n"
        "    %linear_weight : [#users=1] = get_attr[target=linear.weight]\n"
        "    %linear : [#users=1] = call_function[target=aten::linear](args = "
        "(%y, %linear_weight), kwargs = {})\n"
        "    %relu : [#users=1] = call_function[target=aten::relu](args = "
        "(%linear,), kwargs = {})\n"
        "    return relu"));
}

TEST_CASE("dead code elimination keeps ops that write their inputs") {
  Graph g;
  Node* x = g.placeholder("x");
  Node* unused = g.call_function(op("aten::add.Tensor"), {x, x});
  // pytorch/pytorch#68301: torch.fx once removed an unused mul_.
  Node* mul_ = g.call_function(op("aten::mul_.Scalar"), {x, 2});
  Node* drop_train = g.call_function(op("aten::dropout"), {x, 0.5, true});
  Node* drop_eval = g.call_function(op("aten::dropout"), {x, 0.5, false});
  Node* rand = g.call_function(op("aten::rand_like"), {x});
  Node* bn_w = g.get_attr("bn.running_mean");
  Node* bn_train = g.call_function(
      op("aten::batch_norm"),
      {x, nullptr, nullptr, bn_w, bn_w, true, 0.1, 1e-5, false});
  Node* bn_eval = g.call_function(
      op("aten::batch_norm"),
      {x, nullptr, nullptr, bn_w, bn_w, false, 0.1, 1e-5, false});
  g.output(x);
  CHECK_FALSE(unused->is_impure());
  CHECK(mul_->is_impure());
  CHECK(drop_train->is_impure());
  CHECK_FALSE(drop_eval->is_impure());
  CHECK(rand->is_impure());
  CHECK(bn_train->is_impure());
  CHECK_FALSE(bn_eval->is_impure());
  CHECK(g.eliminate_dead_code());
  CHECK((names(g.nodes().to_vector()) ==
        std::vector<std::string>{"x", "mul_", "dropout", "rand_like",
                                 "bn_running_mean", "batch_norm", "output"}));
  CHECK_FALSE(g.eliminate_dead_code());
}

TEST_CASE("find_nodes filters by opcode and target in program order") {
  SmallGraph s;
  Node* r2 = s.g.call_function(op("aten::relu"), {s.x});
  CHECK((s.g.find_nodes(Opcode::kCallFunction, op("aten::relu")) ==
        std::vector<Node*>{s.relu, r2}));
  CHECK((s.g.find_nodes(Opcode::kPlaceholder) == std::vector<Node*>{s.x}));
  CHECK((s.g.find_nodes(Opcode::kGetAttr, Target("linear.weight")) ==
        std::vector<Node*>{s.w}));
  // A placeholder added after the others, an erased call and none of an
  // opcode: found by count, the last one included.
  Node* late = s.g.placeholder("late");
  CHECK((s.g.find_nodes(Opcode::kPlaceholder) ==
        std::vector<Node*>{s.x, late}));
  s.g.erase_node(r2);
  CHECK((s.g.find_nodes(Opcode::kCallFunction, op("aten::relu")) ==
        std::vector<Node*>{s.relu}));
  CHECK(s.g.find_nodes(Opcode::kCallModule).empty());
  s.g.erase_node(late);
  CHECK((s.g.placeholders() == std::vector<Node*>{s.x}));
}

TEST_CASE("lint walks a graph again once it has changed") {
  SmallGraph s;
  s.g.lint();
  s.g.lint();  // unchanged: not walked again, and still fine
  // An edit after the lint is linted: a name taken by the next node is
  // fine, a node used before it is defined is not.
  Node* later = s.g.call_function(op("aten::neg"), {s.x});
  CHECK_NOTHROW(s.g.lint());
  {
    auto guard = s.g.inserting_before(s.relu);
    Node* early = s.g.call_function(op("aten::sigmoid"), {s.x});
    early->update_arg(0, later);  // uses %neg, defined after it
  }
  CHECK_THROWS_WITH(s.g.lint(), Catch::Contains("before it is defined"));
}

TEST_CASE("tabular view has one row per node") {
  SmallGraph s;
  CHECK((s.g.tabular() ==
        "opcode         name           target         args                "
        "kwargs\n"
        "-------------  -------------  -------------  ------------------  "
        "------\n"
        "placeholder    x              x              ()                  {}\n"
        "get_attr       linear_weight  linear.weight  ()                  {}\n"
        "call_function  linear         aten::linear   (x, linear_weight)  {}\n"
        "call_function  relu           aten::relu     (linear,)           {}\n"
        "output         output         output         (relu,)             "
        "{}\n"));
}

TEST_CASE("meta is typed and prints with the graph on request") {
  SmallGraph s;
  TensorMeta tm;
  tm.sizes = {2, 3};
  tm.strides = {3, 1};
  s.relu->meta().set(kTensorMeta, tm);
  REQUIRE(s.relu->meta().get(kTensorMeta) != nullptr);
  CHECK((s.relu->meta().get(kTensorMeta)->sizes == std::vector<int64_t>{2, 3}));
  CHECK(s.relu->meta().get(kModulePath) == nullptr);
  CHECK((s.relu->meta().keys() == std::vector<std::string>{"tensor_meta"}));
  PrintOptions options;
  options.tensor_meta = true;
  CHECK(s.g.to_string(options).find(
            "%relu : f32[2, 3] [#users=1] = call_function") !=
        std::string::npos);
}

TEST_CASE("memory formats are recognised from strides") {
  CHECK((memory_format_of({1, 3, 4, 4}, {48, 16, 4, 1}) ==
        c10::MemoryFormat::Contiguous));
  CHECK((memory_format_of({2, 3, 4, 4}, {48, 1, 12, 3}) ==
        c10::MemoryFormat::ChannelsLast));
  CHECK((memory_format_of({3, 2}, {1, 3}) == c10::MemoryFormat::Preserve));
  CHECK((strides_for({2, 3, 4, 4}, c10::MemoryFormat::ChannelsLast) ==
        std::vector<int64_t>{48, 1, 12, 3}));
}

TEST_CASE("size arithmetic computes as Python's ints do, or refuses") {
  auto call = [](const Function* f, int64_t a, int64_t b) {
    return (*f)({c10::IValue(a), c10::IValue(b)}).toInt();
  };
  // % and // take the divisor's sign, as Python's.
  CHECK(call(sym_mod(), 7, 3) == 1);
  CHECK(call(sym_mod(), -7, 3) == 2);
  CHECK(call(sym_mod(), 7, -3) == -2);
  CHECK(call(sym_mod(), -7, -3) == -1);
  CHECK(call(sym_floordiv(), -7, 2) == -4);
  CHECK(checked_python_mod(6, 3) == 0);
  CHECK(find_function("sym_mod") == sym_mod());
  CHECK(is_sym_function(*sym_mod()));
  // No division by zero, no overflow: an ExecutionError naming the values.
  CHECK_THROWS_WITH(call(sym_mod(), 5, 0), Catch::Contains("sym_mod: 5 divided by zero"));
  CHECK_THROWS_AS(call(sym_floordiv(), 5, 0), ExecutionError);
  const int64_t min = std::numeric_limits<int64_t>::min();
  const int64_t max = std::numeric_limits<int64_t>::max();
  CHECK_THROWS_WITH(call(sym_floordiv(), min, -1), Catch::Contains("overflows int64"));
  CHECK_THROWS_AS(call(sym_mod(), min, -1), ExecutionError);
  CHECK_THROWS_WITH(call(sym_add(), max, 1), Catch::Contains("overflows int64"));
  CHECK_THROWS_WITH(call(sym_mul(), max / 2 + 1, 2), Catch::Contains("overflows int64"));
  CHECK(call(sym_add(), max - 1, 1) == max);
  CHECK(call(sym_mul(), min / 2, 2) == min);
}

}  // namespace
}  // namespace fx
