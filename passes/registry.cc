#include "passes/registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fx/ir/errors.h"
#include "passes/decompose.h"
#include "passes/eliminate_common_subexpressions.h"
#include "passes/eliminate_dead_code.h"
#include "passes/eliminate_noops.h"
#include "passes/fold_constants.h"
#include "passes/fuse_conv_bn.h"
#include "passes/fuse_linear_bias.h"
#include "passes/internal/named_table.h"
#include "passes/normalize_args.h"
#include "passes/remove_dropout.h"
#include "passes/specialize_sizes.h"

namespace fx {

namespace {

internal::NamedTable<PassInfo>& pass_table() {
  static auto* t = new internal::NamedTable<PassInfo>("pass", {
#define FX_PASS(name, type, description) \
  {name, description,                      \
   [](const PassOptions&) { return std::unique_ptr<Pass>(new type()); }},
#define FX_PASS_WITH_OPTIONS(name, type, description)                 \
  {name, description,                                                 \
   [](const PassOptions& options) {                                   \
     return std::unique_ptr<Pass>(new type(options));                 \
   },                                                                 \
   type::option_docs()},
#include "passes/passes.def"
#undef FX_PASS_WITH_OPTIONS
#undef FX_PASS
  });
  return *t;
}

}  // namespace

std::vector<PassInfo> registered_passes() { return pass_table().entries(); }

void register_pass(PassInfo info) { pass_table().add(std::move(info)); }

std::unique_ptr<Pass> make_pass(const std::string& name,
                                const PassOptions& options) {
  std::vector<std::string> known;
  for (const PassInfo& info : registered_passes()) {
    if (info.name != name) {
      known.push_back(info.name);
      continue;
    }
    std::vector<std::string> names;
    for (const auto& known_option : info.options) {
      names.push_back(known_option.first);
    }
    for (const auto& [option, value] : options) {
      if (std::find(names.begin(), names.end(), option) != names.end()) {
        continue;
      }
      throw GraphError(absl::StrCat(
          "pass ", name, " takes no option '", option, "'",
          names.empty() ? std::string("; it takes none")
                        : absl::StrCat("; its options are: ",
                                       absl::StrJoin(names, ", "))));
    }
    return info.make(options);
  }
  throw GraphError(absl::StrCat("no pass named '", name, "'; the passes are: ",
                                absl::StrJoin(known, ", ")));
}

}  // namespace fx
