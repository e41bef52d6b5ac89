#include "scheduling/pipeline_runtime.h"

#include <algorithm>
#include <array>
#include <exception>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/ScalarType.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "fx/ir/meta.h"
#include "fx/runtime/guards.h"

namespace fx {
namespace {

using std::chrono::milliseconds;

// Serving ranks wait for the next batch this long: for ever, in practice.
constexpr milliseconds kIdle = std::chrono::hours(24 * 365);
constexpr int kHeaderTag = 0;
constexpr int64_t kMaxMicroBatches = int64_t{1} << 24;
constexpr int64_t kAlignment = 64;

int data_tag(int64_t round, int64_t micro_batch) {
  return static_cast<int>(1 + (round & 1) * kMaxMicroBatches + micro_batch);
}

constexpr int64_t kHeaderFields = 3;  // round, micro-batches, symbols
constexpr int64_t kMaxSymbols = 16;

std::string meta_text(const TensorMeta& meta) {
  return absl::StrCat(c10::toString(meta.dtype), "[", meta.sizes_text(), "]");
}

// The metas with their sizes at `sizes` of the dynamic dimensions'
// symbols (contiguous, as messages carry them).
std::vector<TensorMeta> at_sizes(std::vector<TensorMeta> metas,
                                 const SymbolSizes& sizes) {
  for (TensorMeta& meta : metas) {
    for (size_t d = 0; d < meta.symbolic_sizes.size(); ++d) {
      std::optional<int64_t> size = meta.symbolic_sizes[d].at(sizes);
      if (!size || *size < 0) {
        throw PipelineError(absl::StrCat(
            "a stage's tensor ", meta_text(meta), " has no size at ",
            absl::StrJoin(sizes, ", ", absl::PairFormatter("=")),
            ": its dimension ", d, " is no function of the dynamic ones"));
      }
      meta.sizes[d] = *size;
    }
    meta.symbolic_sizes.clear();
    meta.symbolic_strides.clear();
  }
  return metas;
}

std::string metas_text(const std::vector<TensorMeta>& metas) {
  std::vector<std::string> parts;
  for (const TensorMeta& meta : metas) parts.push_back(meta_text(meta));
  return absl::StrJoin(parts, " ");
}

// Where each tensor of a message sits in its one byte buffer.
struct Layout {
  std::vector<TensorMeta> metas;
  std::vector<int64_t> offsets;
  int64_t bytes = 0;

  explicit Layout(std::vector<TensorMeta> m) : metas(std::move(m)) {
    for (const TensorMeta& meta : metas) {
      offsets.push_back(bytes);
      const int64_t size =
          meta.numel() * static_cast<int64_t>(c10::elementSize(meta.dtype));
      bytes += (size + kAlignment - 1) / kAlignment * kAlignment;
    }
  }

  at::Tensor allocate() const {
    return at::empty({std::max<int64_t>(bytes, 1)}, at::kByte);
  }
  // `buffer` grown to hold a message of this layout, as a view of exactly
  // its size (what is sent and received).
  at::Tensor message(at::Tensor& buffer) const {
    const int64_t size = std::max<int64_t>(bytes, 1);
    if (!buffer.defined() || buffer.numel() < size) buffer = allocate();
    return buffer.narrow(0, 0, size);
  }

  // The tensors of `buffer`, as views.
  std::vector<at::Tensor> views(const at::Tensor& buffer) const {
    std::vector<at::Tensor> tensors;
    for (size_t i = 0; i < metas.size(); ++i) {
      const TensorMeta& meta = metas[i];
      const int64_t size =
          meta.numel() * static_cast<int64_t>(c10::elementSize(meta.dtype));
      tensors.push_back(buffer.narrow(0, offsets[i], size)
                            .view(meta.dtype)
                            .view(meta.sizes));
    }
    return tensors;
  }

  void pack(const std::vector<at::Tensor>& tensors, const at::Tensor& buffer,
            const std::string& what) const {
    if (tensors.size() != metas.size()) {
      throw PipelineError(absl::StrCat(what, " gave ", tensors.size(),
                                       " tensors where its graph says ",
                                       metas.size()));
    }
    std::vector<at::Tensor> targets = views(buffer);
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].sizes() != c10::IntArrayRef(metas[i].sizes) ||
          tensors[i].scalar_type() != metas[i].dtype) {
        throw PipelineError(absl::StrCat(
            what, " gave a ", c10::toString(tensors[i].scalar_type()), "[",
            absl::StrJoin(tensors[i].sizes(), ", "), "] as its output ", i,
            " where its graph says ", meta_text(metas[i])));
      }
      targets[i].copy_(tensors[i]);
    }
  }
};

