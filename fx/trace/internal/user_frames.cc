#include "fx/trace/internal/user_frames.h"

#include <initializer_list>
#include <vector>

#include <c10/util/Backtrace.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace fx {
namespace internal {

std::string user_frames() {
  std::vector<std::string> frames =
      absl::StrSplit(c10::get_backtrace(/*frames_to_skip=*/2,
                                        /*maximum_number_of_frames=*/96),
                     '\n', absl::SkipEmpty());
  auto inside = [](const std::string& f, std::initializer_list<const char*> any) {
    for (const char* s : any) {
      if (absl::StrContains(f, s)) return true;
    }
    return false;
  };
  size_t begin = 0;
  for (size_t i = 0; i < frames.size(); ++i) {
    if (inside(frames[i], {"at::_ops::", "c10::Dispatcher", "c10::impl::",
                           "c10::BoxedKernel", "c10::KernelFunction",
                           "fx::Tracer::Session"})) {
      begin = i + 1;
    }
  }
  std::string out;
  for (size_t i = begin; i < frames.size(); ++i) {
    // The end: the tracer's call of forward, or TorchScript's interpreter
    // (a TorchScript program's own traceback is in the message already).
    if (inside(frames[i], {"fx::Tracer::trace", "fx::symbolic_trace",
                           "fx::internal::", "torch::jit::"})) {
      break;
    }
    // fx's boxing of forward, std::function, and frames without a name
    // (the dispatcher's inlined steps).
    if (inside(frames[i], {"std::_Function_handler", "fx::detail::",
                           "fx::box_forward", "_ZZN2fx6detail",
                           "_ZNSt17_Function_handler", "<unknown function>"})) {
      continue;
    }
    // "frame #7: name + 0x12 (0x55.. in /path/binary)": the name and the
    // file's base name.
    std::string frame = frames[i];
    if (size_t colon = frame.find(": "); colon != std::string::npos) {
      frame = frame.substr(colon + 2);
    }
    const size_t plus = frame.rfind(" + 0x");
    const size_t in = frame.rfind(" in ");
    if (plus != std::string::npos && in != std::string::npos && in > plus) {
      std::string file = frame.substr(in + 4);
      if (!file.empty() && file.back() == ')') file.pop_back();
      if (size_t slash = file.rfind('/'); slash != std::string::npos) {
        file = file.substr(slash + 1);
      }
      frame = absl::StrCat(frame.substr(0, plus), " (", file, ")");
    }
    absl::StrAppend(&out, "\n  ", frame);
  }
  if (out.empty()) return "";
  return absl::StrCat(
      "\nC++ frames of the traced program, innermost first (link it with "
      "-rdynamic to name its own functions):",
      out);
}

}  // namespace internal
}  // namespace fx
