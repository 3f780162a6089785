// The prototypes' API: each UCX context's state, made on first use and kept
// until ucp_ifunc_context_release; the stand-ins in front of UCX's worker
// calls that tell the 4-argument poll a context's worker.
#include "ucp_ifunc/context_state.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <dlfcn.h>

namespace tc = threechains;
using namespace tc::ucp_ifunc_detail;  // this room's own internals (context_state.hpp)

namespace {

// Calls `take` with each entry of a `:`-separated list (empty ones skipped).
template <class Take>
void for_each_listed(const std::string& list, Take take) {
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t end = std::min(list.find(':', start), list.size());
    if (end > start) take(list.substr(start, end - start));
    start = end + 1;
  }
}

// What code loaded by this layer may import: the safe set, the prototype's
// own calls an ifunc uses to send one onward (its pointer chase does), and
// what the operator names: symbols in THREECHAINS_IFUNC_ALLOW_IMPORTS,
// libraries (sonames or absolute paths, as ImportPolicy::allow_library
// takes them) in THREECHAINS_IFUNC_ALLOW_LIBRARIES.
tc::JitOptions jit_options() {
  tc::JitOptions options;
  options.imports.allow_symbol("ucp_ifunc_msg_get_payload_ptr").allow_symbol("ucp_ifunc_send_nbix");
  if (const char* names = std::getenv("THREECHAINS_IFUNC_ALLOW_IMPORTS")) {
    for_each_listed(names,
                    [&](std::string name) { options.imports.allow_symbol(std::move(name)); });
    // Said once per context: what injected code may call beyond the safe set.
    warn(std::string("injected code may also import: ") + names +
         " (THREECHAINS_IFUNC_ALLOW_IMPORTS)");
  }
  if (const char* libraries = std::getenv("THREECHAINS_IFUNC_ALLOW_LIBRARIES")) {
    for_each_listed(
        libraries, [&](std::string library) { options.imports.allow_library(std::move(library)); });
    warn(std::string("injected code may also load and call libraries: ") + libraries +
         " (THREECHAINS_IFUNC_ALLOW_LIBRARIES)");
  }
  return options;
}

}  // namespace

namespace threechains::ucp_ifunc_detail {

void warn(const std::string& message) {
  std::fprintf(stderr, "threechains ucp_ifunc: %s\n", message.c_str());
}

ucs_status_t failed(const std::string& message, ucs_status_t status) {
  warn(message);
  return status;
}

// A name that cannot reach outside the library directory.
bool valid_name(const char* name) {
  if (name == nullptr || *name == '\0' || std::strlen(name) > 200) return false;
  for (const char* c = name; *c != '\0'; ++c) {
    const bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                    (*c >= '0' && *c <= '9') || *c == '_' || *c == '-';
    if (!ok) return false;
  }
  return true;
}

ContextState::ContextState() : cache(jit_options()) {
  if (const char* keys = std::getenv("THREECHAINS_IFUNC_TRUSTED_KEYS")) {
    for_each_listed(keys, [&](const std::string& path) {
      trust.allow_native_code_signer(tc::PublicKey::load(path));
    });
  }
}

ContextState::~ContextState() {
  for (auto& [name, handle] : by_name) detach(handle);
}

void Registry::refresh_sole_worker(ucp_context_h context) {
  const auto state = states.find(context);
  if (state == states.end()) return;
  const auto list = workers.find(context);
  const bool one = list != workers.end() && list->second.size() == 1;
  state->second->sole_worker.store(one ? list->second.front() : nullptr, std::memory_order_release);
}

Registry& registry() {
  static auto* const everything = new Registry;  // never destroyed: used until exit
  return *everything;
}

ContextState& state_of(ucp_context_h context) {
  thread_local ucp_context_h last_context = nullptr;
  thread_local ContextState* last_state = nullptr;
  thread_local uint64_t last_generation = 0;
  Registry& all = registry();
  const uint64_t generation = all.generation.load(std::memory_order_acquire);
  if (context == last_context && generation == last_generation) [[likely]]
    return *last_state;
  std::lock_guard lock(all.mutex);
  std::unique_ptr<ContextState>& state = all.states[context];
  if (!state) {
    state = std::make_unique<ContextState>();
    all.refresh_sole_worker(context);
  }
  last_context = context;
  last_state = state.get();
  last_generation = generation;
  return *state;
}

// The handle leaves its released context; it is deleted now unless a message
// still refers to it (then ucp_ifunc_msg_free deletes it).
void detach(::ucp_ifunc* handle) noexcept {
  handle->owner = nullptr;
  if (handle->messages == 0) delete handle;
}

// The state of `context` if it has one; never makes one (a released
// context's calls must not bring it back).
ContextState* existing_state(ucp_context_h context) {
  Registry& all = registry();
  std::lock_guard lock(all.mutex);
  const auto it = all.states.find(context);
  return it == all.states.end() ? nullptr : it->second.get();
}

}  // namespace threechains::ucp_ifunc_detail

extern "C" {

void ucp_ifunc_context_release(ucp_context_h context) {
  if (context == nullptr) return;
  std::unique_ptr<ContextState> state;
  {
    Registry& all = registry();
    std::lock_guard lock(all.mutex);
    const auto it = all.states.find(context);
    if (it == all.states.end()) return;
    state = std::move(it->second);
    all.states.erase(it);
    // Called last for the context: UCX may give its address to a new one.
    all.workers.erase(context);
    all.generation.fetch_add(1, std::memory_order_acq_rel);
  }
  // Destroyed outside the lock: it frees JIT'd code and detaches the handles.
}

// Stand-ins in front of UCX's worker calls, so that the 4-argument poll knows
// each context's worker: each calls UCX's own (the next definition in the
// lookup order) and notes the result. They change nothing else.
ucs_status_t ucp_worker_create(ucp_context_h context, const ucp_worker_params_t* params,
                               ucp_worker_h* worker_p) {
  using create_fn = ucs_status_t (*)(ucp_context_h, const ucp_worker_params_t*, ucp_worker_h*);
  static const auto next = reinterpret_cast<create_fn>(dlsym(RTLD_NEXT, "ucp_worker_create"));
  if (next == nullptr) return UCS_ERR_UNSUPPORTED;  // no libucp after us: cannot happen linked
  const ucs_status_t status = next(context, params, worker_p);
  if (status != UCS_OK || worker_p == nullptr) return status;
  try {
    Registry& all = registry();
    std::lock_guard lock(all.mutex);
    all.workers[context].push_back(*worker_p);
    all.refresh_sole_worker(context);
  } catch (const std::exception&) {  // unknown to the 4-argument poll; the worker is fine
  }
  return status;
}

void ucp_worker_destroy(ucp_worker_h worker) {
  using destroy_fn = void (*)(ucp_worker_h);
  static const auto next = reinterpret_cast<destroy_fn>(dlsym(RTLD_NEXT, "ucp_worker_destroy"));
  try {
    Registry& all = registry();
    std::lock_guard lock(all.mutex);
    for (auto it = all.workers.begin(); it != all.workers.end(); ++it) {
      auto& list = it->second;
      if (const auto found = std::find(list.begin(), list.end(), worker); found != list.end()) {
        list.erase(found);
        const ucp_context_h context = it->first;
        if (list.empty()) all.workers.erase(it);
        all.refresh_sole_worker(context);
        break;
      }
    }
  } catch (const std::exception&) {  // the worker is destroyed all the same
  }
  if (next != nullptr) next(worker);
}

}  // extern "C"
