// fx pipeline split|serve|run: a model cut into pipeline stages (files for
// other hosts), one stage served on this host, or every stage run as local
// processes and timed against one process.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <stdexcept>

#include <unistd.h>

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "fx/fx.h"
#include "fx/io/input_spec.h"
#include "scheduling/child_processes.h"
#include "scheduling/pipeline.h"
#include "scheduling/pipeline_runtime.h"
#include "tools/cli/commands.h"
#include "tools/cli/support.h"

namespace cli {
namespace {

constexpr char kModel[] =
    "MODEL is a bundled model (`fx zoo` lists them; traced in eval mode at "
    "its example inputs, one micro-batch) or a file (a TorchScript file "
    "with --input).";

// How split and run cut the model.
struct SplitFlags {
  int64_t stages = 2;
  std::vector<std::string> split_points;
  std::string balance = "cost";
  std::string passes;
  MachineFlags machine;
  int64_t micro_batches = 8;
  std::vector<std::string> input;
  ShapeFlags shapes;

  void add_to(Flags& flags, const char* micro_batches_help) {
    flags.add("stages", &stages,
              "the number of stages, balanced by the cost model");
    flags.add("split_points", &split_points,
              "cut here instead, comma-separated: node names (cut after) or "
              "module paths such as layer3 (cut before)");
    flags.add("balance", &balance,
              "balance the stages by the cost model's roofline (cost), by "
              "each node's measured time (measure), or by the cost model "
              "and then the stages' own times after --passes, measured "
              "running at once, 1 thread each (tune: fx::tune_pipeline, 3 "
              "rounds)");
    flags.add("passes", &passes,
              "passes to run on each stage (and, to compare, on the whole "
              "model), comma-separated (`fx passes` lists them)");
    machine.add_to(flags);
    flags.add("micro_batches", &micro_batches, micro_batches_help);
    add_input_flag(flags, &input);
    shapes.add_to(flags);
  }

  void check() const {
    if (balance != "cost" && balance != "measure" && balance != "tune") {
      throw UsageError("--balance is cost, measure or tune, not '" + balance +
                       "'");
    }
    if (balance == "tune" && !split_points.empty()) {
      throw UsageError(
          "--balance=tune moves the cuts; give --stages, not --split_points");
    }
    check_passes(passes);
  }
};

fx::Pipeline split_from_flags(const fx::GraphModule& module,
                              const std::vector<c10::IValue>& inputs,
                              const SplitFlags& flags) {
  fx::PipelineOptions options;
  options.machine = flags.machine.machine();
  options.stages = flags.stages;
  options.split_points = flags.split_points;
  std::map<std::string, double> seconds;
  if (flags.balance == "measure") {
    seconds = fx::profile_node_seconds(module, inputs, 5);
    options.node_seconds = [&seconds](const fx::Node& n) {
      auto it = seconds.find(n.name());
      return it == seconds.end() ? 0.0 : it->second;
    };
  }
  auto with_passes = [&flags](fx::Pipeline& pipeline) {
    for (fx::PipelineStage& stage : pipeline.stages) {
      stage.module = run_passes(stage.module, flags.passes).module;
    }
  };
  if (flags.balance == "tune") {
    const fx::TunedPipeline tuned = fx::tune_pipeline(
        module, options, [&](fx::Pipeline& cut) {
          with_passes(cut);
          return fx::time_stages_at_once(cut, inputs);
        });
    std::cout << "tuned by measurement (the stages at once, 1 thread each):";
    for (size_t c = 0; c < tuned.measured.size(); ++c) {
      std::cout << (c == 0 ? " " : ", ") << "cut " << c + 1;
      for (size_t s = 0; s < tuned.measured[c].size(); ++s) {
        std::cout << (s == 0 ? " " : " / ")
                  << fx::format_seconds(tuned.measured[c][s]);
      }
    }
    std::cout << "; cut " << tuned.kept + 1 << " kept\n";
    return tuned.pipeline;
  }
  fx::Pipeline pipeline = fx::split_pipeline(module, options);
  with_passes(pipeline);
  return pipeline;
}

void print_plan(const fx::Pipeline& pipeline, int64_t micro_batches) {
  std::cout << fx::format_pipeline(pipeline);
  fx::PipelinePrediction prediction =
      fx::predict_pipeline(pipeline, micro_batches, fx::Link{});
  std::cout << "predicted for " << micro_batches
            << " micro-batches (cost model, 1 GB/s link): "
            << fx::format_seconds(prediction.batch_seconds) << " per batch ("
            << fx::format_seconds(prediction.stream_batch_seconds)
            << " each in a stream of batches), "
            << absl::StrFormat("%.2fx", prediction.speedup())
            << " the throughput of one process running the stages in turn\n";
}

// --- fx pipeline split --------------------------------------------------------

class PipelineSplit : public Command {
 public:
  PipelineSplit()
      : Command("pipeline split", {"MODEL"},
                "cut a model into pipeline stages, written as "
                "DIR/stage_0.fx, stage_1.fx, ... for `fx pipeline serve`",
                kModel) {
    split_.add_to(flags(),
                  "the micro-batches per batch the printed prediction is for");
    flags().add("output", &output_,
                "the directory to write stage_0.fx ... into (required)");
  }

