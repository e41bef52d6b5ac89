// Cost model: FLOPs, multiply-accumulates and bytes moved per node, from the
// tensor metadata the tracer (or ShapeProp) records, and a roofline estimate
// of run time on a given machine: torch.fx's "simulate a model's
// performance without the hardware". An analysis: it reads the graph and
// changes nothing.
//
//   %conv2d : f32[1, 64, 112, 112] = aten::conv2d(%x : f32[1, 3, 224, 224],
//                                                 %conv1_weight : f32[64, 3, 7, 7], None, [2, 2], [3, 3])
//
//   fx::CostReport report = fx::estimate_cost(gm->graph());
//   report.nodes[0].second:
//     macs          118,013,952   (64*112*112 outputs x 3*7*7 weights each)
//     flops         236,027,904   (a multiply-add is 2 FLOPs)
//     bytes_read        639,744   (input 602,112 + weight 37,632)
//     weight_bytes       37,632
//     bytes_written   3,211,264
//
//   std::cout << fx::format_cost_table(report, {.top_n = 10});
//
// What each kind of operator costs (N = output elements, dtype sizes from
// the metadata; bytes_read sums the distinct tensor inputs, bytes_written
// the outputs, unless said otherwise):
//   conv1d/2d/3d, convolution,    MACs = N * C_in/groups * prod(kernel)
//   _convolution, conv_transpose  (transposed: input elements * C_out/groups
//                                 * prod(kernel)); FLOPs = 2 MACs (+ N bias)
//   linear, matmul, mm, bmm,      MACs = N * K (the reduced dimension);
//   addmm, addmv, baddbmm, addbmm FLOPs = 2 MACs (+ N for a bias or self)
//   scaled_dot_product_attention  MACs = scores * (E + Ev), scores = q's rows
//                                 (L per head) * S keys; FLOPs = 2 MACs +
//                                 kSoftmaxFlops and 2 kElementwiseFlops (scale,
//                                 mask) per score
//   lstm, gru                     MACs of every gate matrix product per step;
//                                 kLstmPointwiseFlops (kGruPointwiseFlops)
//                                 per hidden unit and step
//   max/avg/adaptive pooling      N * window elements
//   elementwise (relu, add_, ...) kElementwiseFlops per output element
//   reductions (sum, mean, amax)  one per input element
//   batch_norm in eval            kNormApplyFlops per element
//   batch_norm in training,       (kNormStatsFlops + kNormApplyFlops) per
//   layer/group/instance_norm     element
//   softmax, log_softmax          kSoftmaxFlops per element
//   upsample_bilinear2d           kBilinearFlops per output element
//   embedding                     no FLOPs; reads the indices and the rows
//                                 gathered (not the whole table)
//   views (view, t, transpose,    nothing: no data moves. reshape, flatten,
//   getitem, dropout in eval)     contiguous, to: a copy when the output's
//                                 layout or dtype differs from the input's
//   cat, stack, clone, copy_,     bytes only
//   pad, upsample_nearest
//   zeros, ones, full, fill_      bytes written only
// Anything else (and leaf modules, wrapped functions, nodes whose inputs
// lack metadata) costs 0 FLOPs and the bytes of its inputs and outputs, is
// marked unmodelled, and is listed in CostReport::unmodelled_ops, so the
// totals say what they leave out.
#pragma once

#include <cstddef>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fx/ir/graph.h"

namespace c10 {
struct IValue;
}  // namespace c10

namespace fx {
class GraphModuleImpl;
}  // namespace fx

