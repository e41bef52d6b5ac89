// The public corpus (testdata/torchvision_corpus.py): torchvision 0.14's
// classification, segmentation and video models, traced and scripted, and two
// detection models, imported by fx::symbolic_trace and compared with
// TorchScript's own output at 1e-4 relative to each output tensor's largest
// magnitude; a model with one tensor input is traced with a dynamic batch
// (TraceOptions::dynamic) and compared at a second batch size too, and a
// detection model (a list of images) on four more images, which keep other
// numbers of boxes. A model fails only with the asserted reason below. CI runs
// each family's smallest member; FX_CORPUS=all runs every model. Sharded by
// Bazel (TEST_TOTAL_SHARDS); each shard writes its files, a few at a time,
// in the test's temporary directory and prints a table.
#include <torch/script.h>
#include <torch/torch.h>

#include <dlfcn.h>

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "fx/fx.h"
#include "fx/io/input_spec.h"
#include "fx/torchscript/torchscript.h"
#include "testdata/test_files.h"
#include "third_party/catch.h"

namespace {

// Models that fail, with the reason they must give: what truly depends on
// data (the operator, and the torchvision source line that called it).
// Every other model imports and is equal.
const std::map<std::string, std::vector<std::string>>& expected_failures() {
  static const auto* out = new std::map<std::string, std::vector<std::string>>{
      // SSD selects boxes class by class (181 sizes that depend on data),
      // and its batched_nms loops over torch.unique(idxs) past 1,000 boxes:
      // a loop count that depends on data. With every size at its bound the
      // program takes that loop, and fx searches the bounds of at most 16
      // such sizes one by one.
      {"ssdlite320_mobilenet_v3_large_scripted",
       {"finding the bounds of the sizes that depend on data failed",
        "aten::where returns a tensor whose size depends on data, in a trace "
        "at other sizes only",
        "for class_id in torch.unique(idxs)"}},
  };
  return *out;
}

// Models whose sizes that depend on data are narrowed where the program
// branches, as TraceStats::narrowed gives them (each line's start): what
// the graph checks at run time. Faster R-CNN's box coder and batched_nms
// branch on an empty selection (u1, u2: proposals; u6: boxes above the
// score threshold), and batched_nms loops over the classes past 1,000
// boxes.
const std::map<std::string, std::vector<std::string>>& expected_bounds() {
  static const auto* out = new std::map<std::string, std::vector<std::string>>{
      {"fasterrcnn_mobilenet_v3_large_320_fpn_scripted",
       {"0 <= u6 <= 1000 (was 0 <= u6 <= 13500)", "1 <= u1 <= 450 (was",
        "1 <= u2 <= 450 (was", "1 <= u6 <= 1000 (was"}},
  };
  return *out;
}

constexpr char kTorchvisionOps[] =
    "/usr/lib/python3/dist-packages/torchvision/"
    "_C.cpython-311-x86_64-linux-gnu.so";

struct Entry {
  std::string name;
  std::string spec;
};

std::string run(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"),
                                             pclose);
  REQUIRE(pipe);
  std::string out;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe.get())) > 0;) {
    out.append(buffer, n);
  }
  return out;
}