 private:
  int run(const std::vector<std::string>& args) override {
    if (output_.empty()) {
      throw UsageError("give --output=DIR for the stage files");
    }
    split_.check();
    std::vector<c10::IValue> inputs;
    fx::GraphModule module =
        open_model_in_eval_mode(args[0], split_.input, &inputs, split_.shapes);
    fx::Pipeline pipeline = split_from_flags(module, inputs, split_);
    std::filesystem::create_directories(output_);
    print_plan(pipeline, split_.micro_batches);
    for (size_t r = 0; r < pipeline.stages.size(); ++r) {
      const std::string path = absl::StrCat(output_, "/stage_", r, ".fx");
      fx::save(pipeline.stages[r].module, path);
      std::cerr << "wrote " << path << "\n";
    }
    return 0;
  }

  SplitFlags split_;
  std::string output_;
};

// --- fx pipeline serve --------------------------------------------------------

// Normal noise shaped as `spec` (a batch), the same every time.
std::vector<at::Tensor> batch_inputs(const std::vector<std::string>& specs) {
  torch::manual_seed(0);
  std::vector<at::Tensor> batch;
  for (const std::string& spec : specs) {
    at::Tensor shape = fx::example_input(spec);
    batch.push_back(shape.is_floating_point()
                        ? torch::randn(shape.sizes(), shape.options())
                        : shape);
  }
  return batch;
}

class PipelineServe : public Command {
 public:
  PipelineServe()
      : Command("pipeline serve", {"STAGE.fx"},
                "run one pipeline stage on this host; rank 0 drives batches "
                "of --input's shape through the others",
                "STAGE.fx is a stage file `fx pipeline split` wrote; rank R "
                "serves stage_R.fx.") {
    flags().add("rank", &rank_, "this process's rank (required)");
    flags().add("world", &world_, "the number of ranks (stages) (required)");
    flags().add("master", &master_,
                "HOST:PORT where rank 0 meets the others (required)");
    flags().add("timeout_ms", &timeout_ms_,
                "how long to wait for a rank to join and for each message "
                "before failing");
    flags().add("threads", &threads_, "intra-op threads of this process");
    flags().add("input", &input_,
                "rank 0: the batch's shape, a multiple of the stage's "
                "micro-batch (8x3x224x224)");
    flags().add("rounds", &rounds_,
                "rank 0: batches to run (the median time is reported)");
    flags().add("output", &output_,
                "rank 0: write the last batch's output here (torch::save)");
  }

