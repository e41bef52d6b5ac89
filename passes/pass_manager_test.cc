// PassManager and the by-name table on their own.
#include "passes/pass_manager.h"

#include <set>

#include <torch/torch.h>

#include "fx/fx.h"
#include "passes/pass_pipeline.h"
#include "passes/registry.h"
#include "third_party/catch.h"

namespace {

using fx::Node;

// x -> relu -> neg, with an unused add: dead code for eliminate_dead_code.
fx::GraphModule small_module() {
  auto g = std::make_unique<fx::Graph>();
  Node* x = g->placeholder("x");
  Node* relu = g->call_function(fx::op("aten::relu"), {x});
  g->call_function(fx::op("aten::add.Tensor"), {x, x});
  g->output(g->call_function(fx::op("aten::neg"), {relu}));
  return fx::GraphModule(std::move(g), fx::Attributes{});
}

// Counts its runs; changes the graph (appends a no-op clone) the first
// `changes` times.
class CountingPass : public fx::Pass {
 public:
  CountingPass(int* runs, int changes) : runs_(runs), changes_(changes) {}
  std::string name() const override { return "counting"; }
  bool run(fx::GraphModuleImpl& module) override {
    ++*runs_;
    if (*runs_ > changes_) return false;
    fx::Graph& g = module.graph();
    Node* output = g.output_node();
    Node* value = output->args().at(0).to_node();
    auto guard = g.inserting_before(output);
    output->replace_input_with(value, g.call_function(fx::op("aten::clone"), {value}));
    return true;
  }

 private:
  int* runs_;
  int changes_;
};

// Leaves the graph not linting: an output that reads an erased value is not
// possible through the API, so it adds a call of an unknown target path.
class BreakingPass : public fx::Pass {
 public:
  std::string name() const override { return "breaking"; }
  bool run(fx::GraphModuleImpl& module) override {
    fx::Graph& g = module.graph();
    auto guard = g.inserting_before(g.output_node());
    g.get_attr("no.such.tensor");
    return true;
  }
};

}  // namespace

TEST_CASE("PassManager runs passes in order on a copy and says what changed") {
  fx::GraphModule gm = small_module();
  const std::string before = gm->graph().to_string();
  fx::PassResult result = fx::PassManager().add("eliminate_dead_code").run(gm);
  CHECK(result.modified);
  CHECK(gm->graph().to_string() == before);  // the input is left as it was
  CHECK(result.module->graph().find_nodes(fx::Opcode::kCallFunction,
                                          fx::op("aten::add.Tensor")).empty());
  at::Tensor x = torch::randn({4});
  CHECK(torch::equal(result.module(x).toTensor(), -torch::relu(x)));
  // Nothing left to do: not modified.
  CHECK_FALSE(fx::PassManager().add("eliminate_dead_code").run(result.module).modified);
}

TEST_CASE("to_fixpoint repeats the list until nothing changes, bounded") {
  fx::GraphModule gm = small_module();
  int runs = 0;
  fx::PassManager manager;
  manager.add(std::make_unique<CountingPass>(&runs, 3)).to_fixpoint(10);
  CHECK(manager.run(gm).modified);
  CHECK(runs == 4);  // three that changed, one that did not
  runs = 0;
  fx::PassManager bounded;
  bounded.add(std::make_unique<CountingPass>(&runs, 100)).to_fixpoint(5);
  bounded.run(gm);
  CHECK(runs == 5);
}

TEST_CASE("a pass that breaks the graph is named") {
  fx::GraphModule gm = small_module();
  fx::PassManager manager;
  manager.add(std::make_unique<BreakingPass>());
  CHECK_THROWS_AS(manager.run(gm), fx::GraphError);
  CHECK_THROWS_WITH(manager.run(gm), Catch::Contains("breaking"));
}

TEST_CASE("the by-name table knows every pass once and refuses others") {
  const auto& passes = fx::registered_passes();
  REQUIRE(passes.size() >= 8);
  std::set<std::string> names;
  for (const fx::PassInfo& info : passes) {
    INFO(info.name);
    CHECK(names.insert(info.name).second);
    CHECK(!info.description.empty());
    std::unique_ptr<fx::Pass> pass = fx::make_pass(info.name);
    REQUIRE(pass != nullptr);
    CHECK(pass->name() == info.name);
  }
  for (const char* name :
       {"fuse_conv_bn", "eliminate_dead_code",
        "eliminate_common_subexpressions", "fold_constants", "remove_dropout",
        "eliminate_noops", "normalize_args", "decompose"}) {
    CHECK(names.count(name) == 1);
  }
  CHECK_THROWS_AS(fx::make_pass("fuse_everything"), fx::GraphError);
  CHECK_THROWS_WITH(fx::make_pass("fuse_everything"),
                    Catch::Contains("fuse_everything") &&
                        Catch::Contains("fuse_conv_bn"));
  CHECK_THROWS_AS(fx::PassManager().add("fuse_everything"), fx::GraphError);
}

