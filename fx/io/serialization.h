// Saving a GraphModule to one file and loading it back.
//
//   fx::GraphModule gm = fx::symbolic_trace(model, x);
//   fx::fuse_conv_bn(gm);
//   fx::save(gm, "resnet18.fx");                 // later, or in another program:
//   fx::GraphModule loaded = fx::load("resnet18.fx");
//   loaded(x)  // == gm(x), bit for bit
//
// The file holds everything a GraphModule is made of:
//   - the graph, as the textual IR (Graph::to_string; fx/io/parser.h reads it),
//   - its parameters and buffers by qualified path (requires_grad kept),
//   - its init steps (the graphs that recompute folded weights; they run
//     again on load, so run_init() keeps working),
//   - the training mode the graph was traced in,
//   - node meta under the well-known keys: tensor_meta, tensor_meta_list,
//     module_path, stack_trace and guard (so the loaded module checks its
//     inputs as the traced one did). Keys that passes define for themselves
//     are not saved.
// It is a torch.save-compatible archive: in Python, torch.load("resnet18.fx")
// returns a dict with the entries "format", "version", "graph", "parameters",
// "buffers", "leaf_modules", "init_steps", "traced_training" and "meta".
//
// What cannot be saved, because it is C++ code rather than data:
//   - leaf modules (call_module nodes): pass them to load in
//     attributes.modules, e.g. fx::make_leaf_module(model->lstm);
//   - registered functions (fx::wrap): register them in the loading program
//     before calling load.
// torch.fx differs here by pickling the generated Python code; node meta is
// lost there and kept here.
#pragma once

#include <iosfwd>
#include <string>

#include "fx/runtime/graph_module.h"

namespace fx {

// Writes `gm` to `path`, replacing an existing file only once the new one is
// complete. The bytes depend only on the module's contents. Throws
// fx::GraphError if the file cannot be written.
void save(const GraphModuleImpl& gm, const std::string& path);
inline void save(const GraphModule& gm, const std::string& path) {
  save(*gm, path);
}

// The same bytes, to a stream (a buffer, a socket, an archive of one's
// own), as torch::save takes one. Throws fx::GraphError if the stream
// refuses them.
void save(const GraphModuleImpl& gm, std::ostream& out);
inline void save(const GraphModule& gm, std::ostream& out) { save(*gm, out); }

// Reads a GraphModule written by fx::save. Entries of `attributes` win over
// the file's (e.g. new weights) and supply its leaf modules. Throws
//   fx::ParseError (with line and column in the graph text) if the saved
//     graph is malformed, e.g. edited by hand;
//   fx::GraphError naming the file and the problem if it is missing,
//     truncated, not written by fx::save, or needs a leaf module or
//     registered function this program lacks.
GraphModule load(const std::string& path, Attributes attributes = {});
// The same from what fx::save wrote to a stream, read to its end; errors
// name "the stream" where the others name the file.
GraphModule load(std::istream& in, Attributes attributes = {});

}  // namespace fx
