// libFuzzer entry for fx::fuzz::load (fuzz/targets.h).
#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fx::fuzz::load(data, size);
  return 0;
}
