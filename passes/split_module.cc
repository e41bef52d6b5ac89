#include "passes/split_module.h"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>


#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fx/ir/control_flow.h"
#include "fx/ir/errors.h"
#include "fx/ir/function.h"
#include "fx/ir/meta.h"
#include "fx/runtime/graph_module.h"
#include "passes/aliasing.h"

namespace fx {
namespace {

struct Partition {
  int64_t number = 0;
  std::vector<Node*> nodes;
  // Values from outside, in order of first use.
  std::vector<Node*> inputs;
  absl::flat_hash_set<Node*> input_set;
  // Values used outside, in order of first such use.
  std::vector<Node*> outputs;
  absl::flat_hash_set<Node*> output_set;
  // Partitions (by index) that must run before this one, each with the
  // first reason found: "%b uses %a".
  std::map<size_t, std::string> after;

  std::string name() const { return absl::StrCat("submod_", number); }
};

void add_unique(Node* n, std::vector<Node*>* list,
                absl::flat_hash_set<Node*>* set) {
  if (set->insert(n).second) list->push_back(n);
}

// The order in which to run the partitions: each after those it depends
// on, ties broken by index (first appearance). Throws fx::GraphError naming
// a cycle if there is none.
std::vector<size_t> run_order(const std::vector<Partition>& partitions) {
  const size_t count = partitions.size();
  std::vector<size_t> waiting(count);
  std::vector<std::vector<size_t>> before(count);
  for (size_t i = 0; i < count; ++i) {
    waiting[i] = partitions[i].after.size();
    for (const auto& entry : partitions[i].after) {
      before[entry.first].push_back(i);
    }
  }
  std::set<size_t> ready;
  for (size_t i = 0; i < count; ++i) {
    if (waiting[i] == 0) ready.insert(i);
  }
  std::vector<size_t> order;
  while (!ready.empty()) {
    size_t i = *ready.begin();
    ready.erase(ready.begin());
    order.push_back(i);
    for (size_t j : before[i]) {
      if (--waiting[j] == 0) ready.insert(j);
    }
  }
  if (order.size() == count) return order;

  // Every partition left waits for another one left: walk back from the
  // first until a partition repeats.
  std::vector<size_t> walk;
  std::vector<int> seen(count, -1);
  size_t i = 0;
  while (waiting[i] == 0) ++i;
  while (seen[i] < 0) {
    seen[i] = static_cast<int>(walk.size());
    walk.push_back(i);
    for (const auto& entry : partitions[i].after) {
      if (waiting[entry.first] != 0) {
        i = entry.first;
        break;
      }
    }
  }
  // walk[seen[i]..] is the cycle, each partition waiting for the next
  // (the last for the first): list it in the order it would have to run.
  std::vector<size_t> cycle(walk.begin() + seen[i], walk.end());
  std::vector<std::string> steps;
  for (size_t k = cycle.size(); k-- > 0;) {
    const Partition& from = partitions[cycle[(k + 1) % cycle.size()]];
    const Partition& to = partitions[cycle[k]];
    steps.push_back(absl::StrCat(
        "partition ", from.number, " -> partition ", to.number, " (",
        to.after.at(cycle[(k + 1) % cycle.size()]), ")"));
  }
  throw GraphError(absl::StrCat(
      "split_module: the partitions depend on each other in a cycle, so no "
      "order runs them: ",
      absl::StrJoin(steps, ", "),
      "; assign nodes so that each partition uses only values of partitions "
      "that can run before it"));
}

std::unique_ptr<Graph> build_partition_graph(const Partition& partition) {
  auto graph = std::make_unique<Graph>();
  absl::flat_hash_map<const Node*, Node*> env;
  for (Node* input : partition.inputs) {
    Node* placeholder = graph->placeholder(input->name());
    placeholder->meta() = input->meta();
    env[input] = placeholder;
  }
  auto lookup = [&](Node* n) -> Argument { return env.at(n); };
  for (Node* n : partition.nodes) {
    for (Node* input : n->all_input_nodes()) {
      if (input->op() == Opcode::kGetAttr && !env.contains(input)) {
        env[input] = graph->node_copy(*input, lookup);
      }
    }
    env[n] = graph->node_copy(*n, lookup);
  }
  std::vector<Argument> results;
  for (Node* n : partition.outputs) results.push_back(env.at(n));
  if (results.size() == 1) {
    graph->output(results[0]);
  } else {
    graph->output(results.empty() ? Argument()
                                  : Argument::tuple(std::move(results)));
  }
  return graph;
}

// split_module's steps: partitions from the callback, the values and
// in-place writes that order them, then a submodule per partition and the
// graph calling them.
class Splitter {
 public:
  Splitter(const GraphModuleImpl& module,
           const std::function<int64_t(const Node&)>& partition_of)
      : module_(module), graph_(module.graph()), partition_of_(partition_of) {}

