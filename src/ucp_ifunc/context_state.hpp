// The prototypes' API, inside: one UCX context's state (its libraries, the
// code that runs here, whose signatures it accepts), the registry of every
// context's state, and the handle an ifunc's registration returns. Shared by
// the files of src/ucp_ifunc/: context_state.cpp (the state and the
// registry), registration.cpp, messages.cpp and poll.cpp (the C calls).
#pragma once

#include "jit/payload_abi.hpp"

#include <threechains/ifunc.h>
#include <threechains/ucp_ifunc.h>
#include <threechains/ifunc.hpp>
#include <threechains/jit_cache.hpp>
#include <threechains/trust.hpp>

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

struct ucp_ifunc;

namespace threechains {
// This library's own: its ABI is the C calls of ucp_ifunc.h. Its functions
// are hidden, so a call from one of its files to another stays a direct call
// (its types stay visible: the C calls' handle, ucp_ifunc, holds them).
namespace ucp_ifunc_detail {

// Prints `message` on stderr, prefixed: the prototypes' API reports by status
// code and says why here.
[[gnu::visibility("hidden")]] void warn(const std::string& message);
// `message` said, `status` returned.
[[gnu::visibility("hidden")]] ucs_status_t failed(const std::string& message, ucs_status_t status);
// A name that cannot reach outside the library directory.
[[nodiscard, gnu::visibility("hidden")]] bool valid_name(const char* name);

// One UCX context's ifunc state: its libraries, the code that runs here, and
// whose signatures it accepts. Used from one thread at a time (as the
// prototype's context state; the program's worker is single-threaded too).
// It owns its handles, which live as long as it: deregistration only stops
// new messages (frames of that code may still arrive, and messages still
// send it). Those still in use by a message when the state goes
// (ucp_ifunc_context_release) are detached and die with their last message.
struct ContextState {
  ContextState();  // reads THREECHAINS_IFUNC_* (context_state.cpp)
  ContextState(const ContextState&) = delete;
  ContextState& operator=(const ContextState&) = delete;
  ~ContextState();

  std::string lib_dir;
  JitCache cache;
  Trust trust;  // code signers accepted beyond this context's own libraries
  std::unordered_map<std::string, ::ucp_ifunc*> by_name;
  // Names whose library failed to load for an arriving frame: not retried per
  // frame (bounded: the names are the peers' choice).
  std::unordered_set<std::string> unloadable;
  static constexpr std::size_t kMaxUnloadable = 256;
  std::unordered_map<CodeId, ::ucp_ifunc*> by_id;
  // The context's worker if it has exactly one (for the 4-argument poll),
  // kept by the ucp_worker_create / ucp_worker_destroy stand-ins (context_state.cpp).
  std::atomic<ucp_worker_h> sole_worker{nullptr};
  bool warned_no_worker = false;
};

// Every context's state. UCX gives no hook on ucp_cleanup, so a state lives
// until ucp_ifunc_context_release or the end of the process; `generation`
// changes on every release so no thread keeps a cached pointer to one.
struct Registry {
  std::mutex mutex;
  std::unordered_map<ucp_context_h, std::unique_ptr<ContextState>> states;
  std::atomic<uint64_t> generation{1};
  // Every context's live workers, as ucp_worker_create made them.
  std::unordered_map<ucp_context_h, std::vector<ucp_worker_h>> workers;

  // Called with `mutex` held: the state's view of its context's workers.
  void refresh_sole_worker(ucp_context_h context);
};

[[gnu::visibility("hidden")]] Registry& registry();
// The state of `context`, made on first use (which can throw: memory, a bad
// key file in THREECHAINS_IFUNC_TRUSTED_KEYS).
[[gnu::visibility("hidden")]] ContextState& state_of(ucp_context_h context);
// The state of `context` if it has one; never makes one (a released
// context's calls must not bring it back).
[[gnu::visibility("hidden")]] ContextState* existing_state(ucp_context_h context);
// The handle leaves its released context; it is deleted now unless a message
// still refers to it (then ucp_ifunc_msg_free deletes it).
[[gnu::visibility("hidden")]] void detach(::ucp_ifunc* handle) noexcept;

// Loads and registers the library `name` of the context's directory (the
// name is valid; library_files.hpp says which files). Throws Error.
[[gnu::visibility("hidden")]] ::ucp_ifunc* register_library(ContextState& state,
                                                            const std::string& name,
                                                            PayloadInitOrder program_order);

}  // namespace ucp_ifunc_detail
}  // namespace threechains

// Two-Chains' payload_init: the payload first (payload_abi.hpp).
using payload_first_init_fn = int (*)(void* payload, size_t payload_size, void* source_args,
                                      size_t source_args_size);

struct ucp_ifunc {
  ucp_ifunc(std::string library, threechains::Ifunc code,
            threechains::ucp_ifunc_detail::ContextState* state)
      : name(std::move(library)), ifunc(std::move(code)), owner(state) {}

  std::string name;
  threechains::Ifunc ifunc;
  // <name>_payload_get_max_size (Two-Chains) or <name>_payload_bound (Three-Chains).
  threechains_payload_get_max_size_fn payload_get_max_size = nullptr;
  void* payload_init = nullptr;  // called in `order`
  threechains::PayloadInitOrder order = threechains::PayloadInitOrder::source_first;
  // Read off the library's bitcode. If not, the program's first registration
  // sets `order`: a library a peer's frame made us load first must not fix it.
  bool order_from_bitcode = false;
  std::unordered_set<ucp_ep_h> sent_to;                // endpoints that were sent its code
  int registrations = 0;                               // by the program (0: no new messages)
  std::size_t messages = 0;                            // live messages made from it
  threechains::ucp_ifunc_detail::ContextState* owner;  // null once its context was released
};
