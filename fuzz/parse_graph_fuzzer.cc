// libFuzzer entry for fx::fuzz::parse_graph (fuzz/targets.h).
#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fx::fuzz::parse_graph(data, size);
  return 0;
}