std::vector<TensorMeta> input_metas(const GraphModuleImpl& stage) {
  std::vector<TensorMeta> metas;
  for (Node* p : stage.graph().placeholders()) {
    const TensorMeta* meta = p->meta().get(kTensorMeta);
    if (meta == nullptr) {
      throw PipelineError(absl::StrCat(
          "the stage's input %", p->name(),
          " has no tensor metadata (shape and dtype); make stages with "
          "split_pipeline or `fx pipeline split`"));
    }
    metas.push_back(*meta);
  }
  return metas;
}

struct Outputs {
  std::vector<TensorMeta> metas;
  bool tuple = false;
};

Outputs output_metas(const GraphModuleImpl& stage) {
  Outputs outputs;
  const Node* output = stage.graph().output_node();
  if (output == nullptr || output->args().empty()) {
    throw PipelineError("the stage returns nothing");
  }
  const Argument& result = output->args()[0];
  std::vector<Node*> nodes;
  if (result.is_node()) {
    nodes.push_back(result.to_node());
  } else if (result.is_tuple() || result.is_list()) {
    outputs.tuple = true;
    for (const Argument& element : result.elements()) {
      if (!element.is_node()) {
        throw PipelineError("the stage returns a constant; a stage returns "
                            "tensors only");
      }
      nodes.push_back(element.to_node());
    }
  } else {
    throw PipelineError("the stage returns a constant; a stage returns "
                        "tensors only");
  }
  for (Node* n : nodes) {
    const TensorMeta* meta = n->meta().get(kTensorMeta);
    if (meta == nullptr || n->meta().get(kTensorMetaList) != nullptr) {
      throw PipelineError(absl::StrCat(
          "the stage returns %", n->name(),
          ", which is not a tensor of known shape and dtype; a stage "
          "returns tensors only"));
    }
    outputs.metas.push_back(*meta);
  }
  return outputs;
}


// What a rank tells the others about itself in the store.
struct Description {
  int64_t world = 0;
  std::string inputs;
  std::string outputs;
  bool tuple = false;
  std::vector<TensorMeta> output_metas;
  // Stage 0's: the dynamic dimensions' symbols whose sizes each batch's
  // header carries, in this order.
  std::vector<std::string> symbols;

  std::string encode() const {
    std::vector<std::string> metas;
    for (const TensorMeta& meta : output_metas) {
      std::vector<std::string> symbolic;
      for (const SizeExpr& e : meta.symbolic_sizes) symbolic.push_back(e.to_string());
      metas.push_back(absl::StrCat(static_cast<int>(meta.dtype), ":",
                                   absl::StrJoin(meta.sizes, ","), ":",
                                   absl::StrJoin(symbolic, ",")));
    }
    return absl::StrCat(world, "\n", inputs, "\n", outputs, "\n",
                        tuple ? 1 : 0, "\n", absl::StrJoin(metas, ";"), "\n",
                        absl::StrJoin(symbols, ","));
  }

