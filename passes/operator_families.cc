#include "passes/operator_families.h"

#include <algorithm>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "fx/ir/errors.h"

namespace fx {
namespace {

struct FamilyTable {
  std::mutex mutex;  // registration only; lookups follow static init
  absl::flat_hash_map<std::string, OperatorFamilyInfo> by_name;
};

FamilyTable& family_table() {
  static FamilyTable* t = [] {
    auto* made = new FamilyTable;
#define FX_OPERATOR_FAMILY(name, family, traits)                       \
  made->by_name.emplace(name, OperatorFamilyInfo{OperatorFamily::family, \
                                                 static_cast<uint32_t>(traits)});
#include "passes/operator_families.def"
#undef FX_OPERATOR_FAMILY
    return made;
  }();
  return *t;
}

}  // namespace

const OperatorFamilyInfo* operator_family(const Node& n) {
  if (n.op() != Opcode::kCallFunction || !n.target().is_operator()) {
    return nullptr;
  }
  const c10::OperatorName& op = n.target().op().operator_name();
  const FamilyTable& t = family_table();
  auto it = t.by_name.find(op.overload_name.empty()
                               ? op.name
                               : absl::StrCat(op.name, ".", op.overload_name));
  return it == t.by_name.end() ? nullptr : &it->second;
}

bool in_family(const Node& n, OperatorFamily family) {
  const OperatorFamilyInfo* info = operator_family(n);
  return info != nullptr && info->family == family;
}

bool has_trait(const Node& n, OperatorTrait trait) {
  const OperatorFamilyInfo* info = operator_family(n);
  return info != nullptr && (info->traits & trait) != 0;
}

std::vector<std::pair<std::string, OperatorFamilyInfo>> operator_families() {
  FamilyTable& t = family_table();
  std::lock_guard<std::mutex> lock(t.mutex);
  std::vector<std::pair<std::string, OperatorFamilyInfo>> out(
      t.by_name.begin(), t.by_name.end());
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

void register_operator_family(const std::string& qualified_name,
                              OperatorFamily family, uint32_t traits) {
  FamilyTable& t = family_table();
  std::lock_guard<std::mutex> lock(t.mutex);
  if (!t.by_name.emplace(qualified_name, OperatorFamilyInfo{family, traits})
           .second) {
    throw GraphError(absl::StrCat("operator ", qualified_name,
                                  " has a family already"));
  }
}

}  // namespace fx
