// fx for LibTorch: capture and transform torch::nn::Module programs.
//
//   #include "fx/fx.h"
//
//   fx::GraphModule gm = fx::symbolic_trace(model, example_input);  // trace
//   for (fx::Node* n : gm->graph().nodes()) { ... }                  // inspect, edit
//   gm->recompile();
//   at::Tensor y = gm(x).toTensor();                                 // run
//
// Parts, each usable alone:
//   fx/ir/graph.h                the IR: Graph, Node, Argument, Target
//   fx/trace/tracer.h            symbolic_trace, Tracer, fx::call, fx::wrap
//   fx/io/parser.h               parse_graph: the printed graph read back
//   fx/io/serialization.h        save / load a GraphModule to / from one file
//   fx/runtime/graph_module.h    GraphModule: a torch::nn::Module running a
//                                graph
//   fx/runtime/specializations.h SpecializationCache: a GraphModule per
//                                input shape, made on first sight
//   fx/emit/cpp_code.h           a graph as C++ (what gm->code() prints)
// Above this layer, included on their own:
//   interpreter/                 Interpreter, Transformer, ShapeProp
//   passes/                      the passes, PassManager, cost model, pictures
//   codegen/                     classes generated at build time
//                                (fx_cc_library)
//   fx/torchscript/torchscript.h TorchScript in (symbolic_trace of a
//                                torch::jit::Module) and out (to_torchscript);
//                                not included here, as it pulls in
//                                TorchScript's headers
#pragma once

#include "fx/io/parser.h"
#include "fx/io/serialization.h"
#include "fx/ir/errors.h"
#include "fx/ir/graph.h"
#include "fx/runtime/graph_module.h"
#include "fx/runtime/specializations.h"
#include "fx/trace/control_flow.h"
#include "fx/trace/tracer.h"
