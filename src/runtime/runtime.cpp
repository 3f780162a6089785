// The C runtime for injected code: thin entry points that forward to the Node
// polling on this thread. Exported with C linkage so the JIT resolves them from
// the process.
#include <threechains/runtime.h>
#include "runtime/hooks.hpp"

#include <utility>

namespace {
// initial-exec: a plain load, not a __tls_get_addr call, on every dispatch of a
// Node (the library is linked at start-up, where static TLS is always there).
[[gnu::tls_model("initial-exec")]] thread_local const threechains::detail::RuntimeHooks* current =
    nullptr;
}  // namespace

namespace threechains::detail {
const RuntimeHooks* exchange_runtime_hooks(const RuntimeHooks* hooks) noexcept {
  return std::exchange(current, hooks);
}
}  // namespace threechains::detail

extern "C" {

int64_t threechains_rank(void) {
  return current ? current->rank(current->node) : -1;
}
int64_t threechains_ranks(void) {
  return current ? current->ranks(current->node) : 0;
}
int64_t threechains_origin(void) {
  return current ? current->origin(current->node) : -1;
}

int threechains_send_self(int64_t rank, const void* payload, size_t payload_size) {
  return current ? current->send_self(current->node, rank, payload, payload_size) : -1;
}

int threechains_send_named(int64_t rank, const char* name, const void* payload,
                           size_t payload_size) {
  return current ? current->send_named(current->node, rank, name, payload, payload_size) : -1;
}

void* threechains_lookup(const char* name) {
  return current ? current->lookup(current->node, name) : nullptr;
}
}