  static Description decode(const std::string& text) {
    std::vector<std::string> lines = absl::StrSplit(text, '\n');
    Description d;
    if (lines.size() != 6 || !absl::SimpleAtoi(lines[0], &d.world)) {
      throw PipelineError(
          "a rank published a description this build cannot read: is "
          "every rank the same fx build?");
    }
    d.inputs = lines[1];
    d.outputs = lines[2];
    d.tuple = lines[3] == "1";
    for (absl::string_view part :
         absl::StrSplit(lines[4], ';', absl::SkipEmpty())) {
      std::vector<std::string> fields = absl::StrSplit(part, ':');
      TensorMeta meta;
      int dtype = 0;
      if (fields.size() != 3 || !absl::SimpleAtoi(fields[0], &dtype)) {
        throw PipelineError("a rank published an unreadable description");
      }
      meta.dtype = static_cast<c10::ScalarType>(dtype);
      for (absl::string_view size :
           absl::StrSplit(fields[1], ',', absl::SkipEmpty())) {
        int64_t value = 0;
        if (!absl::SimpleAtoi(size, &value)) {
          throw PipelineError("a rank published an unreadable description");
        }
        meta.sizes.push_back(value);
      }
      for (absl::string_view text :
           absl::StrSplit(fields[2], ',', absl::SkipEmpty())) {
        std::optional<SizeExpr> e = SizeExpr::parse(std::string(text));
        if (!e) throw PipelineError("a rank published an unreadable description");
        meta.symbolic_sizes.push_back(*e);
      }
      if (!meta.symbolic_sizes.empty() && meta.symbolic_sizes.size() != meta.sizes.size()) {
        throw PipelineError("a rank published an unreadable description");
      }
      d.output_metas.push_back(std::move(meta));
    }
    d.symbols = absl::StrSplit(lines[5], ',', absl::SkipEmpty());
    return d;
  }
};

std::pair<std::string, int> parse_master(const std::string& master) {
  const size_t colon = master.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(master.substr(colon + 1), &port) || port <= 0 ||
      port > 65535) {
    throw PipelineError(absl::StrCat("the master address '", master,
                                     "' is not HOST:PORT (say "
                                     "127.0.0.1:29500)"));
  }
  return {master.substr(0, colon), port};
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || absl::StartsWith(host, "127.");
}

std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

// The rendezvous and the process group of one rank.
class Group {
 public:
  Group(const PipelineGroup& group, const Description& mine)
      : rank_(group.rank), world_(group.world), timeout_(group.timeout) {
    if (world_ < 1 || rank_ < 0 || rank_ >= world_) {
      throw PipelineError(absl::StrCat(
          "rank ", rank_, " of a world of ", world_,
          ": ranks go from 0 to world - 1, and the world has one rank per "
          "stage"));
    }
    if (world_ == 1) return;
    auto [host, port] = parse_master(group.master);
    c10d::TCPStoreOptions options;
    options.port = static_cast<uint16_t>(port);
    options.isServer = rank_ == 0;
    options.waitWorkers = false;
    options.timeout = timeout_;
    c10::intrusive_ptr<c10d::Store> tcp;
    try {
      tcp = c10::make_intrusive<c10d::TCPStore>(host, options);
    } catch (const std::exception& e) {
      throw PipelineError(
          rank_ == 0
              ? absl::StrCat("rank 0 cannot listen on ", group.master, " (",
                             first_line(e.what()),
                             "): the port is in use or the address is not "
                             "this host's; choose another with --master")
              : absl::StrCat("rank ", rank_, " found no pipeline master at ",
                             group.master, " within ", timeout_.count(),
                             " ms (", first_line(e.what()),
                             "): start rank 0 there, or fix --master"));
    }
    store_ = c10::make_intrusive<c10d::PrefixStore>("fx_pipeline", tcp);
    rendezvous(mine);
    auto gloo = c10d::ProcessGroupGloo::Options::create(timeout_);
    gloo->devices.push_back(
        is_loopback(host)
            ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
            : c10d::ProcessGroupGloo::createDefaultDevice());
    gloo->threads = 1;
    try {
      pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(
          store_, static_cast<int>(rank_), static_cast<int>(world_), gloo);
    } catch (const std::exception& e) {
      throw PipelineError(absl::StrCat(
          "rank ", rank_, " could not connect to the other ranks within ",
          timeout_.count(), " ms: ", first_line(e.what())));
    }
  }

  const Description& description(int64_t rank) const {
    return descriptions_.at(rank);
  }

  c10::intrusive_ptr<c10d::Work> send(at::Tensor tensor, int64_t peer,
                                      int tag) {
    std::vector<at::Tensor> tensors{std::move(tensor)};
    return pg_->send(tensors, static_cast<int>(peer), tag);
  }
  c10::intrusive_ptr<c10d::Work> recv(at::Tensor tensor, int64_t peer,
                                      int tag) {
    std::vector<at::Tensor> tensors{std::move(tensor)};
    return pg_->recv(tensors, static_cast<int>(peer), tag);
  }

