// The dispatcher fallback on DeferredInit, the key every proxy carries and
// that a trace includes for its whole thread: it hands each operator called
// on a proxy (or while tracing) to the thread's session, which records it.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include "absl/strings/str_cat.h"
#include "fx/ir/errors.h"
#include "fx/trace/internal/proxy.h"
#include "fx/trace/internal/session.h"

namespace fx {
namespace {

using internal::current_session;
using internal::op_name;

void fallback(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
              torch::jit::Stack* stack) {
  c10::impl::ExcludeDispatchKeyGuard exclude(c10::DispatchKey::DeferredInit);
  Tracer::Session* session = current_session;
  if (session == nullptr) {
    size_t n = op.schema().arguments().size();
    for (const c10::IValue& v : torch::jit::last(*stack, n)) {
      if (v.isTensor() && internal::as_proxy(v.toTensor())) {
        throw TraceError(absl::StrCat(
            op_name(op),
            " was called on a proxy tensor after its trace ended (or on "
            "another thread): a module kept a tensor from tracing. Do not "
            "store tensors computed in forward on the module."));
      }
    }
    // Not one of ours (another library using DeferredInit): pass it on.
    op.redispatchBoxed(
        keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER,
                                   c10::DispatchKey::DeferredInit),
        stack);
    return;
  }
  session->record(op, stack);
}

TORCH_LIBRARY_IMPL(_, DeferredInit, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
}

}  // namespace
}  // namespace fx
