#include "testdata/round_trip.h"

#include <torch/script.h>

#include <sstream>

#include "fx/io/serialization.h"
#include "fx/torchscript/torchscript.h"
#include "testdata/zoo_testing.h"
#include "third_party/catch.h"

namespace testdata {

void check_round_trips(fx::GraphModule gm,
                       const std::vector<c10::IValue>& inputs) {
  const c10::IValue want = gm->forward(inputs);
  std::stringstream file;
  fx::save(gm, file);
  fx::GraphModule loaded = fx::load(file);
  CHECK(loaded->graph().to_string() == gm->graph().to_string());
  check_outputs_equal(loaded->forward(inputs), want);
  torch::jit::Module script = fx::to_torchscript(gm);
  check_outputs_equal(script.forward(inputs), want);
}

}  // namespace testdata