 private:
  int run(const std::vector<std::string>& args) override {
    fx::PipelineGroup group;
    group.master = master_;
    group.rank = rank_;
    group.world = world_;
    group.timeout = std::chrono::milliseconds(timeout_ms_);
    if (group.rank < 0 || group.world < 1 || group.master.empty()) {
      throw UsageError("give --rank, --world and --master=HOST:PORT");
    }
    if (group.rank == 0 && input_.empty()) {
      throw UsageError(
          "rank 0 drives: give --input, the batch's shape (a multiple of "
          "the stage's micro-batch)");
    }
    at::set_num_threads(static_cast<int>(threads_));
    fx::GraphModule stage = fx::load(args[0]);
    if (group.rank > 0) {
      fx::serve_pipeline_stage(stage, group);
      std::cerr << "fx pipeline serve: rank " << group.rank << " done\n";
      return 0;
    }
    std::vector<at::Tensor> batch = batch_inputs(input_);
    fx::PipelineDriver driver(stage, group);
    std::cerr << "rank 0: all " << group.world << " ranks joined\n";
    c10::IValue output;
    std::vector<double> samples;
    for (int64_t r = 0; r < std::max<int64_t>(rounds_, 1); ++r) {
      auto start = std::chrono::steady_clock::now();
      output = driver.run(batch);
      samples.push_back(milliseconds_since(start));
    }
    driver.stop();
    std::sort(samples.begin(), samples.end());
    std::cout << "rank 0: " << samples.size() << " batches, median "
              << absl::StrFormat("%.2f", samples[samples.size() / 2])
              << " ms per batch\n";
    if (!output_.empty()) {
      torch::save(fx::output_tensors(output), output_);
      std::cerr << "wrote " << output_ << "\n";
    }
    return 0;
  }

  int64_t rank_ = -1;
  int64_t world_ = 0;
  std::string master_;
  int64_t timeout_ms_ = 30000;
  int64_t threads_ = 1;
  std::vector<std::string> input_;
  int64_t rounds_ = 5;
  std::string output_;
};

// --- fx pipeline run ----------------------------------------------------------

class PipelineRun : public Command {
 public:
  PipelineRun()
      : Command("pipeline run", {"MODEL"},
                "run a model's pipeline stages as local processes, timed "
                "against one process and compared with it bitwise",
                kModel) {
    split_.add_to(flags(), "micro-batches per batch");
    flags().add("rounds", &rounds_, "batches to time (medians reported)");
    flags().add("threads", &threads_,
                "intra-op threads of each stage's process");
    flags().add("timeout_ms", &timeout_ms_,
                "how long to wait for a rank to join and for each message "
                "before failing");
  }

 private:
  int run(const std::vector<std::string>& args) override;