  // Waits for a message to `peer` or from it, turning a failure into a
  // PipelineError that names the peer.
  void wait(const c10::intrusive_ptr<c10d::Work>& work, int64_t peer,
            const std::string& what, milliseconds timeout) const {
    bool done = false;
    std::string reason;
    try {
      done = work->wait(timeout);
    } catch (const std::exception& e) {
      reason = first_line(e.what());
    }
    if (done && reason.empty()) return;
    const bool timed_out =
        reason.empty() || absl::StrContains(reason, "imed out") ||
        absl::StrContains(reason, "imeout");
    throw PipelineError(
        timed_out
            ? absl::StrCat("rank ", rank_, ": rank ", peer, " did not ", what,
                           " within ", timeout.count(),
                           " ms: it hangs or has died (", reason, ")")
            : absl::StrCat("rank ", rank_, ": the connection with rank ", peer,
                           " failed while waiting to ", what,
                           ": its process has likely exited (see its own "
                           "error): ",
                           reason));
  }

  int64_t rank() const { return rank_; }
  int64_t world() const { return world_; }
  milliseconds timeout() const { return timeout_; }

 private:
  // A store operation; the master going away becomes a PipelineError.
  template <typename F>
  auto store_call(F f) -> decltype(f()) {
    try {
      return f();
    } catch (const PipelineError&) {
      throw;
    } catch (const std::exception& e) {
      throw PipelineError(absl::StrCat(
          "rank ", rank_, ": the rendezvous at rank 0 failed (",
          first_line(e.what()),
          "): rank 0 has likely stopped; see its error"));
    }
  }

  void rendezvous(const Description& mine) {
    const std::string me = std::to_string(rank_);
    if (store_call([&] { return store_->add("joined/" + me, 1); }) > 1) {
      throw PipelineError(absl::StrCat(
          "rank ", rank_, " joined the pipeline at the master twice: start "
          "each rank once, with ranks 0 to world - 1"));
    }
    const std::string text = mine.encode();
    store_call([&] {
      store_->set("stage/" + me, std::vector<uint8_t>(text.begin(), text.end()));
      return 0;
    });
    std::vector<bool> seen(world_, false);
    const std::string problem = read_descriptions(&seen);
    // Every rank says it has read what it needs (or what is wrong); rank 0,
    // whose process holds the store, keeps it up until the ranks it saw
    // have, so that each of them can name the problem too.
    store_call([&] {
      const std::string done = problem.empty() ? "ok" : problem;
      store_->set("checked/" + me, std::vector<uint8_t>(done.begin(), done.end()));
      return 0;
    });
    if (rank_ == 0) {
      const auto deadline = std::chrono::steady_clock::now() +
                            std::min<milliseconds>(timeout_, milliseconds(10000));
      for (int64_t r = 1; r < world_; ++r) {
        if (!seen[r]) continue;
        const std::string key = "checked/" + std::to_string(r);
        while (!store_call([&] { return store_->check({key}); }) &&
               std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(milliseconds(20));
        }
      }
    }
    if (!problem.empty()) throw PipelineError(problem);
  }

