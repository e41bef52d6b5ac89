// libFuzzer entry for fx::fuzz::input_spec (fuzz/targets.h).
#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fx::fuzz::input_spec(data, size);
  return 0;
}