  SplitFlags split_;
  int64_t rounds_ = 5;
  int64_t threads_ = 1;
  int64_t timeout_ms_ = 30000;
};

int PipelineRun::run(const std::vector<std::string>& args) {
  split_.check();
  const int64_t threads = threads_;
  const int64_t micro_batches = split_.micro_batches;
  std::vector<c10::IValue> inputs;
  fx::GraphModule module =
      open_model_in_eval_mode(args[0], split_.input, &inputs, split_.shapes);
  at::set_num_threads(static_cast<int>(threads));
  fx::Pipeline pipeline = split_from_flags(module, inputs, split_);
  const int64_t world = static_cast<int64_t>(pipeline.stages.size());
  print_plan(pipeline, micro_batches);
  // The stages as files, as another host would get them.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      absl::StrCat("fx_pipeline_", ::getpid());
  std::filesystem::create_directories(dir);
  struct RemoveDir {
    std::filesystem::path dir;
    ~RemoveDir() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } remove_dir{dir};
  for (int64_t r = 0; r < world; ++r) {
    fx::save(pipeline.stages[r].module,
             (dir / absl::StrCat("stage_", r, ".fx")).string());
  }
  fx::PipelineGroup group;
  group.master = absl::StrCat("127.0.0.1:", fx::free_local_port());
  group.world = world;
  group.timeout = std::chrono::milliseconds(timeout_ms_);
  fx::ChildProcesses children;
  for (int64_t r = 1; r < world; ++r) {
    children.spawn({"/proc/self/exe", "pipeline", "serve",
                    absl::StrCat("--rank=", r), absl::StrCat("--world=", world),
                    "--master=" + group.master,
                    absl::StrCat("--threads=", threads),
                    absl::StrCat("--timeout_ms=", group.timeout.count()),
                    (dir / absl::StrCat("stage_", r, ".fx")).string()});
  }
  std::cout << "started ranks 1 to " << world - 1 << " (" << world - 1
            << " processes, " << threads << " thread(s) each) on "
            << group.master << "\n";
  fx::PipelineDriver driver(
      fx::load((dir / "stage_0.fx").string()), group);

  // A batch of micro-batches of normal noise.
  torch::manual_seed(0);
  std::vector<at::Tensor> batch;
  for (const c10::IValue& input : inputs) {
    if (!input.isTensor()) {
      throw std::runtime_error("the model takes a non-tensor input");
    }
    at::Tensor x = input.toTensor();
    std::vector<int64_t> sizes = x.sizes().vec();
    sizes[0] *= micro_batches;
    batch.push_back(x.is_floating_point() ? torch::randn(sizes, x.options())
                                          : x.repeat_interleave(micro_batches, 0));
  }
  fx::GraphModule whole = run_passes(module, split_.passes).module;
  auto run_in_one_process = [&](bool whole_model) {
    std::vector<std::vector<at::Tensor>> parts;
    for (int64_t m = 0; m < micro_batches; ++m) {
      std::vector<c10::IValue> piece;
      for (size_t i = 0; i < batch.size(); ++i) {
        const int64_t micro = inputs[i].toTensor().size(0);
        piece.push_back(batch[i].narrow(0, m * micro, micro));
      }
      parts.push_back(fx::output_tensors(
          whole_model ? whole->forward(piece)
                      : fx::run_pipeline_locally(pipeline, piece)));
    }
    std::vector<at::Tensor> joined;
    for (size_t k = 0; k < parts[0].size(); ++k) {
      std::vector<at::Tensor> pieces;
      for (const auto& p : parts) pieces.push_back(p[k]);
      joined.push_back(at::cat(pieces, 0));
    }
    return joined;
  };
  std::vector<at::Tensor> distributed = fx::output_tensors(driver.run(batch));
  std::vector<at::Tensor> stages_here = run_in_one_process(false);
  std::vector<at::Tensor> model_here = run_in_one_process(true);
  bool bitwise = distributed.size() == stages_here.size();
  double max_diff = 0;
  for (size_t k = 0; bitwise && k < distributed.size(); ++k) {
    bitwise = torch::equal(distributed[k], stages_here[k]);
    max_diff = std::max(
        max_diff,
        (distributed[k] - model_here[k]).abs().max().item<double>());
  }
  std::cout << "outputs: " << (bitwise ? "bitwise equal" : "DIFFERENT")
            << " to the stages run in one process; max |diff| to the whole "
               "model in one process: "
            << max_diff << "\n";

  const int rounds = static_cast<int>(rounds_);
  auto pipelined = [&] { driver.run(batch); };
  auto one_process = [&] { run_in_one_process(true); };
  auto one_process_all_threads = [&] {
    at::set_num_threads(static_cast<int>(threads * world));
    run_in_one_process(true);
    at::set_num_threads(static_cast<int>(threads));
  };
  std::vector<double> ms = interleaved_ms(
      {pipelined, one_process, one_process_all_threads}, rounds);
  std::cout << absl::StrFormat(
      "batch of %d micro-batches, medians of %d interleaved rounds:\n"
      "  pipeline, %d processes x %d thread(s)   %9.2f ms\n"
      "  one process, %d thread(s)               %9.2f ms  (%.2fx the "
      "pipeline's time)\n"
      "  one process, %d thread(s)               %9.2f ms  (%.2fx)\n",
      micro_batches, rounds, world, threads, ms[0], threads, ms[1],
      ms[1] / ms[0], threads * world, ms[2], ms[2] / ms[0]);
  driver.stop();
  std::vector<int> statuses = children.wait(group.timeout);
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (statuses[r] != 0) {
      throw std::runtime_error(absl::StrCat("rank ", r + 1,
                                            " exited with status ",
                                            statuses[r]));
    }
  }
  return bitwise ? 0 : 1;
}

}  // namespace

std::unique_ptr<Command> make_pipeline_split() {
  return std::make_unique<PipelineSplit>();
}
std::unique_ptr<Command> make_pipeline_serve() {
  return std::make_unique<PipelineServe>();
}
std::unique_ptr<Command> make_pipeline_run() {
  return std::make_unique<PipelineRun>();
}

}  // namespace cli