  // Polls for the other ranks' descriptions, checking each as it comes (so
  // that a rank started with another world fails at once on both sides),
  // then the neighbours' shapes. Returns what is wrong, or "".
  std::string read_descriptions(std::vector<bool>* seen) {
    descriptions_.assign(world_, Description{});
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (true) {
      std::vector<int64_t> missing;
      for (int64_t r = 0; r < world_; ++r) {
        if ((*seen)[r]) continue;
        const std::string key = "stage/" + std::to_string(r);
        if (!store_call([&] { return store_->check({key}); })) {
          missing.push_back(r);
          continue;
        }
        std::vector<uint8_t> bytes =
            store_call([&] { return store_->get(key); });
        descriptions_[r] =
            Description::decode(std::string(
                reinterpret_cast<const char*>(bytes.data()), bytes.size()));
        (*seen)[r] = true;
        if (descriptions_[r].world != world_) {
          return absl::StrCat(
              "rank ", r, " was started with a world of ",
              descriptions_[r].world, " and rank ", rank_, " with ", world_,
              ": give every rank the same --world (the number of stages)");
        }
      }
      if (missing.empty()) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        return absl::StrCat(
            "rank", missing.size() > 1 ? "s " : " ",
            absl::StrJoin(missing, ", "), " of ", world_,
            " did not join within ", timeout_.count(),
            " ms: start one stage per rank (0 to ", world_ - 1,
            ") with the same --master and --world");
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    const std::string me = std::to_string(rank_);
    if (store_call([&] { return store_->add("joined/" + me, 0); }) != 1) {
      return absl::StrCat("rank ", rank_,
                          " joined the pipeline twice: start each rank once");
    }
    for (int64_t r = 1; r < world_; ++r) {
      if (descriptions_[r].inputs != descriptions_[r - 1].outputs) {
        return absl::StrCat(
            "rank ", r, "'s stage takes ", descriptions_[r].inputs,
            " but rank ", r - 1, "'s stage sends ",
            descriptions_[r - 1].outputs,
            ": the stage files do not belong to one pipeline (split them "
            "together, with the same micro-batch input)");
      }
    }
    return "";
  }

  int64_t rank_;
  int64_t world_;
  milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  std::vector<Description> descriptions_;
};

Description describe(const GraphModuleImpl& stage, int64_t world) {
  Description d;
  d.world = world;
  d.inputs = metas_text(input_metas(stage));
  Outputs outputs = output_metas(stage);
  d.outputs = metas_text(outputs.metas);
  d.tuple = outputs.tuple;
  d.output_metas = outputs.metas;
  d.symbols = dynamic_symbols(stage.graph());
  std::sort(d.symbols.begin(), d.symbols.end());
  if (static_cast<int64_t>(d.symbols.size()) > kMaxSymbols) {
    throw PipelineError(absl::StrCat("the stage has ", d.symbols.size(),
                                     " dynamic dimensions' symbols; a "
                                     "pipeline carries at most ", kMaxSymbols));
  }
  return d;
}

// A batch's header: its round, its number of micro-batches and the sizes
// of the dynamic dimensions' symbols, in the driver's order.
at::Tensor make_header() { return at::zeros({kHeaderFields + kMaxSymbols}, at::kLong); }

SymbolSizes header_sizes(const at::Tensor& header,
                         const std::vector<std::string>& symbols) {
  SymbolSizes sizes;
  const int64_t count = header[2].item<int64_t>();
  for (int64_t i = 0; i < count && i < static_cast<int64_t>(symbols.size()); ++i) {
    sizes[symbols[i]] = header[kHeaderFields + i].item<int64_t>();
  }
  return sizes;
}

std::vector<c10::IValue> as_inputs(const std::vector<at::Tensor>& tensors) {
  return std::vector<c10::IValue>(tensors.begin(), tensors.end());
}

}  // namespace

class PipelineDriver::Impl {
 public:
  Impl(GraphModule stage, const PipelineGroup& group)
      : stage_(std::move(stage)),
        inputs_(input_metas(*stage_)),
        output_metas_(output_metas(*stage_).metas),
        group_(group, describe(*stage_, group.world)) {
    if (group.rank != 0) {
      throw PipelineError(absl::StrCat(
          "the driver is rank 0, not ", group.rank,
          "; other ranks serve (serve_pipeline_stage)"));
    }
    if (inputs_.metas.empty()) {
      throw PipelineError("stage 0 takes no inputs to cut into micro-batches");
    }
    for (size_t i = 0; i < inputs_.metas.size(); ++i) {
      if (inputs_.metas[i].sizes.empty() || inputs_.metas[i].sizes[0] < 1) {
        throw PipelineError(absl::StrCat(
            "stage 0's input ", i, " (", meta_text(inputs_.metas[i]),
            ") has no batch dimension to cut micro-batches along"));
      }
    }
    if (group_.world() > 1) {
      const Description& last = group_.description(group_.world() - 1);
      result_metas_ = last.output_metas;
      tuple_result_ = last.tuple;
      symbols_ = group_.description(0).symbols;
    } else {
      tuple_result_ = output_metas(*stage_).tuple;
    }
  }

  ~Impl() {
    try {
      stop();
    } catch (...) {
      // The destructor does not throw; the other ranks time out.
    }
  }

  int64_t micro_batch_size() const { return inputs_.metas[0].sizes[0]; }

  void stop() {
    if (stopped_) return;
    stopped_ = true;
    if (group_.world() > 1) send_header(0, {});
  }

