#include "passes/timing.h"

#include <algorithm>

namespace fx {

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start)
      .count();
}

double time_ms(const std::function<void()>& run) {
  const Clock::time_point start = Clock::now();
  run();
  return ms_since(start);
}

double median(std::vector<double> samples) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  return n % 2 == 1 ? samples[n / 2]
                    : (samples[n / 2 - 1] + samples[n / 2]) / 2;
}

}  // namespace fx
