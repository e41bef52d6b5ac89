#include "passes/pass_manager.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "fx/ir/control_flow.h"
#include "fx/ir/errors.h"
#include "fx/runtime/graph_module.h"
#include "passes/registry.h"

namespace fx {

PassManager::PassManager() = default;
PassManager::~PassManager() = default;
PassManager::PassManager(PassManager&&) noexcept = default;
PassManager& PassManager::operator=(PassManager&&) noexcept = default;

PassManager& PassManager::add(std::unique_ptr<Pass> pass) {
  if (pass == nullptr) throw GraphError("PassManager::add: null pass");
  passes_.push_back(std::move(pass));
  return *this;
}

PassManager& PassManager::add(const std::string& name) {
  return add(make_pass(name));
}

PassManager& PassManager::add(const PassStep& step) {
  return add(make_pass(step.pass, step.options));
}

PassManager& PassManager::add(const std::vector<PassStep>& steps) {
  for (const PassStep& step : steps) add(step);
  return *this;
}

PassManager& PassManager::to_fixpoint(int max_rounds) {
  if (max_rounds < 1) {
    throw GraphError("PassManager::to_fixpoint: max_rounds must be >= 1");
  }
  max_rounds_ = max_rounds;
  return *this;
}

PassResult PassManager::run(const GraphModule& module) const {
  PassResult result{GraphModule(module->copy()), false};
  result.modified = run_in_place(*result.module);
  return result;
}

namespace {

// Adds `more` into `sums`, counter by counter, keeping `sums`' order and
// appending counters it lacks.
void add_statistics(std::vector<std::pair<std::string, int64_t>>& sums,
                    const std::vector<std::pair<std::string, int64_t>>& more) {
  for (const auto& count : more) {
    auto it = std::find_if(sums.begin(), sums.end(), [&](const auto& s) {
      return s.first == count.first;
    });
    if (it == sums.end()) {
      sums.push_back(count);
    } else {
      it->second += count.second;
    }
  }
}

}  // namespace

bool PassManager::run_in_place(GraphModuleImpl& module) const {
  statistics_.assign(passes_.size(), {});
  bool modified = false;
  for (int round = 0; round < max_rounds_; ++round) {
    bool changed = false;
    for (size_t i = 0; i < passes_.size(); ++i) {
      Pass& pass = *passes_[i];
      if (pass.bodies() == Pass::Bodies::kRefused) {
        refuse_control_flow(module.graph(), "pass " + pass.name());
      }
      changed = pass.run(module) || changed;
      statistics_[i] = pass.statistics();
      if (pass.bodies() == Pass::Bodies::kEachGraph) {
        // The bodies as the graph's run left them, outermost first.
        module.for_each_body([&] {
          changed = pass.run(module) || changed;
          add_statistics(statistics_[i], pass.statistics());
        });
      }
      try {
        module.graph().lint();
      } catch (const GraphError& e) {
        throw GraphError(absl::StrCat("after pass ", pass.name(), ": ",
                                      e.msg()));
      }
    }
    modified = modified || changed;
    if (!changed) break;
  }
  module.recompile();
  return modified;
}

std::vector<PassManager::Statistic> PassManager::statistics() const {
  std::vector<Statistic> out;
  for (size_t i = 0; i < passes_.size(); ++i) {
    const auto& counts =
        i < statistics_.size() ? statistics_[i] : passes_[i]->statistics();
    for (const auto& [name, value] : counts) {
      out.push_back({passes_[i]->name(), name, value});
    }
  }
  return out;
}

std::vector<std::string> PassManager::names() const {
  std::vector<std::string> out;
  for (const auto& pass : passes_) out.push_back(pass->name());
  return out;
}

}  // namespace fx