std::vector<Entry> shard_entries() {
  // FX_CORPUS=all: every model (bazel test --test_env=FX_CORPUS=all);
  // FX_CORPUS=NAME,NAME: those entries.
  const std::string which =
      std::getenv("FX_CORPUS") ? std::getenv("FX_CORPUS") : "";
  std::istringstream lines(
      run(std::string("/usr/bin/python3 testdata/torchvision_corpus.py list") +
          (which.empty() ? "" : " all")));
  std::vector<Entry> all;
  for (Entry e; lines >> e.name >> e.spec;) {
    if (which.empty() || which == "all" ||
        ("," + which + ",").find("," + e.name + ",") != std::string::npos) {
      all.push_back(e);
    }
  }
  REQUIRE(all.size() > (which.empty() ? 55u : which == "all" ? 170u : 0u));
  const char* total = std::getenv("TEST_TOTAL_SHARDS");
  const char* index = std::getenv("TEST_SHARD_INDEX");
  if (const char* status = std::getenv("TEST_SHARD_STATUS_FILE")) {
    std::ofstream(status) << "";
  }
  const size_t shards = total ? std::stoul(total) : 1;
  const size_t shard = index ? std::stoul(index) : 0;
  // A model's traced and scripted files in one shard (written from one
  // construction of the model).
  std::vector<Entry> out;
  std::string last;
  size_t group = 0;
  for (const Entry& e : all) {
    const std::string model = e.name.substr(0, e.name.rfind('_'));
    if (!last.empty() && model != last) ++group;
    last = model;
    if (group % shards == shard) out.push_back(e);
  }
  return out;
}

// The largest relative difference between two outputs (tensors, tuples,
// lists, dicts), tensor by tensor: a tensor's largest |a - b| over its own
// largest |b| (over 1 when b is all zeros), so that a small output beside a
// large one (a detection model's scores in [0, 1] beside its boxes near 300)
// is held to its own scale. Throws std::runtime_error naming the first place
// where their structure, sizes or dtypes differ.
double relative_difference(const c10::IValue& a, const c10::IValue& b) {
  auto expect = [](bool same, const std::string& what) {
    if (!same) throw std::runtime_error("outputs differ: " + what);
  };
  double worst = 0;
  if (b.isTensor()) {
    expect(a.isTensor(), "a tensor expected");
    const at::Tensor& x = a.toTensor();
    const at::Tensor& y = b.toTensor();
    expect(x.sizes() == y.sizes(), "sizes");
    expect(x.scalar_type() == y.scalar_type(), "dtype");
    if (y.numel() == 0) return 0;
    const at::Tensor xd = x.to(at::kDouble), yd = y.to(at::kDouble);
    const double diff = (xd - yd).abs().max().item<double>();
    const double scale = yd.abs().max().item<double>();
    worst = scale > 0 ? diff / scale : diff;
  } else if (b.isTuple() || b.isList()) {
    expect(a.isTuple() == b.isTuple() && a.isList() == b.isList(),
           b.isTuple() ? "a tuple expected" : "a list expected");
    const auto items = [](const c10::IValue& v) {
      return v.isTuple() ? v.toTupleRef().elements().vec()
                         : v.toListRef().vec();
    };
    const std::vector<c10::IValue> x = items(a), y = items(b);
    expect(x.size() == y.size(), "sequence lengths");
    for (size_t i = 0; i < x.size(); ++i) {
      worst = std::max(worst, relative_difference(x[i], y[i]));
    }
  } else if (b.isGenericDict()) {
    expect(a.isGenericDict(), "a dict expected");
    const auto x = a.toGenericDict();
    const auto y = b.toGenericDict();
    expect(x.size() == y.size(), "dict sizes");
    for (const auto& item : y) {
      expect(x.contains(item.key()), "dict keys");
      worst = std::max(worst, relative_difference(x.at(item.key()),
                                                  item.value()));
    }
  } else {
    expect(a == b, "values");
  }
  return worst;
}

// An example input for `spec`; "3x96x96" for detection is a list of one
// image, its values in [0, 1].
std::vector<c10::IValue> example(const std::string& spec, int seed = 0) {
  fx::InputSpec parsed = fx::parse_input_spec(spec);
  torch::manual_seed(seed);
  if (parsed.sizes.size() == 3) {
    return {c10::List<at::Tensor>({torch::rand(parsed.sizes)})};
  }
  return {torch::randn(parsed.sizes)};
}