  GraphModule split() {
    graph_.lint();
    assign_partitions();
    mark_graph_outputs();
    order_in_place_writes();
    return build(run_order(partitions_));
  }

 private:
  void depend(size_t from, size_t to, std::string why) {
    partitions_[to].after.emplace(from, std::move(why));
  }

  // Assigns call nodes to partitions and records what crosses between them.
  void assign_partitions() {
    std::map<int64_t, size_t> index_of;
    int64_t next_position = 0;
    for (Node* n : graph_.nodes()) {
      position_[n] = next_position++;
      if (!n->is_call()) continue;
      const int64_t number = partition_of_(*n);
      if (number < 0) {
        throw GraphError(absl::StrCat(
            "split_module: the callback gave %", n->name(),
            " the partition number ", number, "; use numbers >= 0"));
      }
      auto [it, added] = index_of.emplace(number, partitions_.size());
      if (added) {
        partitions_.emplace_back();
        partitions_.back().number = number;
      }
      Partition& partition = partitions_[it->second];
      partition.nodes.push_back(n);
      partition_of_node_[n] = it->second;
      for (Node* input : n->all_input_nodes()) {
        if (input->op() == Opcode::kGetAttr) continue;
        auto def = partition_of_node_.find(input);
        if (def != partition_of_node_.end() && def->second == it->second) {
          continue;
        }
        add_unique(input, &partition.inputs, &partition.input_set);
        if (def == partition_of_node_.end()) continue;
        Partition& producer = partitions_[def->second];
        add_unique(input, &producer.outputs, &producer.output_set);
        depend(def->second, it->second,
               absl::StrCat("%", n->name(), " uses %", input->name()));
      }
    }
  }

  // What the graph returns is an output of the partition computing it.
  void mark_graph_outputs() {
    for (Node* input : graph_.output_node()->all_input_nodes()) {
      auto def = partition_of_node_.find(input);
      if (def == partition_of_node_.end()) continue;
      Partition& producer = partitions_[def->second];
      add_unique(input, &producer.outputs, &producer.output_set);
    }
  }

  // A write in place and the reads of the same value in other partitions
  // keep their order.
  void order_in_place_writes() {
    for (Node* writer : graph_.nodes()) {
      auto w = partition_of_node_.find(writer);
      if (w == partition_of_node_.end()) continue;
      const size_t index = w->second;
      for (Node* value : written_in_place(*writer)) {
        for (Node* reader : value->users()) {
          auto r = partition_of_node_.find(reader);
          if (reader == writer || r == partition_of_node_.end() ||
              r->second == index) {
            continue;
          }
          const bool reads_first = position_.at(reader) < position_.at(writer);
          depend(reads_first ? r->second : index,
                 reads_first ? index : r->second,
                 absl::StrCat("%", writer->name(), " writes %", value->name(),
                              " in place, which %", reader->name(), " reads ",
                              reads_first ? "before" : "after"));
        }
      }
    }
  }

  // The module's tensors that `g` reads.
  void take_tensors(const Graph& g, Attributes* attributes) {
    if (parameter_paths_.empty()) {
      for (const auto& item : module_.named_parameters(/*recurse=*/true)) {
        parameter_paths_.insert(item.key());
      }
    }
    // The bodies of control flow read the module's tensors too.
    for (const Graph* graph : g.all_graphs()) {
      for (Node* n : graph->find_nodes(Opcode::kGetAttr)) {
        if (Graph::reads_subgraph(*n)) continue;
        const std::string& path = n->target().str();
        (parameter_paths_.count(path) ? attributes->parameters
                                      : attributes->buffers)
            .emplace(path, module_.fetch_attr(path));
      }
    }
    attributes->traced_training = module_.traced_training();
  }

  // A GraphModule running `g` on the module's tensors and leaf modules, in
  // its training mode.
  std::shared_ptr<GraphModuleImpl> make_module(std::unique_ptr<Graph> g,
                                               Attributes attributes) {
    take_tensors(*g, &attributes);
    for (const Graph* graph : g->all_graphs()) {
      for (Node* n : graph->find_nodes(Opcode::kCallModule)) {
        const std::string& path = n->target().str();
        // The graph calling the submodules is given them; a partition's
        // leaf modules are the module's.
        if (attributes.modules.count(path)) continue;
        attributes.modules.emplace(path, *module_.leaf_module(path));
      }
    }
    auto made =
        std::make_shared<GraphModuleImpl>(std::move(g), std::move(attributes));
    if (!module_.traced_training()) made->train(module_.is_training());
    return made;
  }

