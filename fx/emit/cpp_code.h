// C++ code generation: a Graph as a C++ forward that calls the typed aten
// entry points (at::_ops::<op>::call) directly, one statement per node, node
// names as variable names, values released after their last use (torch.fx's
// generated Python, in C++). Deterministic byte for byte.
//
//   graph():
//       %x : [#users=1] = placeholder[target=x]
//       %fc_weight : [#users=1] = get_attr[target=fc.weight]
//       %t : [#users=1] = call_function[target=aten::t](args = (%fc_weight,), kwargs = {})
//       %fc_bias : [#users=1] = get_attr[target=fc.bias]
//       %addmm : [#users=1] = call_function[target=aten::addmm](args = (%fc_bias, %x, %t), kwargs = {})
//       return addmm
//
//   at::Tensor forward(at::Tensor x) {
//     fx::check_tensor_input(x, "x", 0, at::ScalarType::Float, at::Device("cpu"), 2, c10::nullopt);
//     at::Tensor& fc_weight = fc_weight_;
//     auto t = at::_ops::t::call(fc_weight);
//     at::Tensor& fc_bias = fc_bias_;
//     auto addmm = at::_ops::addmm::call(fc_bias, x, t, 1, 1);  x.reset();  t.reset();
//     return addmm;
//   }
//
// Parameters, buffers and constants are members (fc_weight_ above), leaf
// modules are fx::LeafModule members called through their boxed forward, and
// registered functions are called through the registry: the class that holds
// the forward binds them (see Forward).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include <ATen/core/jit_type.h>

#include "fx/ir/graph.h"

namespace fx {
namespace codegen {

struct Forward {
  // "at::Tensor forward(at::Tensor x)"
  std::string signature;
  // The statements, each line indented by two spaces, ending in a newline.
  std::string body;
  struct Member {
    std::string name;  // "fc_weight_"
    std::string path;  // "fc.weight"
  };
  // Tensors (at::Tensor members), leaf modules (fx::LeafModule members)
  // and script objects (c10::IValue members: CodegenOptions::objects) the
  // body refers to, in order of first use.
  std::vector<Member> tensors;
  std::vector<Member> leaf_modules;
  std::vector<Member> objects;

  // A graph longer than CodegenOptions::max_nodes_per_function continues
  // in further functions, each ending by calling the next with the live
  // values in an fx::ForwardFrame (codegen/runtime.h):
  //   at::Tensor forward_part_1(fx::ForwardFrame& frame)
  // They are members of the same class as forward.
  struct Part {
    std::string signature;
    std::string body;
  };
  std::vector<Part> parts;

  // Each function: signature + " {\n" + body + "}\n".
  std::string text() const;
};

struct CodegenOptions {
  // Annotate each statement with its value's metadata when known:
  //   auto relu = at::_ops::relu::call(conv2d);  // f32[1, 64, 112, 112]
  bool tensor_meta_comments = false;
  // Check the placeholders' guards at the top of forward.
  bool guards = true;
  // The function's name.
  std::string function_name = "forward";
  // Member names to use for these paths (a class emitting several
  // functions over the same members); other paths get one made from the
  // path ("fc.weight" -> "fc_weight_").
  std::map<std::string, std::string> member_names;
  // Return a tuple or list of tensors as a std::vector<at::Tensor> (a
  // std::tuple of hundreds of elements is slow to compile), and a tuple
  // holding other values too as a std::vector<c10::IValue>.
  bool tensors_as_vector = false;
  // get_attr paths that hold script objects (GraphModuleImpl's object
  // attributes): c10::IValue members, passed to operators boxed.
  std::set<std::string> objects;
  // Split the body after about this many nodes into further functions
  // (Forward::parts), so that compilers cope with very large graphs; 0 never
  // splits. A split waits until every value live across it is a tensor, a
  // tensor list or boxed.
  size_t max_nodes_per_function = 0;
};

// The variable name a member holding the tensor or leaf module at `path`
// gets before de-duplication: "layer1.0.conv1.weight" ->
// "layer1_0_conv1_weight" (then a trailing "_", or "_1_", ... if taken).
std::string member_base_name(const std::string& path);

// `s` as a C++ string literal, quotes included: "layer1.0", "a\"b".
std::string string_literal(const std::string& s);

// The forward of `graph`. Throws fx::GraphError for what C++ cannot express
// (an operator argument of a type the emitter does not know, such as a
// Dimname).
Forward emit_forward(const Graph& graph, const CodegenOptions& options = {});

}  // namespace codegen
}  // namespace fx
