#include "passes/registry.h"

#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fx/ir/errors.h"
#include "passes/decompose.h"
#include "passes/eliminate_common_subexpressions.h"
#include "passes/eliminate_dead_code.h"
#include "passes/eliminate_noops.h"
#include "passes/fold_constants.h"
#include "passes/fuse_conv_bn.h"
#include "passes/normalize_args.h"
#include "passes/remove_dropout.h"
#include "passes/specialize_sizes.h"

namespace fx {

namespace {

struct Table {
  std::mutex mutex;
  std::vector<PassInfo> passes{
#define FX_PASS(name, type, description) \
  {name, description, [] { return std::unique_ptr<Pass>(new type()); }},
#include "passes/passes.def"
#undef FX_PASS
  };
};

Table& pass_table() {
  static auto* t = new Table();
  return *t;
}

}  // namespace

std::vector<PassInfo> registered_passes() {
  Table& t = pass_table();
  std::lock_guard<std::mutex> lock(t.mutex);
  return t.passes;
}

void register_pass(PassInfo info) {
  Table& t = pass_table();
  std::lock_guard<std::mutex> lock(t.mutex);
  for (const PassInfo& known : t.passes) {
    if (known.name == info.name) {
      throw GraphError(absl::StrCat("a pass named '", info.name,
                                    "' is registered already"));
    }
  }
  t.passes.push_back(std::move(info));
}

std::unique_ptr<Pass> make_pass(const std::string& name) {
  std::vector<std::string> known;
  for (const PassInfo& info : registered_passes()) {
    if (info.name == name) return info.make();
    known.push_back(info.name);
  }
  throw GraphError(absl::StrCat("no pass named '", name, "'; the passes are: ",
                                absl::StrJoin(known, ", ")));
}

}  // namespace fx
