// Training through a GraphModule: for every traceable zoo model traced in
// training mode, a few steps of SGD with momentum give bitwise the losses,
// gradients, weights and buffers (BatchNorm statistics) that eager gives,
// dropout included (both sides seeded alike before each step); where
// autograd refuses eager's program (inplace_ops writes in place what its
// backward needs), it refuses the graph's alike. The same
// through a Transformer's output, after fx::save and fx::load, through
// split_module's submodules and from the Interpreter; on a model whose
// parameters two nodes share; and after fold_constants, which leaves a
// training graph's trained parameters unfolded.
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "fx/fx.h"
#include "interpreter/interpreter.h"
#include "interpreter/transformer.h"
#include "models/zoo.h"
#include "passes/fold_constants.h"
#include "passes/split_module.h"
#include "third_party/catch.h"

namespace {

constexpr int kSteps = 2;  // the second with momentum

using TensorMap = std::map<std::string, at::Tensor>;
using Forward = std::function<c10::IValue(std::vector<c10::IValue>)>;

// What a side trains: its forward, and its parameters and buffers by name.
struct Side {
  Forward forward;
  TensorMap parameters;
  TensorMap buffers;
};

TensorMap tensors(const torch::OrderedDict<std::string, at::Tensor>& items) {
  TensorMap out;
  for (const auto& item : items) out.emplace(item.key(), item.value());
  return out;
}

Side module_side(const torch::nn::Module& module, Forward forward) {
  return {std::move(forward), tensors(module.named_parameters()),
          tensors(module.named_buffers())};
}

// The mean square of every floating-point tensor of the output, summed.
void add_losses(const c10::IValue& value, at::Tensor* loss) {
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    if (t.is_floating_point()) {
      at::Tensor term = t.square().mean();
      *loss = loss->defined() ? *loss + term : term;
    }
  } else if (value.isTuple()) {
    for (const c10::IValue& element : value.toTupleRef().elements()) {
      add_losses(element, loss);
    }
  }
}

struct Trajectory {
  std::vector<at::Tensor> losses;
  std::vector<TensorMap> gradients;  // per step, by parameter name
  TensorMap parameters, buffers;     // after the last step
};

Trajectory train(const Side& side, const std::vector<c10::IValue>& inputs) {
  std::vector<at::Tensor> parameters;
  for (const auto& [name, p] : side.parameters) parameters.push_back(p);
  torch::optim::SGD optimizer(parameters,
                              torch::optim::SGDOptions(0.01).momentum(0.9));
  Trajectory t;
  for (int step = 0; step < kSteps; ++step) {
    optimizer.zero_grad();
    torch::manual_seed(100 + step);  // dropout draws the same on both sides
    at::Tensor loss;
    add_losses(side.forward(inputs), &loss);
    REQUIRE(loss.defined());
    loss.backward();
    t.losses.push_back(loss.detach().clone());
    TensorMap gradients;
    for (const auto& [name, p] : side.parameters) {
      if (p.grad().defined()) gradients.emplace(name, p.grad().clone());
    }
    t.gradients.push_back(std::move(gradients));
    optimizer.step();
  }
  for (const auto& [name, p] : side.parameters) {
    t.parameters.emplace(name, p.detach().clone());
  }
  for (const auto& [name, b] : side.buffers) {
    t.buffers.emplace(name, b.clone());
  }
  return t;
}

void check_equal(const TensorMap& eager, const TensorMap& graph,
                 const std::string& what) {
  for (const auto& [name, tensor] : graph) {
    INFO(what << " " << name);
    // Constants the tracer captured are buffers of the GraphModule only.
    if (name.rfind("_tensor_constant", 0) == 0) continue;
    REQUIRE(eager.count(name));
    CHECK(torch::equal(eager.at(name), tensor));
  }
}

