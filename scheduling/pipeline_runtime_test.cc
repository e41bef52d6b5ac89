#include "scheduling/pipeline_runtime.h"

#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "fx/fx.h"
#include "scheduling/child_processes.h"
#include "scheduling/pipeline.h"
#include "testdata/test_helpers.h"
#include "third_party/catch.h"

// The runtime with every rank a thread of this process (each with its own
// store client and process group, as separate processes would have); the
// faults that need processes (killed and hung ranks) are in
// tools/pipeline_cli_test.sh.
namespace fx {
namespace {

using testdata::trace_function;

PipelineGroup group(const std::string& master, int64_t rank, int64_t world,
                    int timeout_ms = 20000) {
  PipelineGroup g;
  g.master = master;
  g.rank = rank;
  g.world = world;
  g.timeout = std::chrono::milliseconds(timeout_ms);
  return g;
}

std::string local_master() {
  return "127.0.0.1:" + std::to_string(free_local_port());
}

// Ranks 1.. served on threads; each thread's error, if any.
struct Servers {
  std::vector<std::thread> threads;
  std::vector<std::string> errors;

  Servers(const Pipeline& p, const std::string& master, int64_t world,
          int timeout_ms = 20000, const Pipeline* other = nullptr)
      : errors(world) {
    for (int64_t r = 1; r < world; ++r) {
      const Pipeline& from = other != nullptr && r == 1 ? *other : p;
      GraphModule stage = from.stages[r].module;
      threads.emplace_back([this, stage, master, r, world, timeout_ms] {
        try {
          serve_pipeline_stage(stage, group(master, r, world, timeout_ms));
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    }
  }
  void join() {
    for (std::thread& t : threads) t.join();
    threads.clear();
  }
  ~Servers() { join(); }
};

GraphModule chain() {
  return trace_function(
      [](at::Tensor x) {
        at::Tensor a = torch::relu(x * 3);
        at::Tensor b = torch::sigmoid(a) + x;
        at::Tensor c = torch::tanh(b);
        return std::make_tuple(c * 2, b);
      },
      {torch::randn({2, 5})});
}

at::Tensor in_one_process(const Pipeline& p, const at::Tensor& batch,
                          int64_t micro, size_t output) {
  std::vector<at::Tensor> parts;
  for (int64_t m = 0; m < batch.size(0) / micro; ++m) {
    c10::IValue y = run_pipeline_locally(p, {batch.narrow(0, m * micro, micro)});
    parts.push_back(y.isTuple() ? y.toTupleRef().elements()[output].toTensor()
                                : y.toTensor());
  }
  return at::cat(parts, 0);
}

PipelineOptions stages(int64_t n) {
  PipelineOptions options;
  options.stages = n;
  return options;
}

TEST_CASE("2 and 3 ranks compute bitwise what the stages do in one process") {
  GraphModule gm = chain();
  for (int64_t world : {2, 3}) {
    Pipeline p = split_pipeline(gm, stages(world));
    const std::string master = local_master();
    Servers servers(p, master, world);
    {
      PipelineDriver driver(p.stages[0].module, group(master, 0, world));
      CHECK(driver.micro_batch_size() == 2);
      for (int round = 0; round < 3; ++round) {
        at::Tensor x = torch::randn({2 * (round + 1) * 3, 5});
        c10::IValue y = driver.run({x});
        REQUIRE(y.isTuple());
        CHECK(torch::equal(y.toTupleRef().elements()[0].toTensor(),
                           in_one_process(p, x, 2, 0)));
        CHECK(torch::equal(y.toTupleRef().elements()[1].toTensor(),
                           in_one_process(p, x, 2, 1)));
      }
      // A stream of batches of different sizes: one result per batch.
      std::vector<std::vector<at::Tensor>> stream = {
          {torch::randn({2, 5})}, {torch::randn({8, 5})}, {torch::randn({4, 5})}};
      std::vector<c10::IValue> ys = driver.run_all(stream);
      REQUIRE(ys.size() == 3);
      for (size_t b = 0; b < 3; ++b) {
        CHECK(torch::equal(ys[b].toTupleRef().elements()[1].toTensor(),
                           in_one_process(p, stream[b][0], 2, 1)));
      }
      // A batch that is no multiple of the micro-batch is refused, and the
      // pipeline goes on.
      CHECK_THROWS_WITH(driver.run({torch::randn({3, 5})}),
                        Catch::Contains("so give Float[2*k, 5]"));
      CHECK_THROWS_WITH(driver.run({torch::randn({4, 6})}),
                        Catch::Contains("input 0 is Float[4, 6]"));
      at::Tensor x = torch::randn({4, 5});
      CHECK(torch::equal(
          driver.run({x}).toTupleRef().elements()[0].toTensor(),
          in_one_process(p, x, 2, 0)));
    }  // the driver stops the servers
    servers.join();
    for (const std::string& error : servers.errors) CHECK(error.empty());
  }
}

TEST_CASE("a graph with dynamic dimensions runs other lengths across ranks") {
  // [B, T, 8] tokens, B and T dynamic; the sizes are read late.
  TraceOptions options;
  options.dynamic = {{.input = 0, .dim = 0, .symbol = "B"},
                     {.input = 0, .dim = 1, .symbol = "T", .max = 64}};
  GraphModule gm = symbolic_trace(
      [](at::Tensor x) {
        const int64_t B = x.size(0), T = x.size(1);
        at::Tensor q = torch::tanh(x * 2);
        at::Tensor att = torch::softmax(q.matmul(q.transpose(1, 2)), -1);
        at::Tensor y = torch::relu(att.matmul(q) + x);
        return y.reshape({B * T, 8}).view({B, T, 8}).sum(-1);
      },
      std::vector<c10::IValue>{torch::randn({2, 6, 8})}, options);
  const int64_t world = 3;
  Pipeline p = split_pipeline(gm, stages(world));
  const std::string master = local_master();
  Servers servers(p, master, world);
  {
    PipelineDriver driver(p.stages[0].module, group(master, 0, world));
    CHECK(driver.micro_batch_size() == 2);
    // Batches of several lengths, one after another and as one stream
    // (each length its own round), longer ones growing the buffers.
    std::vector<std::vector<at::Tensor>> stream;
    for (int64_t t : {6, 3, 17, 17, 1, 40}) stream.push_back({torch::randn({4, t, 8})});
    for (const auto& batch : stream) {
      CHECK(torch::equal(driver.run(batch).toTensor(), gm->forward({batch[0]}).toTensor()));
    }
    std::vector<c10::IValue> ys = driver.run_all(stream);
    REQUIRE(ys.size() == stream.size());
    for (size_t b = 0; b < stream.size(); ++b) {
      CHECK(torch::equal(ys[b].toTensor(), gm->forward({stream[b][0]}).toTensor()));
    }
    // A length out of bounds is refused by name, and the pipeline goes on.
    CHECK_THROWS_WITH(driver.run({torch::randn({2, 65, 8})}), Catch::Contains("T <= 64"));
    at::Tensor x = torch::randn({2, 9, 8});
    CHECK(torch::equal(driver.run({x}).toTensor(), gm->forward({x}).toTensor()));
  }
  servers.join();
  for (const std::string& error : servers.errors) CHECK(error.empty());
}

TEST_CASE("stages that do not fit are named on every rank") {
  Pipeline p = split_pipeline(chain(), stages(2));
  GraphModule other_model = trace_function(
      [](at::Tensor x) { return torch::relu(x).sum(1); },
      {torch::randn({2, 7})});
  Pipeline other = split_pipeline(other_model, stages(2));
  const std::string master = local_master();
  Servers servers(p, master, 2, 20000, &other);
  CHECK_THROWS_WITH(PipelineDriver(p.stages[0].module, group(master, 0, 2)),
                    Catch::Contains("do not belong to one pipeline"));
  servers.join();
  CHECK_THAT(servers.errors[1], Catch::Contains("rank 1's stage takes"));
}

TEST_CASE("a world size that differs is named on both sides") {
  Pipeline p = split_pipeline(chain(), stages(2));
  const std::string master = local_master();
  std::string error;
  std::thread server([&] {
    try {
      serve_pipeline_stage(p.stages[1].module, group(master, 1, 3, 5000));
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  CHECK_THROWS_WITH(PipelineDriver(p.stages[0].module, group(master, 0, 2, 5000)),
                    Catch::Contains("give every rank the same --world"));
  server.join();
  CHECK_THAT(error, Catch::Contains("same --world") ||
                        Catch::Contains("rendezvous at rank 0 failed"));
}

TEST_CASE("a rank that never joins, a port in use, bad groups") {
  Pipeline p = split_pipeline(chain(), stages(2));
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(
      PipelineDriver(p.stages[0].module, group(local_master(), 0, 2, 1500)),
      Catch::Contains("rank 1 of 2 did not join within 1500 ms"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(15));

  // A port someone listens on.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  REQUIRE(::listen(fd, 1) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  const std::string busy = "127.0.0.1:" + std::to_string(ntohs(address.sin_port));
  CHECK_THROWS_WITH(PipelineDriver(p.stages[0].module, group(busy, 0, 2, 1500)),
                    Catch::Contains("cannot listen on " + busy));
  ::close(fd);

  CHECK_THROWS_WITH(PipelineDriver(p.stages[0].module, group("nowhere", 0, 2)),
                    Catch::Contains("is not HOST:PORT"));
  CHECK_THROWS_WITH(PipelineDriver(p.stages[0].module, group(local_master(), 2, 2)),
                    Catch::Contains("ranks go from 0 to world - 1"));
  CHECK_THROWS_WITH(serve_pipeline_stage(p.stages[1].module,
                                         group(local_master(), 0, 2)),
                    Catch::Contains("rank 0 is the driver"));
  // One rank alone: no networking, the stage runs here.
  Pipeline whole = split_pipeline(chain(), stages(1));
  PipelineDriver alone(whole.stages[0].module, group("", 0, 1));
  at::Tensor x = torch::randn({6, 5});
  CHECK(torch::equal(alone.run({x}).toTupleRef().elements()[0].toTensor(),
                     in_one_process(whole, x, 2, 0)));
}

TEST_CASE("local processes are reaped, and killed when they hang") {
  ChildProcesses children;
  children.spawn({"/bin/sh", "-c", "exit 3"});
  children.spawn({"/bin/sleep", "60"});
  const auto start = std::chrono::steady_clock::now();
  std::vector<int> statuses = children.wait(std::chrono::milliseconds(500));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  CHECK(statuses == std::vector<int>{3, 128 + 9});
  CHECK_THROWS_WITH(children.spawn({"/nonexistent/program"}),
                    Catch::Contains("cannot start /nonexistent/program"));
}

}  // namespace
}  // namespace fx
