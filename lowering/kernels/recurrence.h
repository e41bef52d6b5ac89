// Internal to //lowering:onednn_ops: an LSTM or GRU layer's recurrence at
// batch 1 on AVX-512, for fx_onednn::lstm and gru (lowering/onednn_matmul.cc),
// which compute the input projection of every step at once (one oneDNN
// matmul) and hand the steps here.
//
// At batch 1 each step is a matrix-vector product of the hidden state with
// the recurrent weights ([hidden, gates * hidden], 4 MB for an LSTM of 512
// units): the weights are read from the shared cache once per step, and
// the step's time is how fast they stream. oneDNN 2.6's RNN primitives read
// them at about half the speed two threads can (an LSTM layer of 512 units,
// 256 inputs, 32 steps, 2 threads: 1.07-1.09 ms, against 0.58-0.60 ms with
// the steps here). Here each intra-op thread owns a slice of the hidden
// units for the whole sequence: per step it reads its slice of the
// weights, applies the gates to its units and meets the others at a
// barrier; one parallel region for all the steps. The slice's blocks are
// read in alternating order from step to step, so that what the last step
// left in the core's cache is read first (0.63 -> 0.48 ms for those 32
// steps). A bidirectional layer's two directions run at once, each on its
// own group of the threads (128 units: 0.81-0.92x the time of one after
// the other on all of them).
#pragma once

#include <cstdint>

namespace fx::onednn {

// Whether run_recurrences runs a layer of `batch` sequences of `hidden`
// units on this CPU: batch 1, hidden a multiple of 16, AVX-512F. (At larger
// batches the step is a matrix product and oneDNN's primitives are
// faster.)
bool recurrence_runs(int64_t batch, int64_t hidden);

// One layer. Gates in fx_onednn's order: an LSTM's i, f, g, o (aten's); a
// GRU's z, r, n (oneDNN's u, r, o). The recurrent weights as run_recurrences
// reads them, from the transposed weight w [hidden (k), gates * hidden
// (gate g, unit j)]: blocks of 16 units, each [k][g][16], i.e.
// packed[j / 16][k][g][j % 16] = w[k][g * hidden + j].
struct Recurrence {
  bool lstm = true;                    // else a GRU (linear before reset)
  int64_t steps = 0, hidden = 0;
  const float* input_gates = nullptr;  // [steps, gates * hidden]: x_t W_ih^T
  // An LSTM's b_ih + b_hh; a GRU's [b_iz + b_hz, b_ir + b_hr, b_in, b_hn].
  const float* bias = nullptr;         // [4 * hidden]
  const float* packed_weights = nullptr;
  const float* h0 = nullptr;           // [hidden]
  const float* c0 = nullptr;           // [hidden], an LSTM's
  float* output = nullptr;             // [steps, hidden]: h_1 ... h_T
  // Floats from one step's output to the next's (hidden, or 2 * hidden
  // where a bidirectional layer's directions share each step's row).
  int64_t output_stride = 0;           // 0: hidden
  // The steps from the last to the first (a bidirectional layer's reverse
  // direction): step t reads h of step t + 1 (h0 for the last) and writes
  // output row t, whose h is then h_n.
  bool reverse = false;
  float* c_n = nullptr;                // [hidden], an LSTM's (h_n is the
                                       // last output)
};

// Runs `count` independent layers' steps (one, or a bidirectional layer's
// two directions) on the calling thread's intra-op threads: one group of
// threads per layer, each group meeting at barriers of its own; with fewer
// threads than layers, a thread runs its layers one after another.
// Requires recurrence_runs(1, hidden) for each.
void run_recurrences(const Recurrence* layers, int count);

}  // namespace fx::onednn
