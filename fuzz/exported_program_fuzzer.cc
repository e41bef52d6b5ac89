// libFuzzer entry for fx::fuzz::exported_program (fuzz/targets.h).
#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fx::fuzz::exported_program(data, size);
  return 0;
}