namespace fx {

// FLOPs per output element of an elementwise operator (relu, add, sigmoid,
// ...): one, whatever the operator, as fvcore and most FLOP counters do;
// transcendental functions cost more on real hardware.
inline constexpr double kElementwiseFlops = 1;
// Normalization, per element. Applying precomputed statistics is
// x * scale + shift with scale and shift folded per channel (batch_norm in
// eval): 2. Computing them is a sum and a sum of squares: 3 more.
inline constexpr double kNormApplyFlops = 2;
inline constexpr double kNormStatsFlops = 3;
// softmax and log_softmax, per element: subtract the row maximum (after
// comparing with it), exponentiate, sum, divide (or subtract the log-sum).
inline constexpr double kSoftmaxFlops = 5;
// LSTM, per hidden unit, step, layer and direction, besides the matrix
// products: add the two products (4 gates), 4 gate activations,
// c' = f*c + i*g (3), h' = o*tanh(c') (2); plus 8 with biases (2 per gate).
inline constexpr double kLstmPointwiseFlops = 13;
inline constexpr double kLstmBiasFlops = 8;
// GRU, the same: add the two products of the reset and update gates (2),
// 3 gate activations, n = tanh(x_n + r * h_n) (2 besides the tanh),
// h' = (1 - z) * n + z * h (4); plus 6 with biases (2 per gate).
inline constexpr double kGruPointwiseFlops = 11;
inline constexpr double kGruBiasFlops = 6;
// upsample_bilinear2d, per output element: weigh 4 neighbours and add them.
inline constexpr double kBilinearFlops = 7;

struct NodeCost {
  double flops = 0;
  // Multiply-accumulates of matrix products and convolutions (the figure
  // model zoos quote as "GMACs" or, confusingly, "GFLOPs").
  double macs = 0;
  double bytes_read = 0;
  double bytes_written = 0;
  // The part of bytes_read that is weights: the parameters, buffers and
  // constants the node reads (get_attr values, packed or not), the same on
  // every run; for embedding, the rows it gathers.
  double weight_bytes = 0;
  // False when the cost model does not know the operator (or lacks the
  // metadata it needs): flops and macs are then 0.
  bool modelled = true;