// The number of boxes a detection model's output holds for its first image
// ((losses, [{"boxes": ...}]) in scripting), or -1 for another output.
int64_t detections(const c10::IValue& output) {
  if (!output.isTuple() || output.toTupleRef().elements().size() != 2) return -1;
  const c10::IValue& list = output.toTupleRef().elements()[1];
  if (!list.isList() || list.toListRef().empty()) return -1;
  const c10::IValue& first = list.toListRef()[0];
  if (!first.isGenericDict() || !first.toGenericDict().contains("boxes")) {
    return -1;
  }
  return first.toGenericDict().at("boxes").toTensor().size(0);
}

}  // namespace

TEST_CASE("outputs are compared tensor by tensor, each at its own scale") {
  // Boxes near 300 beside scores in [0, 1] whose every score is off by
  // 0.01: 3e-5 of the boxes' scale, 1e-2 of the scores'.
  const at::Tensor boxes = torch::full({3, 4}, 300.0);
  const at::Tensor scores = torch::tensor({0.25, 0.5, 1.0});
  const c10::IValue want = c10::ivalue::Tuple::create({boxes, scores});
  const c10::IValue got = c10::ivalue::Tuple::create({boxes, scores + 0.01});
  CHECK(relative_difference(got, got) == 0);
  CHECK(relative_difference(got, want) == Approx(0.01));
  CHECK(relative_difference(got, want) > 1e-4);
  // The same in a dict, off in the boxes by 3/1024 instead (exact in
  // float): 1e-5 of their scale.
  c10::Dict<std::string, at::Tensor> want_dict, got_dict;
  want_dict.insert("boxes", boxes);
  want_dict.insert("scores", scores);
  got_dict.insert("boxes", boxes + 3.0 / 1024);
  got_dict.insert("scores", scores);
  CHECK(relative_difference(got_dict, want_dict) == Approx(3.0 / 1024 / 300));
  // An all-zero tensor is held to its absolute difference.
  CHECK(relative_difference(torch::full({2}, 1e-3), torch::zeros({2})) ==
        Approx(1e-3));
  CHECK_THROWS_WITH(relative_difference(scores, boxes),
                    Catch::Contains("outputs differ: sizes"));
}

