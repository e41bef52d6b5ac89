#include "codegen/runtime.h"

#include <ATen/ATen.h>
#include <torch/serialize.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "fx/io/internal/files.h"
#include "fx/ir/errors.h"

namespace fx {

TensorMap named_tensors(const torch::nn::Module& module) {
  TensorMap out;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    out.emplace(item.key(), item.value());
  }
  for (const auto& item : module.named_buffers(/*recurse=*/true)) {
    if (item.value().defined()) out.emplace(item.key(), item.value());
  }
  return out;
}

c10::IValue object_list(std::vector<c10::IValue> objects) {
  c10::TypePtr type =
      objects.empty() ? c10::AnyType::get() : objects.front().type();
  c10::impl::GenericList list(type);
  for (c10::IValue& o : objects) list.push_back(std::move(o));
  return list;
}

void save_tensors(const TensorMap& tensors, const std::string& path) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, tensor] : tensors) {
    dict.insert(name, tensor.detach());
  }
  std::vector<char> bytes = torch::pickle_save(c10::IValue(dict));
  write_file_atomically(path, std::string(bytes.data(), bytes.size()));
}

TensorMap load_tensors(const std::string& path) {
  const std::string file = read_file(path, "load_tensors");
  c10::IValue value;
  std::string problem;
  try {
    std::optional<c10::IValue> loaded = checked_pickle_load(file, &problem);
    if (loaded) value = std::move(*loaded);
  } catch (const c10::Error& e) {
    problem = e.what_without_backtrace();
  } catch (const std::exception& e) {
    problem = e.what();
  }
  if (!problem.empty()) {
    throw GraphError(absl::StrCat("load_tensors: '", path,
                                  "' is not a tensor file written by "
                                  "fx::save_tensors: ",
                                  problem));
  }
  if (!value.isGenericDict()) {
    throw GraphError(absl::StrCat("load_tensors: '", path,
                                  "' holds a ", value.tagKind(),
                                  ", not a dict of tensors"));
  }
  TensorMap out;
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString() || !entry.value().isTensor()) {
      throw GraphError(absl::StrCat("load_tensors: '", path,
                                    "' has an entry that is not a name and a "
                                    "tensor"));
    }
    out.emplace(entry.key().toStringRef(), entry.value().toTensor());
  }
  return out;
}

at::Tensor bind_tensor(const TensorMap& tensors, const std::string& path,
                       c10::ScalarType dtype, std::vector<int64_t> sizes,
                       const char* who) {
  auto it = tensors.find(path);
  if (it == tensors.end() || !it->second.defined()) {
    throw GraphError(absl::StrCat(
        who, ": no tensor '", path,
        "' among the given tensors: pass the traced model's "
        "(fx::named_tensors(model)) or the weights file written with the "
        "code (fx::load_tensors)"));
  }
  const at::Tensor& t = it->second;
  if (t.scalar_type() != dtype || t.sizes() != c10::IntArrayRef(sizes)) {
    throw GraphError(absl::StrCat(
        who, ": tensor '", path, "' is ", c10::toString(t.scalar_type()),
        "[", absl::StrJoin(t.sizes(), ", "), "] but the code was generated "
        "for ", c10::toString(dtype), "[", absl::StrJoin(sizes, ", "),
        "]: generate it again from this model"));
  }
  return t;
}

at::Tensor bind_tensor(const TensorMap& tensors, const BoundTensor& spec,
                       const char* who) {
  return bind_tensor(tensors, spec.path, spec.dtype,
                     std::vector<int64_t>(spec.sizes, spec.sizes + spec.dim),
                     who);
}

LeafModule bind_leaf_module(const LeafModuleMap& modules,
                            const std::string& path, const char* who) {
  auto it = modules.find(path);
  if (it == modules.end() || !it->second.module || !it->second.forward) {
    throw GraphError(absl::StrCat(
        who, ": no leaf module '", path,
        "' among the given leaf modules: pass it, e.g. "
        "{{\"", path, "\", fx::make_leaf_module(model->...)}}"));
  }
  return it->second;
}

const Function& bind_function(const std::string& name, const char* who) {
  const Function* f = find_function(name);
  if (f == nullptr) {
    throw GraphError(absl::StrCat(
        who, ": no function '", name,
        "' is registered: link the code that calls fx::wrap for it"));
  }
  return *f;
}

at::Tensor embedded_tensor(const unsigned char* data, size_t size,
                           c10::ScalarType dtype, std::vector<int64_t> sizes) {
  at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(dtype));
  if (static_cast<size_t>(t.nbytes()) != size) {
    throw GraphError("embedded_tensor: the data does not match the shape");
  }
  if (size > 0) std::memcpy(t.data_ptr(), data, size);
  return t;
}

}  // namespace fx
