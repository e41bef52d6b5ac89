// Internal to //lowering:onednn_ops: an LSTM layer's recurrence at batch 1
// on AVX-512, for fx_onednn::lstm (lowering/onednn_ops.cc), which computes
// the input projection of every step at once (one oneDNN matmul) and hands
// the steps here.
//
// At batch 1 each step is a matrix-vector product of the hidden state with
// the recurrent weights ([hidden, 4 * hidden], 4 MB at hidden 512): the
// weights are read from the shared cache once per step, and the step's time
// is how fast they stream. oneDNN 2.6's LSTM primitive reads them at about
// half the speed two threads can (a layer of 512 units, 256 inputs, 32
// steps, 2 threads: 1.07-1.09 ms, against 0.58-0.60 ms with the steps
// here). Here each intra-op thread owns a slice of the hidden units for the
// whole sequence: per step it reads its slice of the weights, applies the
// gates to its units and meets the others at a barrier; one parallel
// region for all the steps. The slice's blocks are read in alternating
// order from step to step, so that what the last step left in the core's
// cache is read first (0.63 -> 0.48 ms for those 32 steps).
#pragma once

#include <cstdint>

namespace fx::onednn {

// Whether lstm_recurrence runs a layer of `batch` sequences of `hidden`
// units on this CPU: batch 1, hidden a multiple of 16, AVX-512F. (At larger
// batches the step is a matrix product and oneDNN's primitive is faster.)
bool lstm_recurrence_runs(int64_t batch, int64_t hidden);

// The recurrent weights as lstm_recurrence reads them, from aten's
// transposed weight w [hidden (k), 4 * hidden (gate g, unit j)]: blocks of
// 16 units, each [k][g][16], i.e. packed[j / 16][k][g][j % 16] =
// w[k][g * hidden + j].
struct LstmRecurrence {
  int64_t steps = 0, hidden = 0;
  const float* input_gates = nullptr;  // [steps, 4 * hidden]: x_t W_ih^T
  const float* bias = nullptr;         // [4 * hidden]: b_ih + b_hh
  const float* packed_weights = nullptr;
  const float* h0 = nullptr;           // [hidden]
  const float* c0 = nullptr;           // [hidden]
  float* output = nullptr;             // [steps, hidden]: h_1 ... h_T
  float* c_n = nullptr;                // [hidden] (h_n is the last output)
};

// Runs the steps on the calling thread's intra-op threads (gates i, f, g, o
// as aten orders them). Requires lstm_recurrence_runs(1, hidden).
void lstm_recurrence(const LstmRecurrence& layer);

}  // namespace fx::onednn
