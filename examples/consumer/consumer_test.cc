// The consumer's view of fx for LibTorch: public headers, a pass, and a
// class generated at build time, checked against eager LibTorch.
#include <torch/torch.h>

#include "fx/fx.h"
#include "passes/fuse_conv_bn.h"
#include "third_party/catch.h"
#include "tiny_net.h"
#include "tiny_net_folded.h"

TEST_CASE("TinyNet traced, folded and generated agrees with eager") {
  consumer::TinyNet net = consumer::make_tiny_net();
  torch::manual_seed(0);
  torch::Tensor x = torch::randn({1, 3, 32, 32});

  fx::GraphModule gm = fx::symbolic_trace(net, x);
  CHECK(gm->graph().find_nodes(fx::Opcode::kCallFunction,
                               fx::op("aten::batch_norm")).size() == 2);
  REQUIRE(fx::fuse_conv_bn(*gm));
  gm->recompile();
  CHECK(gm->graph().find_nodes(fx::Opcode::kCallFunction,
                               fx::op("aten::batch_norm")).empty());

  consumer::TinyNetFolded generated(fx::named_tensors(*net));
  torch::NoGradGuard no_grad;
  torch::Tensor eager = net(x);
  torch::Tensor folded = gm(x).toTensor();
  CHECK(torch::allclose(folded, eager, 1e-5, 1e-5));
  CHECK(torch::equal(generated.forward(x), folded));
  // The generated class checks the guard the trace recorded.
  CHECK_THROWS_AS(generated.forward(torch::randn({1, 3, 64, 64})),
                  fx::GuardError);
}