TEST_CASE("torchvision's models import from TorchScript and equal it") {
  torch::NoGradGuard no_grad;
  // torchvision's operators (torchvision::nms, roi_align), which detection
  // models call, as a C++ deployment links them: Debian's build of
  // torchvision's operator library needs only libtorch.
  REQUIRE(dlopen(kTorchvisionOps, RTLD_NOW | RTLD_GLOBAL) != nullptr);
  const std::string dir = testdata::test_file("torchvision_corpus");
  std::vector<std::string> table;
  int equal = 0, failed_as_expected = 0, generic = 0;
  const std::vector<Entry> entries = shard_entries();
  // Written a few at a time (one Python start for several files; VGG's
  // files are 530 MB each), each removed once loaded.
  constexpr size_t kBatch = 6;
  for (size_t begin = 0; begin < entries.size(); begin += kBatch) {
    std::string command =
        "/usr/bin/python3 testdata/torchvision_corpus.py write " + dir;
    for (size_t i = begin; i < std::min(entries.size(), begin + kBatch); ++i) {
      command += " " + entries[i].name;
    }
    const std::string written = run(command);
    for (size_t i = begin; i < std::min(entries.size(), begin + kBatch); ++i) {
      const Entry& e = entries[i];
      CAPTURE(e.name, e.spec);
      const std::string path = dir + "/" + e.name + ".pt";
      if (written.find(path) == std::string::npos) {
        FAIL_CHECK("torchvision_corpus.py did not write " + path);
        continue;
      }
      torch::jit::Module script;
      const std::vector<c10::IValue> inputs = example(e.spec);
      c10::IValue want;
      try {
        script = torch::jit::load(path);
        script.eval();
        want = script.forward(inputs);
      } catch (const std::exception& error) {
        std::remove(path.c_str());
        FAIL_CHECK("TorchScript cannot run " << path << ": " << error.what());
        continue;
      }
      std::remove(path.c_str());
      std::string outcome;
      auto expected = expected_failures().find(e.name);
      try {
        fx::TraceStats stats;
        fx::GraphModule gm = fx::symbolic_trace(script, inputs, {}, &stats);
        const auto bounds = expected_bounds().find(e.name);
        const std::vector<std::string> no_bounds;
        const std::vector<std::string>& narrowed =
            bounds == expected_bounds().end() ? no_bounds : bounds->second;
        REQUIRE(stats.narrowed.size() == narrowed.size());
        for (size_t b = 0; b < narrowed.size(); ++b) {
          CHECK_THAT(stats.narrowed[b], Catch::StartsWith(narrowed[b]));
        }
        const c10::IValue got = gm->forward(inputs);
        double relative = relative_difference(got, want);
        // A model with one tensor input runs at a second batch size too:
        // as imported (its size arithmetic recorded), or, if the import
        // specialized it (a size used as a constant), traced again with a
        // dynamic batch (what that cannot generalize is an error).
        const bool batched = inputs.size() == 1 && inputs[0].isTensor();
        const char* how = "";
        if (batched) {
          std::vector<int64_t> sizes = inputs[0].toTensor().sizes().vec();
          sizes[0] += 1;
          torch::manual_seed(1);
          const std::vector<c10::IValue> second = {torch::randn(sizes)};
          how = " at 2 batch sizes";
          c10::IValue again;
          try {
            again = gm->forward(second);
            generic += 1;
          } catch (const fx::GuardError&) {
            fx::TraceOptions options;
            fx::DynamicDim batch;
            batch.symbol = "N";
            batch.max = 64;
            options.dynamic = {batch};
            gm = fx::symbolic_trace(script, inputs, options);
            again = gm->forward(second);
            how = " at 2 batch sizes (dynamic batch)";
          }
          relative = std::max(relative, relative_difference(
                                            again, script.forward(second)));
        }
        // A detection model runs on more images, which keep other numbers
        // of boxes: the same graph, equal to TorchScript on each.
        std::string counts;
        if (detections(want) >= 0) {
          std::set<int64_t> different = {detections(want)};
          counts = " on images with " + std::to_string(detections(want));
          for (int seed = 1; seed <= 4; ++seed) {
            const std::vector<c10::IValue> image = example(e.spec, seed);
            const c10::IValue expected = script.forward(image);
            relative = std::max(relative, relative_difference(gm->forward(image),
                                                              expected));
            different.insert(detections(expected));
            counts += ", " + std::to_string(detections(expected));
          }
          counts += " boxes";
          CHECK(different.size() >= 3);
        }
        char line[160];
        std::snprintf(line, sizeof line, "equal (%.1e)%s%s", relative, how,
                      counts.c_str());
        outcome = relative <= 1e-4 ? line : "DIFFERS: " + std::string(line);
        CHECK(relative <= 1e-4);
        CHECK(expected == expected_failures().end());
        equal += relative <= 1e-4;
      } catch (const fx::Error& error) {
        const std::string what = error.what();
        outcome = "ERROR: " + what.substr(0, what.find('\n'));
        INFO(what);
        if (expected == expected_failures().end()) {
          FAIL_CHECK("an unexpected error");
        } else {
          for (const std::string& part : expected->second) {
            CHECK_THAT(what, Catch::Contains(part));
          }
          failed_as_expected += 1;
        }
      } catch (const std::exception& error) {
        const std::string what = error.what();
        outcome = "CRASH: " + what.substr(0, what.find('\n'));
        INFO(what);
        FAIL_CHECK("an exception that is not an fx::Error");
      }
      table.push_back(e.name + "  " + outcome);
      std::printf("%-44s %s\n", e.name.c_str(), outcome.c_str());
      std::fflush(stdout);
    }
  }
  std::printf(
      "%d equal, %d failed as expected, of %zu; %d ran a second batch size "
      "as imported\n",
      equal, failed_as_expected, table.size(), generic);
}