  std::vector<c10::IValue> run_all(
      const std::vector<std::vector<at::Tensor>>& batches) {
    if (stopped_) throw PipelineError("run() after stop()");
    std::vector<std::vector<at::Tensor>> pieces;
    std::vector<SymbolSizes> sizes;
    std::vector<int64_t> counts;
    for (const std::vector<at::Tensor>& batch : batches) {
      counts.push_back(count_micro_batches(batch));
      for (int64_t m = 0; m < counts.back(); ++m) {
        pieces.push_back(slice(batch, m));
        sizes.push_back(bind(pieces.back()));
      }
    }
    if (static_cast<int64_t>(pieces.size()) >= kMaxMicroBatches) {
      throw PipelineError(absl::StrCat(pieces.size(),
                                       " micro-batches at once; at most ",
                                       kMaxMicroBatches - 1));
    }
    // One round per run of micro-batches with the same sizes (a header
    // gives a round's sizes).
    std::vector<std::vector<at::Tensor>> results;
    for (size_t start = 0; start < pieces.size();) {
      size_t end = start + 1;
      while (end < pieces.size() && sizes[end] == sizes[start]) ++end;
      std::vector<std::vector<at::Tensor>> round = run_pieces(
          {pieces.begin() + start, pieces.begin() + end}, sizes[start]);
      for (auto& result : round) results.push_back(std::move(result));
      start = end;
    }
    std::vector<c10::IValue> outputs;
    size_t next = 0;
    for (int64_t count : counts) {
      std::vector<std::vector<at::Tensor>> mine(
          results.begin() + next, results.begin() + next + count);
      next += count;
      outputs.push_back(concatenate(mine));
    }
    return outputs;
  }

 private:
  // The micro-batches through the pipeline as one round: stage 0 runs
  // them in turn, each sent on as soon as it is done, while the last
  // stage's outputs come back.
  std::vector<std::vector<at::Tensor>> run_pieces(
      const std::vector<std::vector<at::Tensor>>& pieces, const SymbolSizes& sizes) {
    const int64_t micro_batches = static_cast<int64_t>(pieces.size());
    ++round_;
    std::vector<std::vector<at::Tensor>> results(micro_batches);
    if (group_.world() == 1) {
      for (int64_t m = 0; m < micro_batches; ++m) {
        results[m] = output_tensors(stage_->forward(as_inputs(pieces[m])));
      }
      return results;
    }
    const Layout outputs(at_sizes(output_metas_, sizes));
    const Layout results_layout(at_sizes(result_metas_, sizes));
    send_header(micro_batches, sizes);
    const int64_t last = group_.world() - 1;
    std::vector<at::Tensor> result_buffers;
    std::vector<c10::intrusive_ptr<c10d::Work>> receiving;
    for (int64_t m = 0; m < micro_batches; ++m) {
      result_buffers.push_back(results_layout.allocate());
      receiving.push_back(
          group_.recv(result_buffers.back(), last, data_tag(round_, m)));
    }
    std::array<c10::intrusive_ptr<c10d::Work>, 2> sending;
    for (int64_t m = 0; m < micro_batches; ++m) {
      std::vector<at::Tensor> out =
          output_tensors(stage_->forward(as_inputs(pieces[m])));
      auto& slot = sending[m % 2];
      if (slot) group_.wait(slot, 1, "receive a micro-batch", group_.timeout());
      at::Tensor message = outputs.message(send_buffers_[m % 2]);
      outputs.pack(out, message, "stage 0");
      slot = group_.send(message, 1, data_tag(round_, m));
    }
    for (auto& slot : sending) {
      if (slot) group_.wait(slot, 1, "receive a micro-batch", group_.timeout());
    }
    for (int64_t m = 0; m < micro_batches; ++m) {
      group_.wait(receiving[m], last,
                  absl::StrCat("send the outputs of micro-batch ", m),
                  group_.timeout());
      results[m] = results_layout.views(result_buffers[m]);
    }
    return results;
  }

  // The sizes of the dynamic dimensions' symbols in a micro-batch, checked
  // against stage 0's guards (GuardError naming the relation broken).
  SymbolSizes bind(const std::vector<at::Tensor>& piece) const {
    SymbolBindings bindings;
    const std::vector<Node*> placeholders = stage_->graph().placeholders();
    for (size_t i = 0; i < piece.size() && i < placeholders.size(); ++i) {
      if (const InputGuard* guard = placeholders[i]->meta().get(kGuard)) {
        check_input(*guard, piece[i], placeholders[i]->name(), i, &bindings);
      }
    }
    SymbolSizes sizes;
    for (const auto& [symbol, value] : bindings.values) sizes[symbol] = value.first;
    return sizes;
  }