// Bitwise the same training. The graph's parameters may be a subset of
// eager's (a GraphModule owns what its graph reads): the others get no
// gradient in eager either.
void check_same_training(const Trajectory& eager, const Trajectory& graph) {
  REQUIRE(eager.losses.size() == graph.losses.size());
  for (size_t step = 0; step < eager.losses.size(); ++step) {
    INFO("step " << step);
    CHECK(torch::equal(eager.losses[step], graph.losses[step]));
    CHECK(eager.gradients[step].size() == graph.gradients[step].size());
    check_equal(eager.gradients[step], graph.gradients[step], "gradient of");
  }
  check_equal(eager.parameters, graph.parameters, "parameter");
  check_equal(eager.buffers, graph.buffers, "buffer");
  CHECK(!graph.parameters.empty());
}

// A zoo model in training mode, traced, its state then reset to a fresh
// copy's (tracing runs batch norms, which update their statistics).
struct Traced {
  models::ZooModel model;
  fx::GraphModule gm;
};

Traced trace_for_training(const std::string& name) {
  models::ZooModel model = models::make_zoo_model(name);
  model.module->train();
  fx::GraphModule gm = models::trace_zoo_model(model);
  REQUIRE(gm->traced_training() != std::optional<bool>(false));
  models::ZooModel fresh = models::make_zoo_model(name);
  torch::NoGradGuard no_grad;
  TensorMap state = tensors(fresh.module->named_buffers());
  for (const auto& item : model.module->named_buffers()) {
    item.value().copy_(state.at(item.key()));
  }
  return {std::move(model), std::move(gm)};
}

Trajectory train_eager(const std::string& name) {
  models::ZooModel model = models::make_zoo_model(name);
  model.module->train();
  return train(module_side(*model.module, model.forward), model.example_inputs);
}

// Two partitions: the first half of the calls and the second.
fx::GraphModule split_in_two(const fx::GraphModule& gm) {
  int64_t calls = 0;
  for (const fx::Node* n : gm->graph().nodes()) {
    if (n->op() != fx::Opcode::kPlaceholder && n->op() != fx::Opcode::kGetAttr &&
        n->op() != fx::Opcode::kOutput) {
      ++calls;
    }
  }
  auto index = std::make_shared<int64_t>(0);
  return fx::split_module(gm, [index, calls](const fx::Node&) {
    return (*index)++ < calls / 2 ? 0 : 1;
  });
}

}  // namespace

Forward forward_of(fx::GraphModule gm) {
  return [gm](std::vector<c10::IValue> in) mutable { return gm->forward(std::move(in)); };
}

// The GraphModules trained besides eager, from the traced one: itself, a
// Transformer's output, split_module's (whose submodules hold the nodes).
std::vector<std::pair<std::string, std::function<fx::GraphModule(const fx::GraphModule&)>>>
graph_variants() {
  return {
      {"plain GraphModule", [](const fx::GraphModule& gm) { return gm; }},
      {"after a Transformer",
       [](const fx::GraphModule& gm) { return fx::Transformer(gm).transform(); }},
      {"through split_module's submodules", split_in_two},
  };
}

// Trains the graph side as eager trained: bitwise the same trajectory, or,
// where autograd refused eager's program, the same refusal.
void check_trains_as_eager(const std::optional<Trajectory>& eager,
                           const Side& side,
                           const std::vector<c10::IValue>& inputs) {
  if (eager) {
    check_same_training(*eager, train(side, inputs));
  } else {
    CHECK_THROWS_WITH(train(side, inputs),
                      Catch::Contains("modified by an inplace operation"));
  }
}