TEST_CASE("a pipeline prints and parses as text, options in braces") {
  const std::vector<fx::PassStep> steps = {
      {"fuse_conv_bn", {}},
      {"lower_onednn", {{"bf16", "true"}, {"decision", "all"}}},
      {"eliminate_dead_code", {}}};
  const std::string text =
      "fuse_conv_bn,lower_onednn{bf16=true,decision=all},eliminate_dead_code";
  CHECK(fx::to_string(steps) == text);
  CHECK(fx::parse_pass_pipeline(text) == steps);
  CHECK(fx::parse_pass_pipeline(" fuse_conv_bn , lower_onednn{ bf16 = true ,"
                           "decision=all } ,eliminate_dead_code ") == steps);
  // Empty entries are skipped; an empty text is no step.
  CHECK(fx::parse_pass_pipeline(",,fuse_conv_bn,,") ==
        std::vector<fx::PassStep>{{"fuse_conv_bn", {}}});
  CHECK(fx::parse_pass_pipeline("").empty());
  CHECK(fx::to_string({}).empty());
}

TEST_CASE("a malformed pipeline says what is wrong with it") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(fx::parse_pass_pipeline("a{b=1"), Contains("no closing '}'"));
  CHECK_THROWS_WITH(fx::parse_pass_pipeline("a{b}"),
                    Contains("option 'b' of 'a' has no value"));
  CHECK_THROWS_WITH(fx::parse_pass_pipeline("a{=1}"),
                    Contains("an empty name or value"));
  CHECK_THROWS_WITH(fx::parse_pass_pipeline("a{b=1}c"),
                    Contains("followed by 'c', not a comma"));
  CHECK_THROWS_WITH(fx::parse_pass_pipeline("{b=1}"),
                    Contains("options without a pass"));
  CHECK_THROWS_WITH(fx::parse_pass_pipeline("a}"), Contains("unexpected '}'"));
  CHECK_THROWS_WITH(fx::parse_pass_pipeline("a=1"), Contains("unexpected '='"));
  // Names are checked when the passes are made, options by the pass.
  CHECK_THROWS_WITH(fx::PassManager().add(fx::parse_pass_pipeline("fuse_everything")),
                    Contains("no pass named 'fuse_everything'"));
  CHECK_THROWS_WITH(
      fx::PassManager().add(fx::parse_pass_pipeline("fuse_conv_bn{linear=false}")),
      Contains("pass fuse_conv_bn takes no option 'linear'; it takes none"));
}

TEST_CASE("a pipeline's steps run in place, linted, with their statistics") {
  fx::GraphModule gm = small_module();
  fx::PassManager manager;
  manager.add(fx::parse_pass_pipeline("decompose_attention,eliminate_dead_code"));
  CHECK(manager.names() ==
        std::vector<std::string>{"decompose_attention", "eliminate_dead_code"});
  CHECK(manager.run_in_place(*gm));
  CHECK(gm->graph().find_nodes(fx::Opcode::kCallFunction,
                               fx::op("aten::add.Tensor")).empty());
  const auto statistics = manager.statistics();
  REQUIRE(statistics.size() == 1);
  CHECK(statistics[0].pass == "decompose_attention");
  CHECK(statistics[0].name == "attention");
  CHECK(statistics[0].value == 0);
  CHECK_FALSE(manager.run_in_place(*gm));
  // A pass that breaks the graph in place is named as well.
  fx::PassManager breaking;
  breaking.add(std::make_unique<BreakingPass>());
  CHECK_THROWS_WITH(breaking.run_in_place(*gm),
                    Catch::Contains("after pass breaking"));
}

TEST_CASE("registered pipelines are named once") {
  fx::register_pass_pipeline({"test_cleanup", "dead code, twice",
                         fx::parse_pass_pipeline("eliminate_dead_code,"
                                            "eliminate_dead_code")});
  const std::optional<fx::PassPipeline> found = fx::pass_pipeline_named("test_cleanup");
  REQUIRE(found.has_value());
  CHECK(found->steps.size() == 2);
  CHECK_FALSE(fx::pass_pipeline_named("no_such_pipeline").has_value());
  CHECK_THROWS_WITH(fx::register_pass_pipeline({"test_cleanup", "", {}}),
                    Catch::Contains("registered already"));
}
