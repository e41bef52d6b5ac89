// The pass lower_onednn_recurrent: LSTM and GRU layers (aten::lstm,
// aten::gru: nn.LSTM, nn.GRU, torch::nn::LSTM / GRU with biases, without
// projections, float32, eval mode, one or two directions) become
// fx_onednn::lstm / gru, oneDNN's LSTM and linear-before-reset GRU
// primitives, on weights transposed (a GRU's gates reordered) and biases
// summed by steps that fold into an init step.
#include <memory>
#include <optional>
#include <vector>

#include "fx/runtime/graph_module.h"
#include "lowering/passes/passes.h"
#include "lowering/passes/rewrite_support.h"
#include "passes/patterns.h"

namespace fx {
namespace lowering {
namespace {

class LowerRecurrent : public LoweringPass {
 public:
  explicit LowerRecurrent(const InferenceOptions& options)
      : LoweringPass("lower_onednn_recurrent", options) {}

 private:
  bool rewrite(GraphModuleImpl& module) override {
    for (Node* n : module.graph().nodes()) lower(module, n);
    return report().recurrent > 0;
  }

  // aten::lstm and aten::gru of constant float32 weights with biases,
  // without projections, in eval mode (one or two directions):
  // fx_onednn::lstm and gru on the weights transposed (a GRU's gates
  // reordered) and the biases summed, by init steps.
  void lower(GraphModuleImpl& module, Node* n) {
    Graph& graph = module.graph();
    const std::optional<Recurrent> r = match_recurrent(module, *n);
    if (!r || !r->has_biases || r->train) return;
    const bool gru = r->kind == Recurrent::Kind::kGru;
    const int64_t layers = r->layers;
    const int64_t directions = r->directions();
    std::vector<Argument> weights;
    {
      auto guard = graph.inserting_before(n);
      const std::vector<Node*>& p = r->params;
      // Rows [start, start + hidden) of a gate-stacked GRU weight or bias.
      auto gate = [&](const Argument& w, int64_t g, int64_t hidden) {
        return Argument(graph.call_function(
            fx::op("aten::slice.Tensor"),
            {w, 0, g * hidden, (g + 1) * hidden, 1}));
      };
      auto cat = [&](std::vector<Argument> parts) {
        return Argument(graph.call_function(
            fx::op("aten::cat"), {Argument::list(std::move(parts)), 0}));
      };
      // Per layer and direction (aten's order: the forward one first).
      for (int64_t l = 0; l < layers * directions; ++l) {
        const int64_t hidden =
            module.fetch_attr(p[4 * l + 1]->target().str()).size(1);
        for (int i = 0; i < 2; ++i) {
          // aten's GRU gates are r, z, n; oneDNN's u (= z), r, o (= n).
          const Argument w =
              gru ? cat({gate(p[4 * l + i], 1, hidden),
                         gate(p[4 * l + i], 0, hidden),
                         gate(p[4 * l + i], 2, hidden)})
                  : Argument(p[4 * l + i]);
          weights.push_back(graph.call_function(
              fx::op("aten::contiguous"),
              {graph.call_function(fx::op("aten::t"), {w})}));
        }
        if (!gru) {
          weights.push_back(graph.call_function(
              fx::op("aten::add.Tensor"), {p[4 * l + 2], p[4 * l + 3]}));
          continue;
        }
        const Argument b_ih(p[4 * l + 2]), b_hh(p[4 * l + 3]);
        auto sum = [&](int64_t g) {
          return Argument(graph.call_function(
              fx::op("aten::add.Tensor"),
              {gate(b_ih, g, hidden), gate(b_hh, g, hidden)}));
        };
        weights.push_back(cat({sum(1), sum(0), gate(b_ih, 2, hidden),
                               gate(b_hh, 2, hidden)}));
      }
    }
    std::vector<Argument> args = {r->input, r->hx,
                                  Argument::list(std::move(weights)), layers,
                                  r->batch_first};
    if (directions == 2) args.push_back(true);
    replace_with_call(graph, n, {}, gru ? "fx_onednn::gru" : "fx_onednn::lstm",
                      std::move(args), /*channels_last=*/false);
    ++report().recurrent;
  }
};

}  // namespace

std::unique_ptr<Pass> make_lower_recurrent(const InferenceOptions& options) {
  return std::make_unique<LowerRecurrent>(options);
}

}  // namespace lowering
}  // namespace fx