TEST_CASE("training through a GraphModule matches eager bitwise, every zoo model") {
  for (const std::string& name : models::traceable_zoo_model_names()) {
    INFO(name);
    std::optional<Trajectory> eager;
    try {
      eager = train_eager(name);
    } catch (const c10::Error& e) {
      // inplace_ops writes in place what its backward needs: eager refuses.
      INFO(e.what_without_backtrace());
      CHECK(name == "inplace_ops");
    }
    for (const auto& [what, make] : graph_variants()) {
      INFO(what);
      Traced traced = trace_for_training(name);
      fx::GraphModule gm = make(traced.gm);
      CHECK(gm->traced_training() == traced.gm->traced_training());
      check_trains_as_eager(eager, module_side(*traced.model.module, forward_of(gm)),
                            traced.model.example_inputs);
    }
    {
      INFO("from the Interpreter");
      Traced traced = trace_for_training(name);
      auto interpreter = std::make_shared<fx::Interpreter>(traced.gm);
      Side side = module_side(*traced.model.module,
                              [interpreter](std::vector<c10::IValue> in) {
                                return interpreter->run(std::move(in));
                              });
      check_trains_as_eager(eager, side, traced.model.example_inputs);
    }
    {
      INFO("after fx::save and fx::load");
      Traced traced = trace_for_training(name);
      std::stringstream file;
      fx::save(traced.gm, file);
      fx::Attributes attributes;  // leaf modules are C++ code, given again
      for (const std::string& path : traced.model.leaf_modules) {
        attributes.modules.emplace(path, *traced.gm->leaf_module(path));
      }
      fx::GraphModule loaded = fx::load(file, attributes);
      CHECK(loaded->traced_training() == traced.gm->traced_training());
      // The loaded module owns its tensors: train those.
      check_trains_as_eager(eager, module_side(*loaded, forward_of(loaded)),
                            traced.model.example_inputs);
    }
  }
}

namespace {

// One linear layer applied twice, and an embedding whose table is also the
// output projection (tied weights): two nodes read each parameter.
struct TiedNetImpl : torch::nn::Module {
  TiedNetImpl()
      : embedding(register_module("embedding", torch::nn::Embedding(50, 16))),
        fc(register_module("fc", torch::nn::Linear(16, 16))),
        dropout(register_module("dropout", torch::nn::Dropout(0.25))) {}
  at::Tensor forward(at::Tensor ids) {
    at::Tensor h = torch::relu(fc(embedding(ids)));
    h = dropout(torch::relu(fc(h)));
    return torch::matmul(h, embedding->weight.t());
  }
  torch::nn::Embedding embedding;
  torch::nn::Linear fc;
  torch::nn::Dropout dropout;
};
TORCH_MODULE(TiedNet);

Side tied_side(TiedNet net) {
  return module_side(*net, [net](std::vector<c10::IValue> in) mutable {
    return c10::IValue(net->forward(in[0].toTensor()));
  });
}

// Two TiedNets of the same weights, one traced (in training mode).
struct TiedPair {
  TiedPair() {
    torch::manual_seed(0);
    eager = TiedNet();
    torch::manual_seed(0);
    traced = TiedNet();
    gm = fx::symbolic_trace(traced, inputs[0]);
  }
  // Trains both; checks they trained alike.
  void check_same_training() {
    ::check_same_training(train(tied_side(eager), inputs),
                          train(module_side(*traced, forward_of(gm)), inputs));
  }
  TiedNet eager{nullptr}, traced{nullptr};
  std::vector<c10::IValue> inputs = {torch::randint(50, {4, 6}, torch::kLong)};
  fx::GraphModule gm{nullptr};
};

}  // namespace

TEST_CASE("parameters two nodes share accumulate their gradients as in eager") {
  TiedPair pair;
  fx::GraphModule gm = pair.gm;
  size_t reads = 0;
  for (fx::Node* n : gm->graph().find_nodes(fx::Opcode::kGetAttr, "fc.weight")) {
    reads += n->users().size();
  }
  CHECK(reads == 2);
  pair.check_same_training();
}

TEST_CASE("fold_constants leaves a training graph's trained parameters unfolded") {
  TiedPair pair;
  // embedding.weight.t() reads only a parameter: eval mode folds it.
  {
    TiedNet eval_net;
    eval_net->eval();
    fx::GraphModule eval_gm = fx::symbolic_trace(eval_net, pair.inputs[0]);
    CHECK(fx::fold_constants(*eval_gm));
  }
  CHECK_FALSE(fx::fold_constants(*pair.gm));
  CHECK(pair.gm->init_steps().empty());
  pair.check_same_training();
}