  void send_header(int64_t micro_batches, const SymbolSizes& sizes) {
    at::Tensor header = make_header();
    header[0] = round_;
    header[1] = micro_batches;
    header[2] = static_cast<int64_t>(symbols_.size());
    for (size_t i = 0; i < symbols_.size(); ++i) {
      auto it = sizes.find(symbols_[i]);
      header[kHeaderFields + static_cast<int64_t>(i)] = it == sizes.end() ? 0 : it->second;
    }
    auto work = group_.send(header, 1, kHeaderTag);
    group_.wait(work, 1, "receive the next batch's header", group_.timeout());
  }

  int64_t count_micro_batches(const std::vector<at::Tensor>& inputs) const {
    if (inputs.size() != inputs_.metas.size()) {
      throw PipelineError(absl::StrCat("run() got ", inputs.size(),
                                       " inputs; stage 0 takes ",
                                       inputs_.metas.size()));
    }
    int64_t count = -1;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const TensorMeta& meta = inputs_.metas[i];
      const int64_t micro = meta.sizes[0];
      const at::Tensor& t = inputs[i];
      std::vector<int64_t> rest(meta.sizes.begin() + 1, meta.sizes.end());
      std::vector<int64_t> given =
          t.dim() > 0 ? t.sizes().slice(1).vec() : std::vector<int64_t>{};
      // Dynamic dimensions past the batch take any size their guard allows.
      for (size_t d = 1; d < meta.symbolic_sizes.size() && d - 1 < given.size(); ++d) {
        if (!meta.symbolic_sizes[d].is_constant()) given[d - 1] = rest[d - 1];
      }
      if (t.dim() != static_cast<int64_t>(meta.sizes.size()) ||
          t.size(0) % micro != 0 || t.size(0) == 0 || given != rest ||
          t.scalar_type() != meta.dtype) {
        throw PipelineError(absl::StrCat(
            "input ", i, " is ", c10::toString(t.scalar_type()), "[",
            absl::StrJoin(t.sizes(), ", "), "]; stage 0 takes micro-batches ",
            meta_text(meta), ", so give ", c10::toString(meta.dtype), "[",
            micro, "*k", rest.empty() ? "" : ", ", absl::StrJoin(rest, ", "),
            "]"));
      }
      const int64_t here = t.size(0) / micro;
      if (count >= 0 && here != count) {
        throw PipelineError(absl::StrCat(
            "the inputs make different numbers of micro-batches (", count,
            " and ", here, "); cut every input into as many"));
      }
      count = here;
    }
    if (count >= kMaxMicroBatches) {
      throw PipelineError(absl::StrCat("a batch of ", count,
                                       " micro-batches; at most ",
                                       kMaxMicroBatches - 1));
    }
    return count;
  }

  std::vector<at::Tensor> slice(const std::vector<at::Tensor>& inputs,
                                int64_t m) const {
    std::vector<at::Tensor> pieces;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const int64_t micro = inputs_.metas[i].sizes[0];
      pieces.push_back(inputs[i].narrow(0, m * micro, micro));
    }
    return pieces;
  }

  c10::IValue concatenate(
      const std::vector<std::vector<at::Tensor>>& results) const {
    const size_t count = results.empty() ? 0 : results[0].size();
    std::vector<c10::IValue> joined;
    for (size_t i = 0; i < count; ++i) {
      std::vector<at::Tensor> parts;
      for (const auto& result : results) parts.push_back(result[i]);
      joined.push_back(at::cat(parts, 0));
    }
    if (!tuple_result_ && joined.size() == 1) return joined[0];
    return c10::ivalue::Tuple::create(std::move(joined));
  }

  GraphModule stage_;
  Layout inputs_;
  std::vector<TensorMeta> output_metas_;
  Group group_;
  std::vector<TensorMeta> result_metas_;
  std::vector<std::string> symbols_;
  bool tuple_result_ = false;
  std::array<at::Tensor, 2> send_buffers_;
  int64_t round_ = 0;
  bool stopped_ = false;
};

