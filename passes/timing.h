// Timing, for the passes that decide by measuring (optimize_for_inference's
// Decision::kMeasure) and for the benchmark programs (tools/):
//
//   std::vector<double> ms;
//   for (int i = 0; i < 5; ++i) ms.push_back(fx::time_ms([&] { run(); }));
//   double typical = fx::median(ms);
#pragma once

#include <chrono>
#include <functional>
#include <vector>

namespace fx {

using Clock = std::chrono::steady_clock;

// Milliseconds from `start` until now.
double ms_since(Clock::time_point start);

// Milliseconds one call of `run` takes.
double time_ms(const std::function<void()>& run);

// The middle sample, or the mean of the two middle ones; 0 for none.
double median(std::vector<double> samples);

}  // namespace fx
