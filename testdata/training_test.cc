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
    {
      INFO("plain GraphModule");
      Traced traced = trace_for_training(name);
      fx::GraphModule gm = traced.gm;
      Side side = module_side(*traced.model.module,
                              [gm](std::vector<c10::IValue> in) mutable {
                                return gm->forward(std::move(in));
                              });
      check_trains_as_eager(eager, side, traced.model.example_inputs);
    }
    {
      INFO("after a Transformer");
      Traced traced = trace_for_training(name);
      fx::GraphModule gm = fx::Transformer(traced.gm).transform();
      CHECK(gm->traced_training() == traced.gm->traced_training());
      Side side = module_side(*traced.model.module,
                              [gm](std::vector<c10::IValue> in) mutable {
                                return gm->forward(std::move(in));
                              });
      check_trains_as_eager(eager, side, traced.model.example_inputs);
    }
    {
      INFO("through split_module's submodules");
      Traced traced = trace_for_training(name);
      fx::GraphModule gm = split_in_two(traced.gm);
      Side side = module_side(*traced.model.module,
                              [gm](std::vector<c10::IValue> in) mutable {
                                return gm->forward(std::move(in));
                              });
      check_trains_as_eager(eager, side, traced.model.example_inputs);
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
      Side side = module_side(*loaded, [loaded](std::vector<c10::IValue> in) mutable {
        return loaded->forward(std::move(in));
      });
      check_trains_as_eager(eager, side, traced.model.example_inputs);
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

}  // namespace

TEST_CASE("parameters two nodes share accumulate their gradients as in eager") {
  torch::manual_seed(0);
  TiedNet eager_net;
  torch::manual_seed(0);
  TiedNet traced_net;
  std::vector<c10::IValue> inputs = {torch::randint(50, {4, 6}, torch::kLong)};
  fx::GraphModule gm = fx::symbolic_trace(traced_net, inputs[0]);
  size_t reads = 0;
  for (fx::Node* n : gm->graph().find_nodes(fx::Opcode::kGetAttr, "fc.weight")) {
    reads += n->users().size();
  }
  CHECK(reads == 2);
  Side graph = module_side(*traced_net, [gm](std::vector<c10::IValue> in) mutable {
    return gm->forward(std::move(in));
  });
  check_same_training(train(tied_side(eager_net), inputs), train(graph, inputs));
}

TEST_CASE("fold_constants leaves a training graph's trained parameters unfolded") {
  torch::manual_seed(0);
  TiedNet eager_net;
  torch::manual_seed(0);
  TiedNet traced_net;
  std::vector<c10::IValue> inputs = {torch::randint(50, {4, 6}, torch::kLong)};
  fx::GraphModule gm = fx::symbolic_trace(traced_net, inputs[0]);
  // embedding.weight.t() reads only a parameter: eval mode folds it.
  {
    TiedNet eval_net;
    eval_net->eval();
    fx::GraphModule eval_gm = fx::symbolic_trace(eval_net, inputs[0]);
    CHECK(fx::fold_constants(*eval_gm));
  }
  CHECK_FALSE(fx::fold_constants(*gm));
  CHECK(gm->init_steps().empty());
  Side graph = module_side(*traced_net, [gm](std::vector<c10::IValue> in) mutable {
    return gm->forward(std::move(in));
  });
  check_same_training(train(tied_side(eager_net), inputs), train(graph, inputs));
}
