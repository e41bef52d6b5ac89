// fx branches MODEL: the schedule of a model's independent branches on 2
// workers, and whether it beats the sequential module, measured on the
// example inputs.
#include <iostream>

#include "absl/strings/str_format.h"
#include "fx/fx.h"
#include "scheduling/parallel.h"
#include "tools/cli/commands.h"
#include "tools/cli/support.h"

namespace cli {
namespace {

class Branches : public Command {
 public:
  Branches()
      : Command("branches", {"MODEL"},
                "schedule a model's independent branches on 2 workers, and "
                "measure whether that beats the sequential module",
                "MODEL is a bundled model (`fx zoo` lists them; traced in "
                "eval mode) or a file (give --input, the example inputs).") {
    add_passes_flag(flags(), &passes_);
    flags().add("threads", &threads_,
                "intra-op threads of each worker (the sequential module runs "
                "with twice as many)");
    flags().add("rounds", &rounds_,
                "rounds to time each way (medians compared)");
    add_input_flag(flags(), &input_);
  }

 private:
  int run(const std::vector<std::string>& args) override {
    check_passes(passes_);
    std::vector<c10::IValue> inputs;
    fx::GraphModule module = open_model_in_eval_mode(args[0], input_, &inputs);
    module = run_passes(module, passes_).module;
    if (inputs.empty()) {
      throw UsageError("give the example inputs (--input)");
    }
    const int64_t threads = threads_;
    fx::ParallelOptions options;
    options.workers = 2;
    options.threads_per_worker = threads;
    options.decide_by_measuring = true;
    options.example_inputs = inputs;
    options.measure_rounds = static_cast<int>(rounds_);
    fx::ParallelModule parallel = fx::parallelize_branches(module, options);
    std::cout << fx::format_schedule(parallel->schedule());
    std::cout << absl::StrFormat(
        "measured: 2 workers x %d thread(s) %.2f ms, sequential with %d "
        "threads %.2f ms: %s\n",
        threads, parallel->measured_parallel_ms(), 2 * threads,
        parallel->measured_sequential_ms(),
        parallel->used_parallel() ? "the branches at once pay"
                                  : "keeping the sequential module");
    return 0;
  }

  std::string passes_;
  int64_t threads_ = 1;
  int64_t rounds_ = 5;
  std::vector<std::string> input_;
};

}  // namespace

std::unique_ptr<Command> make_branches() {
  return std::make_unique<Branches>();
}

}  // namespace cli
