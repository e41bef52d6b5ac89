// The tracer's metadata against what runs: ~120 operators on inputs of
// mixed dtypes and layouts, each node's recorded TensorMeta (sizes, dtype,
// strides) checked against ShapeProp's, which runs the graph for real. A
// pass that decides on metadata (eliminate_noops drops a cast whose dtype
// it believes unchanged) must never see a wrong one.
#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "fx/fx.h"
#include "interpreter/shape_prop.h"
#include "third_party/catch.h"

namespace {

using fx::Node;
using fx::Opcode;
using fx::TensorMeta;
using T = at::Tensor;

// x: f32[2, 3, 4], y: f64[2, 3, 4], i: i64[2, 3, 4] (values 0..3),
// b: bool[2, 3, 4], img: f32[1, 3, 8, 8] channels-last, k: i32[2, 3, 4].
using Case = std::function<T(T x, T y, T i, T b, T img, T k)>;

struct Named {
  const char* name;
  Case fn;
};

std::vector<Named> cases() {
  return {
      // Unary.
      {"relu", [](T x, T, T, T, T, T) { return x.relu(); }},
      {"sigmoid", [](T x, T, T, T, T, T) { return x.sigmoid(); }},
      {"tanh_double", [](T, T y, T, T, T, T) { return y.tanh(); }},
      {"exp_int", [](T, T, T i, T, T, T) { return i.exp(); }},
      {"log", [](T x, T, T, T, T, T) { return x.abs().log(); }},
      {"abs_int", [](T, T, T i, T, T, T) { return i.abs(); }},
      {"neg", [](T x, T, T, T, T, T) { return -x; }},
      {"sqrt_int", [](T, T, T i, T, T, T) { return i.sqrt(); }},
      {"sin", [](T x, T, T, T, T, T) { return x.sin(); }},
      {"floor", [](T x, T, T, T, T, T) { return x.floor(); }},
      {"round", [](T, T y, T, T, T, T) { return y.round(); }},
      {"sign_int", [](T, T, T i, T, T, T) { return i.sign(); }},
      {"erf", [](T x, T, T, T, T, T) { return x.erf(); }},
      {"gelu", [](T x, T, T, T, T, T) { return torch::gelu(x); }},
      {"silu", [](T x, T, T, T, T, T) { return torch::silu(x); }},
      {"hardswish", [](T x, T, T, T, T, T) { return torch::hardswish(x); }},
      {"hardtanh", [](T x, T, T, T, T, T) { return torch::hardtanh(x); }},
      {"relu6", [](T, T, T, T, T img, T) { return torch::relu6(img); }},
      {"leaky_relu", [](T x, T, T, T, T, T) { return torch::leaky_relu(x); }},
      {"elu", [](T, T y, T, T, T, T) { return torch::elu(y); }},
      {"softplus", [](T x, T, T, T, T, T) { return torch::softplus(x); }},
      {"clamp", [](T x, T, T, T, T, T) { return x.clamp(-0.5, 0.5); }},
      {"clamp_int", [](T, T, T i, T, T, T) { return i.clamp(0, 1); }},
      {"logical_not", [](T, T, T, T b, T, T) { return b.logical_not(); }},
      {"logical_not_float", [](T x, T, T, T, T, T) { return x.logical_not(); }},
      {"bitwise_not", [](T, T, T i, T, T, T) { return i.bitwise_not(); }},
      {"reciprocal_int", [](T, T, T, T, T, T k) { return k.reciprocal(); }},
      {"relu_channels_last", [](T, T, T, T, T img, T) { return img.relu(); }},
      {"sigmoid_channels_last", [](T, T, T, T, T img, T) { return img.sigmoid(); }},
      // Binary, with promotion.
      {"add_float_double", [](T x, T y, T, T, T, T) { return x + y; }},
      {"add_float_long", [](T x, T, T i, T, T, T) { return x + i; }},
      {"add_long_int", [](T, T, T i, T, T, T k) { return i + k; }},
      {"add_long_double_scalar", [](T, T, T i, T, T, T) { return i + 1.5; }},
      {"mul_scalar", [](T x, T, T, T, T, T) { return x * 2; }},
      {"sub_int_scalar", [](T, T, T, T, T, T k) { return k - 1; }},
      {"div_int", [](T, T, T i, T, T, T k) { return i / (k.abs() + 1); }},
      {"floor_divide", [](T, T, T i, T, T, T k) { return i.floor_divide(k.abs() + 1); }},
      {"remainder", [](T x, T, T, T, T, T) { return x.remainder(0.3); }},
      {"pow_scalar", [](T x, T, T, T, T, T) { return x.pow(2); }},
      {"pow_int_half", [](T, T, T i, T, T, T) { return i.pow(0.5); }},
      {"maximum", [](T x, T y, T, T, T, T) { return torch::maximum(x, y); }},
      {"minimum_int", [](T, T, T i, T, T, T k) { return torch::minimum(i, k); }},
      {"eq", [](T x, T y, T, T, T, T) { return x.eq(y); }},
      {"lt_scalar", [](T x, T, T, T, T, T) { return x < 0; }},
      {"gt_int", [](T, T, T i, T, T, T k) { return i > k; }},
      {"ne", [](T x, T, T i, T, T, T) { return x.ne(i); }},
      {"logical_and", [](T x, T, T, T b, T, T) { return b.logical_and(x); }},
      {"bitwise_and", [](T, T, T i, T, T, T) { return i.bitwise_and(3); }},
      {"atan2", [](T x, T y, T, T, T, T) { return x.atan2(y); }},
      {"add_broadcast", [](T x, T, T, T, T, T) {
         return x + torch::ones({4}, torch::kDouble);
       }},
      {"add_channels_last", [](T, T, T, T, T img, T) { return img + img; }},
      // where, every overload.
      {"where_self", [](T x, T y, T, T b, T, T) { return torch::where(b, x, y); }},
      {"where_self_float", [](T x, T, T, T b, T, T) { return torch::where(b, x, -x); }},
      {"where_scalar_other", [](T x, T, T, T b, T, T) { return torch::where(b, x, 0.5); }},
      {"where_scalar_self", [](T, T, T i, T b, T, T) { return torch::where(b, 2, i); }},
      {"where_scalars", [](T, T, T, T b, T, T) { return torch::where(b, 1.0, 0.0); }},
      {"where_int_scalars", [](T, T, T, T b, T, T) { return torch::where(b, 1, 0); }},
      {"where_broadcast", [](T x, T, T, T b, T, T) {
         return torch::where(b.select(2, 0).unsqueeze(2), x, x * 2);
       }},
      // Reductions.
      {"sum", [](T x, T, T, T, T, T) { return x.sum(); }},
      {"sum_int", [](T, T, T, T, T, T k) { return k.sum(); }},
      {"sum_bool", [](T, T, T, T b, T, T) { return b.sum(); }},
      {"sum_dim", [](T x, T, T, T, T, T) { return x.sum(1, true); }},
      {"sum_dtype", [](T x, T, T, T, T, T) { return x.sum(torch::kDouble); }},
      {"mean", [](T, T y, T, T, T, T) { return y.mean(); }},
      {"mean_dim", [](T x, T, T, T, T, T) { return x.mean(std::vector<int64_t>{0, 2}); }},
      {"max", [](T x, T, T, T, T, T) { return x.max(); }},
      {"max_dim", [](T x, T, T, T, T, T) { return std::get<0>(x.max(1)); }},
      {"max_dim_indices", [](T x, T, T, T, T, T) { return std::get<1>(x.max(1)); }},
      {"min_int", [](T, T, T i, T, T, T) { return i.min(); }},
      {"argmax", [](T x, T, T, T, T, T) { return x.argmax(2); }},
      {"amax", [](T x, T, T, T, T, T) { return x.amax({1}); }},
      {"prod_int", [](T, T, T, T, T, T k) { return k.prod(); }},
      {"std", [](T x, T, T, T, T, T) { return x.std(); }},
      {"var_dim", [](T x, T, T, T, T, T) { return x.var(1); }},
      {"norm", [](T x, T, T, T, T, T) { return x.norm(); }},
      {"logsumexp", [](T x, T, T, T, T, T) { return x.logsumexp(1); }},
      {"cumsum_int", [](T, T, T, T, T, T k) { return k.cumsum(0); }},
      {"cumsum_dtype", [](T x, T, T, T, T, T) { return x.cumsum(1, torch::kDouble); }},
      {"all", [](T, T, T, T b, T, T) { return b.all(); }},
      {"any_float", [](T x, T, T, T, T, T) { return x.any(); }},
      // Shapes and views.
      {"view", [](T x, T, T, T, T, T) { return x.view({6, 4}); }},
      {"reshape_transposed", [](T x, T, T, T, T, T) {
         return x.transpose(0, 2).reshape({-1});
       }},
      {"permute", [](T x, T, T, T, T, T) { return x.permute({2, 0, 1}); }},
      {"transpose", [](T, T y, T, T, T, T) { return y.transpose(1, 2); }},
      {"t", [](T x, T, T, T, T, T) { return x.select(0, 0).t(); }},
      {"unsqueeze", [](T x, T, T, T, T, T) { return x.unsqueeze(1); }},
      {"squeeze", [](T, T, T, T, T img, T) { return img.squeeze(0); }},
      {"flatten", [](T x, T, T, T, T, T) { return x.flatten(1); }},
      {"flatten_channels_last", [](T, T, T, T, T img, T) { return img.flatten(1); }},
      {"expand", [](T x, T, T, T, T, T) { return x.select(0, 0).expand({5, 3, 4}); }},
      {"repeat", [](T, T, T i, T, T, T) { return i.repeat({1, 2, 1}); }},
      {"narrow", [](T x, T, T, T, T, T) { return x.narrow(2, 1, 2); }},
      {"slice", [](T x, T, T, T, T, T) { return x.slice(1, 0, 3, 2); }},
      {"select", [](T, T, T, T, T img, T) { return img.select(1, 2); }},
      {"index_select", [](T x, T, T, T, T, T) {
         return x.index_select(2, torch::tensor({0, 3}));
       }},
      {"gather", [](T x, T, T i, T, T, T) { return x.gather(2, i); }},
      // Advanced indexing (a shape rule): leading, middle, two-dimensional,
      // separated by a slice, empty, of a channels-last image (the
      // kernel's strides).
      {"index_first", [](T x, T, T, T, T, T) {
         return x.index({torch::tensor({1, 0, 1})});
       }},
      {"index_middle", [](T x, T, T, T, T, T) {
         return x.index({torch::indexing::Slice(), torch::tensor({0, 2})});
       }},
      {"index_2d", [](T x, T, T i, T, T, T) {
         return x.index({torch::indexing::Slice(), torch::indexing::Slice(),
                         i.select(0, 0).slice(0, 0, 2)});
       }},
      {"index_separated", [](T x, T, T, T, T, T) {
         return x.index({torch::tensor({0, 1}), torch::indexing::Slice(),
                         torch::tensor({1, 3})});
       }},
      {"index_empty", [](T x, T, T, T, T, T) {
         return x.index({torch::zeros({0}, torch::kLong)});
       }},
      {"index_channels_last", [](T, T, T, T, T img, T) {
         return img.index({torch::indexing::Slice(), torch::indexing::Slice(),
                           torch::tensor({0, 2})});
       }},
      {"cat", [](T x, T, T, T, T, T) { return torch::cat({x, x}, 1); }},
      {"cat_promotes", [](T x, T y, T, T, T, T) { return torch::cat({x, y}); }},
      {"stack", [](T x, T, T, T, T, T) { return torch::stack({x, x}, 3); }},
      {"split", [](T x, T, T, T, T, T) { return x.split(2, 2)[1]; }},
      {"chunk", [](T, T y, T, T, T, T) { return y.chunk(3, 1)[2]; }},
      {"unbind", [](T x, T, T, T, T, T) { return x.unbind(1)[0]; }},
      {"flip", [](T x, T, T, T, T, T) { return x.flip({0}); }},
      {"roll", [](T x, T, T, T, T, T) { return x.roll(1, 2); }},
      {"tril", [](T x, T, T, T, T, T) { return x.tril(); }},
      {"contiguous_transposed", [](T x, T, T, T, T, T) {
         return x.transpose(1, 2).contiguous();
       }},
      {"contiguous_channels_last", [](T, T, T, T, T img, T) {
         return img.contiguous();
       }},
      {"to_channels_last", [](T, T, T, T, T img, T) {
         return img.contiguous(at::MemoryFormat::ChannelsLast);
       }},
      {"clone_transposed", [](T x, T, T, T, T, T) { return x.select(0, 0).t().clone(); }},
      // Neural network operators.
      {"linear", [](T x, T, T, T, T, T) {
         return torch::nn::functional::linear(x, torch::ones({5, 4}));
       }},
      {"matmul", [](T x, T, T, T, T, T) { return x.matmul(torch::ones({4, 5})); }},
      {"matmul_double", [](T, T y, T, T, T, T) {
         return y.matmul(torch::ones({4}, torch::kDouble));
       }},
      {"bmm", [](T x, T, T, T, T, T) { return x.bmm(x.transpose(1, 2)); }},
      {"conv2d_channels_last", [](T, T, T, T, T img, T) {
         return torch::conv2d(img, torch::ones({5, 3, 3, 3}));
       }},
      {"conv2d_double", [](T, T, T, T, T img, T) {
         return torch::conv2d(img.to(torch::kDouble).contiguous(),
                              torch::ones({2, 3, 1, 1}, torch::kDouble),
                              {}, 2, 1);
       }},
      {"conv_transpose2d", [](T, T, T, T, T img, T) {
         return torch::conv_transpose2d(img.contiguous(), torch::ones({3, 2, 3, 3}));
       }},
      {"max_pool2d", [](T, T, T, T, T img, T) { return torch::max_pool2d(img, 2); }},
      {"avg_pool2d", [](T, T, T, T, T img, T) { return torch::avg_pool2d(img, 2); }},
      {"adaptive_avg_pool2d", [](T, T, T, T, T img, T) {
         return torch::adaptive_avg_pool2d(img, {1, 1});
       }},
      {"batch_norm", [](T, T, T, T, T img, T) {
         return torch::batch_norm(img, torch::ones({3}), torch::zeros({3}),
                                  torch::zeros({3}), torch::ones({3}), false,
                                  0.1, 1e-5, false);
       }},
      {"layer_norm", [](T x, T, T, T, T, T) { return torch::layer_norm(x, {4}); }},
      {"group_norm", [](T, T, T, T, T img, T) { return torch::group_norm(img, 3); }},
      {"softmax", [](T x, T, T, T, T, T) { return x.softmax(2); }},
      {"softmax_dtype", [](T x, T, T, T, T, T) { return x.softmax(1, torch::kDouble); }},
      {"log_softmax", [](T, T y, T, T, T, T) { return y.log_softmax(0); }},
      {"dropout_eval", [](T x, T, T, T, T, T) { return torch::dropout(x, 0.5, false); }},
      {"embedding", [](T, T, T i, T, T, T) {
         return torch::embedding(torch::ones({4, 6}), i);
       }},
      {"interpolate", [](T, T, T, T, T img, T) {
         return torch::upsample_nearest2d(img, std::vector<int64_t>{16, 16});
       }},
      {"pad", [](T x, T, T, T, T, T) { return torch::constant_pad_nd(x, {1, 1}); }},
      // Types and factories.
      {"to_double", [](T x, T, T, T, T, T) { return x.to(torch::kDouble); }},
      {"to_int", [](T x, T, T, T, T, T) { return x.to(torch::kInt); }},
      {"type_as", [](T x, T, T i, T, T, T) { return i.type_as(x); }},
      {"zeros_like_long", [](T x, T, T, T, T, T) {
         return torch::zeros_like(x, torch::kLong);
       }},
      {"ones_like_channels_last", [](T, T, T, T, T img, T) {
         return torch::ones_like(img);
       }},
      {"full_like", [](T, T, T i, T, T, T) { return torch::full_like(i, 7); }},
      {"arange", [](T, T, T, T, T, T) { return torch::arange(5); }},
      {"arange_float", [](T, T, T, T, T, T) { return torch::arange(0.0, 1.0, 0.25); }},
      {"zeros", [](T, T, T, T, T, T) { return torch::zeros({2, 2}, torch::kInt); }},
      {"masked_fill", [](T x, T, T, T b, T, T) { return x.masked_fill(b, 0); }},
      {"argsort", [](T x, T, T, T, T, T) { return x.argsort(int64_t{1}, false); }},
      {"sort_values", [](T, T y, T, T, T, T) { return std::get<0>(y.sort(2)); }},
      {"topk_indices", [](T x, T, T, T, T, T) { return std::get<1>(x.topk(2)); }},
      {"tensor_literal", [](T x, T, T, T, T, T) {
         return x * torch::tensor({1.0, 2.0, 3.0, 4.0}, torch::kDouble);
       }},
  };
}

// What a node's value is, for comparison: its meta and its list's.
struct Recorded {
  const TensorMeta* tensor = nullptr;
  const std::vector<TensorMeta>* tensors = nullptr;
};

void check_same(const TensorMeta& traced, const TensorMeta& ran,
                const std::string& where) {
  INFO(where << ": traced " << traced.to_string() << " strides ["
             << c10::IntArrayRef(traced.strides) << "], ran "
             << ran.to_string() << " strides [" << c10::IntArrayRef(ran.strides)
             << "]");
  CHECK(traced.sizes == ran.sizes);
  CHECK(traced.dtype == ran.dtype);
  CHECK(traced.device == ran.device);
  // Strides matter where they are observable: for more than one element.
  int64_t numel = 1;
  for (int64_t s : ran.sizes) numel *= s;
  if (numel > 1) {
    for (size_t d = 0; d < ran.sizes.size() && d < traced.strides.size(); ++d) {
      if (ran.sizes[d] > 1) CHECK(traced.strides[d] == ran.strides[d]);
    }
  }
}

TEST_CASE("recorded metadata equals the metadata of what runs") {
  torch::manual_seed(0);
  at::Tensor x = torch::randn({2, 3, 4});
  at::Tensor y = torch::randn({2, 3, 4}, torch::kDouble);
  at::Tensor i = torch::randint(0, 4, {2, 3, 4});
  at::Tensor b = torch::rand({2, 3, 4}) > 0.5;
  at::Tensor img =
      torch::randn({1, 3, 8, 8}).contiguous(at::MemoryFormat::ChannelsLast);
  at::Tensor k = torch::randint(-3, 4, {2, 3, 4}, torch::kInt);
  int checked = 0;
  for (const Named& c : cases()) {
    INFO(c.name);
    fx::GraphModule gm = fx::symbolic_trace(c.fn, x, y, i, b, img, k);
    at::Tensor eager = c.fn(x, y, i, b, img, k);
    at::Tensor traced_out = gm(x, y, i, b, img, k).toTensor();
    CHECK(traced_out.scalar_type() == eager.scalar_type());
    CHECK(traced_out.sizes() == eager.sizes());
    // The tracer's metadata, copied before ShapeProp overwrites it.
    std::map<std::string, TensorMeta> tensor;
    std::map<std::string, std::vector<TensorMeta>> tensors;
    for (Node* n : gm->graph().nodes()) {
      if (n->op() != Opcode::kCallFunction) continue;
      if (const TensorMeta* m = n->meta().get(fx::kTensorMeta)) {
        tensor[n->name()] = *m;
      }
      if (const auto* ms = n->meta().get(fx::kTensorMetaList)) {
        tensors[n->name()] = *ms;
      }
    }
    fx::ShapeProp(gm).propagate({x, y, i, b, img, k});
    for (Node* n : gm->graph().nodes()) {
      if (n->op() != Opcode::kCallFunction) continue;
      if (auto it = tensor.find(n->name()); it != tensor.end()) {
        const TensorMeta* ran = n->meta().get(fx::kTensorMeta);
        REQUIRE(ran != nullptr);
        check_same(it->second, *ran, c.name + std::string(" %") + n->name());
        ++checked;
      }
      if (auto it = tensors.find(n->name()); it != tensors.end()) {
        const auto* ran = n->meta().get(fx::kTensorMetaList);
        REQUIRE(ran != nullptr);
        REQUIRE(ran->size() == it->second.size());
        for (size_t e = 0; e < ran->size(); ++e) {
          check_same(it->second[e], (*ran)[e],
                     c.name + std::string(" %") + n->name() + "[" +
                         std::to_string(e) + "]");
        }
        ++checked;
      }
    }
  }
  CHECK(checked > 150);
}

}  // namespace