  double bytes() const { return bytes_read + bytes_written; }
  // Adds the figures; the sum is modelled only if both were.
  NodeCost& operator+=(const NodeCost& other);
};

// Points into the graph it was made from: keep the graph alive while using
// it.
struct CostReport {
  // Every call_function, call_method and call_module node, in program order
  // (placeholders, get_attr and output nodes compute nothing).
  std::vector<std::pair<const Node*, NodeCost>> nodes;
  NodeCost total;
  // By each node's kModulePath ("" for the root and for nodes without one):
  // exactly the nodes of that module...
  std::map<std::string, NodeCost> by_module_path;
  // ...and inclusively: "layer1" also holds "layer1.0.conv1"; "" holds all.
  std::map<std::string, NodeCost> by_module_tree;
  // What the model does not know, sorted and unique: operator names
  // ("aten::nonzero"), wrapped function names, "call_module <path>", and
  // "<op> (no tensor metadata)" when metadata needed was missing (run
  // fx::ShapeProp first).
  std::vector<std::string> unmodelled_ops;
  // estimate_cost_at's: the copy of the module whose graph `nodes` point
  // into, kept alive with the report.
  std::shared_ptr<const GraphModuleImpl> priced;
};

// Prices calls of `op` (a qualified operator name, "fx_onednn::conv") as
// calls of the aten operator `aten_op` ("aten::conv2d"), whose weight and
// bias it takes by the same names, whose first argument is its input and
// whose output it computes: how libraries of operators above this one
// (lowering/) make their calls known to the cost model. Throws
// fx::GraphError when `aten_op` is not an operator the model prices.
void price_as(const std::string& op, const std::string& aten_op);

// Prices calls of `op` by the multiply-accumulates `macs` counts for one
// call (nullopt: its arguments lack the metadata needed): FLOPs twice that,
// bytes what the call reads and writes, as for every operator. For calls
// no one aten operator prices: fx_onednn::conv_chain, a run of
// convolutions in one call.
void price_by_macs(const std::string& op,
                   std::function<std::optional<double>(const Node&)> macs);

// Whether calls of `op` (a qualified name: "aten::conv2d",
// "fx_onednn::conv") are priced (by their overload-less name).
bool is_priced(const std::string& op);

// The cost of one node (zero for placeholders, get_attr and output).
NodeCost estimate_node_cost(const Node& node);

// The cost of every node of `graph`, from its kTensorMeta /
// kTensorMetaList metadata.
CostReport estimate_cost(const Graph& graph);

// The cost at other input shapes: a graph with dynamic dimensions
// (TraceOptions::dynamic) prices as it would run on `inputs`, its FLOPs and
// bytes functions of those sizes. A copy of `module` is run by ShapeProp on
// them (the module's own metadata stays the example's) and priced. Throws
// what the run throws (a GuardError for inputs the graph refuses).
//   estimate_cost_at(*gm, {torch::zeros({8, 3, 224, 224})}).total.flops
//       // == 4x the figure at the traced batch of 2
CostReport estimate_cost_at(const GraphModuleImpl& module,
                            const std::vector<c10::IValue>& inputs);

// --- Roofline -------------------------------------------------------------

// A machine as the roofline model sees it. peak and bandwidth must be
// positive, cache_bytes at least 0.
struct Machine {
  double peak_flops_per_second = 0;
  double memory_bytes_per_second = 0;
  // Weights up to this many bytes stay in cache from one run to the next;
  // a graph with more reads them from main memory on every run (see
  // WeightsIn). Infinite: always in cache, the plain roofline.
  double cache_bytes = std::numeric_limits<double>::infinity();
};

enum class Bound {
  kNone,     // no work
  kCompute,  // flops / peak >= bytes / bandwidth
  kMemory,
};
// "-", "compute", "memory".
const char* bound_name(Bound bound);

// Where a run finds the weights it reads.
enum class WeightsIn {
  // In cache: a node's time is max(flops / peak, bytes / bandwidth), one
  // that overlaps compute and memory traffic perfectly (the roofline).
  kCache,
  // In main memory: each node fetches its weights before it computes,
  // max(flops / peak, (bytes - weight_bytes) / bandwidth)
  //   + weight_bytes / bandwidth.
  // At batch 1 oneDNN's convolutions do not overlap fetching cold weights
  // with computing: a 512->512 3x3 convolution at 7x7 on one Sapphire
  // Rapids core takes 0.54 ms with its 9.4 MB of weights in cache, 0.93 ms
  // after a cache flush (the weights at 24.6 GB/s: 0.38 ms).
  kMemory,
};
// kMemory when `weight_bytes` (a graph's or a pipeline stage's:
// CostReport::total.weight_bytes) exceed machine.cache_bytes.
WeightsIn weights_in(double weight_bytes, const Machine& machine);

// A node's time as above. Throws fx::GraphError when a figure of `machine`
// is out of range.
double estimated_seconds(const NodeCost& cost, const Machine& machine,
                         WeightsIn weights = WeightsIn::kCache);
Bound bound_of(const NodeCost& cost, const Machine& machine);
// The sum over the report's nodes, run one after another, with the weights
// where weights_in(report.total.weight_bytes, machine) puts them.
double estimated_seconds(const CostReport& report, const Machine& machine);

// --- Printing -------------------------------------------------------------

// 3 significant digits with an SI prefix: "0 B", "512 B", "3.21 MB",
// "236 MFLOPs", "4.11 GMACs".
std::string format_quantity(double value, const std::string& unit);
// "850 ns", "12.3 us", "4.56 ms", "1.20 s".
std::string format_seconds(double seconds);

struct CostTableOptions {
  enum class GroupBy {
    kNode,        // one row per node: name, target, module path
    kModulePath,  // one row per exact module path ("(root)" for "")
    kModuleTree,  // one row per module and all it contains, and one
                  // ("(outside submodules)") for the nodes in none
  };
  GroupBy group_by = GroupBy::kNode;
  // Show only the first top_n rows (0: all); the total row covers all.
  size_t top_n = 0;
  // With a machine, adds each row's estimated time (the sum of its nodes',
  // with the weights where the whole report's put them) and bound (of the nodes taking most of that time), and sorts by time;
  // without, sorts by FLOPs. Ties keep program (or path) order.
  const Machine* machine = nullptr;
};

// A text table, the same for the same report every time. ResNet-18 with
// {.group_by = kModuleTree, .top_n = 2, .machine = &machine} (1 TFLOP/s,
// 100 GB/s):
//
//   module                  FLOPs        MACs     read  written     time  bound    %time
//   layer1             926 MFLOPs   462 MMACs  7.02 MB  6.42 MB   989 us  compute   23.8
//   layer2             823 MFLOPs   411 MMACs  6.92 MB  4.01 MB   862 us  compute   20.7
//   ... 54 more rows
//   total (70 nodes)  3.64 GFLOPs  1.81 GMACs  84.0 MB  32.9 MB  4.16 ms  compute  100.0
//
// followed by "unmodelled: ..." when the report has unmodelled operators.
// Unmodelled nodes' targets read "aten::foo (unmodelled)".
std::string format_cost_table(const CostReport& report,
                              const CostTableOptions& options = {});

}  // namespace fx