PipelineDriver::PipelineDriver(GraphModule stage, const PipelineGroup& group)
    : impl_(std::make_unique<Impl>(std::move(stage), group)) {}
PipelineDriver::~PipelineDriver() = default;
c10::IValue PipelineDriver::run(const std::vector<at::Tensor>& inputs) {
  return impl_->run_all({inputs})[0];
}
std::vector<c10::IValue> PipelineDriver::run_all(
    const std::vector<std::vector<at::Tensor>>& batches) {
  return impl_->run_all(batches);
}
int64_t PipelineDriver::micro_batch_size() const {
  return impl_->micro_batch_size();
}
void PipelineDriver::stop() { impl_->stop(); }

void serve_pipeline_stage(GraphModule stage, const PipelineGroup& group) {
  if (group.rank == 0) {
    throw PipelineError(
        "rank 0 is the driver (PipelineDriver); serve ranks 1 to world - 1");
  }
  const std::vector<TensorMeta> input_meta = input_metas(*stage);
  const std::vector<TensorMeta> output_meta = output_metas(*stage).metas;
  Group g(group, describe(*stage, group.world));
  const int64_t rank = g.rank();
  const bool last = rank == g.world() - 1;
  const int64_t next = last ? 0 : rank + 1;
  const std::string what = absl::StrCat("stage ", rank);
  const std::vector<std::string> symbols = g.description(0).symbols;
  // Buffers grown to the largest message seen.
  std::array<at::Tensor, 2> received;
  std::array<at::Tensor, 2> sent;
  at::Tensor header = make_header();
  while (true) {
    g.wait(g.recv(header, rank - 1, kHeaderTag), rank - 1,
           "send the next batch", kIdle);
    const int64_t round = header[0].item<int64_t>();
    const int64_t micro_batches = header[1].item<int64_t>();
    if (!last) {
      g.wait(g.send(header.clone(), rank + 1, kHeaderTag), rank + 1,
             "receive the next batch's header", g.timeout());
    }
    if (micro_batches == 0) return;
    const SymbolSizes sizes = header_sizes(header, symbols);
    const Layout inputs(at_sizes(input_meta, sizes));
    const Layout outputs(at_sizes(output_meta, sizes));
    std::array<at::Tensor, 2> in;
    std::array<c10::intrusive_ptr<c10d::Work>, 2> receiving;
    std::array<c10::intrusive_ptr<c10d::Work>, 2> sending;
    for (int64_t m = 0; m < std::min<int64_t>(micro_batches, 2); ++m) {
      in[m] = inputs.message(received[m]);
      receiving[m] = g.recv(in[m], rank - 1, data_tag(round, m));
    }
    for (int64_t m = 0; m < micro_batches; ++m) {
      const size_t slot = static_cast<size_t>(m % 2);
      g.wait(receiving[slot], rank - 1,
             absl::StrCat("send micro-batch ", m), g.timeout());
      std::vector<at::Tensor> out = output_tensors(
          stage->forward(as_inputs(inputs.views(in[slot]))));
      if (sending[slot]) {
        g.wait(sending[slot], next, "receive a micro-batch", g.timeout());
      }
      at::Tensor message = outputs.message(sent[slot]);
      outputs.pack(out, message, what);
      sending[slot] = g.send(message, next, data_tag(round, m));
      if (m + 2 < micro_batches) {
        receiving[slot] = g.recv(in[slot], rank - 1, data_tag(round, m + 2));
      }
    }
    for (auto& slot : sending) {
      if (slot) g.wait(slot, next, "receive a micro-batch", g.timeout());
    }
  }
}

std::vector<at::Tensor> output_tensors(const c10::IValue& value) {
  std::vector<at::Tensor> tensors;
  if (value.isTensor()) {
    tensors.push_back(value.toTensor());
  } else if (value.isTuple()) {
    for (const c10::IValue& element : value.toTupleRef().elements()) {
      tensors.push_back(element.toTensor());
    }
  } else if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorVector()) tensors.push_back(t);
  } else {
    throw PipelineError(absl::StrCat("a stage returned a ", value.tagKind(),
                                     "; a stage returns tensors only"));
  }
  return tensors;
}

}  // namespace fx