  static void copy_tensor_meta(const Node* from, Node* to) {
    if (const TensorMeta* tm = from->meta().get(kTensorMeta)) {
      to->meta().set(kTensorMeta, *tm);
    }
    if (const auto* list = from->meta().get(kTensorMetaList)) {
      to->meta().set(kTensorMetaList, *list);
    }
  }

  // The call of `partition` in `top`; its outputs become values of env_
  // (one getitem each when there are several).
  void call_partition(const Partition& partition, Graph* top,
                      Attributes* top_attributes) {
    std::shared_ptr<GraphModuleImpl> submodule =
        make_module(build_partition_graph(partition), Attributes{});
    top_attributes->modules.emplace(
        partition.name(),
        LeafModule{submodule,
                   [submodule](const std::vector<c10::IValue>& inputs) {
                     return submodule->forward(inputs);
                   }});
    std::vector<Argument> args;
    for (Node* input : partition.inputs) args.push_back(env_.at(input));
    Node* call = top->call_module(partition.name(), std::move(args));
    if (partition.outputs.size() == 1) {
      env_[partition.outputs[0]] = call;
      copy_tensor_meta(partition.outputs[0], call);
      return;
    }
    std::vector<TensorMeta> metas;
    for (size_t i = 0; i < partition.outputs.size(); ++i) {
      Node* value = partition.outputs[i];
      if (const TensorMeta* tm = value->meta().get(kTensorMeta)) {
        metas.push_back(*tm);
      }
      Node* item =
          top->create_node(Opcode::kCallFunction, getitem(),
                           {call, static_cast<int64_t>(i)}, {}, value->name());
      copy_tensor_meta(value, item);
      env_[value] = item;
    }
    if (!metas.empty() && metas.size() == partition.outputs.size()) {
      call->meta().set(kTensorMetaList, std::move(metas));
    }
  }

  // The graph calling the submodules in `order`.
  GraphModule build(const std::vector<size_t>& order) {
    auto top = std::make_unique<Graph>();
    for (Node* placeholder : graph_.placeholders()) {
      Node* copy = top->placeholder(placeholder->target().str());
      copy->meta() = placeholder->meta();
      env_[placeholder] = copy;
    }
    Attributes top_attributes;
    for (size_t index : order) {
      call_partition(partitions_[index], top.get(), &top_attributes);
    }
    auto lookup = [&](Node* n) -> Argument { return env_.at(n); };
    Node* output = graph_.output_node();
    for (Node* input : output->all_input_nodes()) {
      if (input->op() == Opcode::kGetAttr && !env_.contains(input)) {
        env_[input] = top->node_copy(*input, lookup);
      }
    }
    top->output(output->args().empty() ? Argument()
                                        : map_arg(output->args()[0], lookup));
    return GraphModule(make_module(std::move(top), std::move(top_attributes)));
  }

  const GraphModuleImpl& module_;
  const Graph& graph_;
  const std::function<int64_t(const Node&)>& partition_of_;
  std::vector<Partition> partitions_;
  absl::flat_hash_map<const Node*, size_t> partition_of_node_;
  absl::flat_hash_map<const Node*, int64_t> position_;
  std::set<std::string> parameter_paths_;
  // Each value of the original graph in the graph calling the submodules.
  absl::flat_hash_map<const Node*, Argument> env_;
};

}  // namespace

GraphModule split_module(
    const GraphModuleImpl& module,
    const std::function<int64_t(const Node&)>& partition_of) {
  // A cond or while_loop goes whole into its partition, its bodies with
  // it. One that writes in place inside a body is refused: the order of
  // that write and the reads of the same tensor in other partitions is not
  // tracked.
  for (Node* n : module.graph().nodes()) {
    if (is_control_flow_call(*n) && n->is_impure()) {
      throw GraphError(absl::StrCat(
          "split_module: %", n->name(), " (", n->target().to_string(),
          ") writes in place inside its "
          "bodies, which splitting cannot keep in order with the reads in "
          "other partitions; return the new value from the body instead"));
    }
  }
  return Splitter(module, partition_of).split();
}

}  // namespace fx
