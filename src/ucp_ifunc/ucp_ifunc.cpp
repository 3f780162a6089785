// The research prototype's ifunc API (<threechains/ucp_ifunc.h>) on ThreeChains
// frames, containers and the JIT cache. The buffer layout is in wire.hpp; a
// message keeps, in a 64-byte prefix, the mark and header of its cached form
// (no code), so a later send puts those and the payload, and nothing of the
// message is rewritten while an earlier put of it may still be reading.
#include "jit/payload_abi.hpp"
#include "trust/envelope.hpp"
#include "ucp_ifunc/library_files.hpp"
#include "ucp_ifunc/wire.hpp"

#include <threechains/ifunc.h>
#include <threechains/ucp_ifunc.h>
#include <threechains/container.hpp>
#include <threechains/ifunc.hpp>
#include <threechains/jit_cache.hpp>
#include <threechains/trust.hpp>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace tc = threechains;

struct ucp_ifunc;

namespace {

using tc::ucp_ifunc_wire::CommitMark;
using tc::ucp_ifunc_wire::frame_checksum;
using tc::ucp_ifunc_wire::kFrameStart;
using tc::ucp_ifunc_wire::kMarkMagic;
using tc::ucp_ifunc_wire::kPayloadStart;
constexpr std::size_t kPrefix = 64;  // cached mark + cached header + padding
static_assert(kPrefix % 16 == 0 && kPayloadStart % 16 == 0, "payloads stay 16-byte aligned");

void warn(const std::string& message) {
  std::fprintf(stderr, "threechains ucp_ifunc: %s\n", message.c_str());
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

// One UCX context's ifunc state: its libraries, the code that runs here, and
// whose signatures it accepts. Used from one thread at a time (as the
// prototype's context state; the program's worker is single-threaded too).
// It owns its handles, which live as long as it: deregistration only stops
// new messages (frames of that code may still arrive, and messages still
// send it). Those still in use by a message when the state goes
// (ucp_ifunc_context_release) are detached and die with their last message.
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
    for_each_listed(names, [&](std::string name) { options.imports.allow_symbol(std::move(name)); });
    // Said once per context: what injected code may call beyond the safe set.
    warn(std::string("injected code may also import: ") + names +
         " (THREECHAINS_IFUNC_ALLOW_IMPORTS)");
  }
  if (const char* libraries = std::getenv("THREECHAINS_IFUNC_ALLOW_LIBRARIES")) {
    for_each_listed(libraries,
                    [&](std::string library) { options.imports.allow_library(std::move(library)); });
    warn(std::string("injected code may also load and call libraries: ") + libraries +
         " (THREECHAINS_IFUNC_ALLOW_LIBRARIES)");
  }
  return options;
}

struct ContextState {
  ContextState() : cache(jit_options()) {
    if (const char* keys = std::getenv("THREECHAINS_IFUNC_TRUSTED_KEYS")) {
      for_each_listed(keys, [&](const std::string& path) {
        trust.allow_native_code_signer(tc::PublicKey::load(path));
      });
    }
  }
  ContextState(const ContextState&) = delete;
  ContextState& operator=(const ContextState&) = delete;
  ~ContextState();

  std::string lib_dir;
  tc::JitCache cache;
  tc::Trust trust;  // code signers accepted beyond this context's own libraries
  std::unordered_map<std::string, ucp_ifunc*> by_name;
  // Names whose library failed to load for an arriving frame: not retried per
  // frame (bounded: the names are the peers' choice).
  std::unordered_set<std::string> unloadable;
  static constexpr std::size_t kMaxUnloadable = 256;
  std::unordered_map<tc::CodeId, ucp_ifunc*> by_id;
  // The context's worker if it has exactly one (for the 4-argument poll),
  // kept by the ucp_worker_create / ucp_worker_destroy stand-ins below.
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
  void refresh_sole_worker(ucp_context_h context) {
    const auto state = states.find(context);
    if (state == states.end()) return;
    const auto list = workers.find(context);
    const bool one = list != workers.end() && list->second.size() == 1;
    state->second->sole_worker.store(one ? list->second.front() : nullptr,
                                     std::memory_order_release);
  }
};

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

ucs_status_t failed(const std::string& message, ucs_status_t status) {
  warn(message);
  return status;
}

}  // namespace

// Two-Chains' payload_init: the payload first (payload_abi.hpp).
using payload_first_init_fn = int (*)(void* payload, size_t payload_size, void* source_args,
                                      size_t source_args_size);

struct ucp_ifunc {
  ucp_ifunc(std::string library, tc::Ifunc code, ContextState* state)
      : name(std::move(library)), ifunc(std::move(code)), owner(state) {}

  std::string name;
  tc::Ifunc ifunc;
  // <name>_payload_get_max_size (Two-Chains) or <name>_payload_bound (Three-Chains).
  threechains_payload_get_max_size_fn payload_get_max_size = nullptr;
  void* payload_init = nullptr;  // called in `order`
  tc::PayloadInitOrder order = tc::PayloadInitOrder::source_first;
  // Read off the library's bitcode. If not, the program's first registration
  // sets `order`: a library a peer's frame made us load first must not fix it.
  bool order_from_bitcode = false;
  std::unordered_set<ucp_ep_h> sent_to;  // endpoints that were sent its code
  int registrations = 0;                 // by the program (0: no new messages)
  std::size_t messages = 0;              // live messages made from it
  ContextState* owner;                   // null once its context was released
};

namespace {

// The handle leaves its released context; it is deleted now unless a message
// still refers to it (then ucp_ifunc_msg_free deletes it).
void detach(ucp_ifunc* handle) noexcept {
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

}  // namespace

ContextState::~ContextState() {
  for (auto& [name, handle] : by_name) detach(handle);
}

namespace {

// Where libraries are registered from: the context's directory, else
// $UCX_IFUNC_LIB_DIR, else the installation's (the prototypes read
// UCX_IFUNC_LIB_DIR, /usr/lib by default).
std::string library_directory(const ContextState& state) {
  if (!state.lib_dir.empty()) return state.lib_dir;
  const char* env = std::getenv("UCX_IFUNC_LIB_DIR");
  if (env != nullptr && *env != '\0') return env;
  // <the directory this library is in>/threechains/ifuncs: relocatable, as
  // the .pc files are.
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&library_directory), &info) != 0 &&
      info.dli_fname != nullptr) {
    const std::string self = info.dli_fname;
    const std::size_t slash = self.rfind('/');
    if (slash != std::string::npos) return self.substr(0, slash) + "/threechains/ifuncs";
  }
  return "threechains/ifuncs";
}

// Registers a library already read (trusted: the program's own). Throws Error.
ucp_ifunc* register_ifunc(ContextState& state, const std::string& name, tc::Ifunc ifunc,
                          tc::PayloadInitOrder program_order) {
  // The library's own type says which order its payload_init takes; without
  // bitcode, the program's convention does. Read first: nothing is loaded yet.
  const tc::PayloadInitOrder read = tc::payload_init_order(ifunc.code(), name + "_payload_init");
  auto handle = std::make_unique<ucp_ifunc>(name, ifunc, &state);
  handle->order_from_bitcode = read != tc::PayloadInitOrder::unknown;
  handle->order = handle->order_from_bitcode ? read : program_order;
  // Compiled here too, for its payload functions (and for frames of it that
  // arrive here). Imports the policy refuses fail here, naming the symbol.
  (void)state.cache.load(ifunc.id(), ifunc.codec(), ifunc.code());
  try {
    void* size = state.cache.lookup(ifunc.id(), name + "_payload_get_max_size");
    if (size == nullptr) size = state.cache.lookup(ifunc.id(), name + "_payload_bound");
    handle->payload_get_max_size = reinterpret_cast<threechains_payload_get_max_size_fn>(size);
    handle->payload_init = state.cache.lookup(ifunc.id(), name + "_payload_init");
    state.by_name[name] = handle.get();
    state.by_id[ifunc.id()] = handle.get();
  } catch (...) {  // out of memory: no half-registered library, no code without a handle
    if (const auto it = state.by_name.find(name);
        it != state.by_name.end() && it->second == handle.get())
      state.by_name.erase(it);
    (void)state.cache.evict(ifunc.id());
    throw;
  }
  return handle.release();
}

// The program registers `handle` (again, or one a peer's frame loaded first).
void count_registration(ucp_ifunc* handle, tc::PayloadInitOrder program_order) {
  if (handle->registrations == 0 && !handle->order_from_bitcode) handle->order = program_order;
  ++handle->registrations;
}

// Loads and registers the library `name` of the context's directory (the
// name is valid; library_files.hpp says which files). Throws Error.
ucp_ifunc* register_library(ContextState& state, const std::string& name,
                            tc::PayloadInitOrder program_order) {
  const std::string directory = library_directory(state);
  tc::Ifunc ifunc = tc::ucp_ifunc::load_library_file(directory, name);
  if (ifunc.name() != name) {
    throw tc::Error(tc::errc::bad_container, directory + "/" + name + ".tcc holds ifunc '" +
                                                 ifunc.name() + "', not '" + name + "'");
  }
  return register_ifunc(state, name, std::move(ifunc), program_order);
}

// Code that arrived in a frame, compiled if it may run here: it is the code
// of our own library of that name (registered now if it was not), or it is
// signed by a trusted key. Throws Error.
tc::IfuncMain admit(ContextState& state, const tc::FrameView& view) {
  if (!view.has_code()) {
    throw tc::Error(tc::errc::unknown_code,
                    "a cached frame of code this target does not hold (the source sends code "
                    "with its first message to an endpoint: did the target restart?)");
  }
  const tc::Ifunc arrived =
      tc::Ifunc::from_container(std::vector<std::byte>(view.code().begin(), view.code().end()));
  const std::string& name = arrived.name();
  if (valid_name(name.c_str()) && !state.by_name.contains(name) &&
      !state.unloadable.contains(name)) {
    try {
      // Kept even if the frame's code is not this library's: a peer naming it
      // with other code must not make us load it from disk again per frame.
      (void)register_library(state, name, tc::PayloadInitOrder::source_first);
    } catch (const std::exception&) {
      // Missing, corrupt or not compilable here: not ours to run, and not
      // tried again per frame. Signed code of that name may still run.
      if (state.unloadable.size() < ContextState::kMaxUnloadable) state.unloadable.insert(name);
    }
  }
  // Everything below reads `arrived`, our private copy: the peer can still
  // write the buffer, so bytes checked there could be changed before use.
  if (arrived.id() != view.code_id()) {
    throw tc::Error(tc::errc::code_identity_mismatch,
                    "the frame's code does not hash to the identity its header names");
  }
  if (!state.by_id.contains(arrived.id())) {
    try {
      // Keys named in THREECHAINS_IFUNC_TRUSTED_KEYS are fully trusted:
      // this layer runs no confined code.
      if (tc::check_code_trust(state.trust, arrived.code()) == tc::Confine::yes)
        throw tc::Error(tc::errc::code_refused,
                        "unsigned code runs on ucp_ifunc targets only "
                        "from this target's own libraries");
    } catch (const tc::Error& e) {
      throw tc::Error(tc::errc::code_refused, "code of ifunc '" + name +
                                                  "' that is not this target's own library '" +
                                                  name +
                                                  ".tcc' and is not signed by a key in "
                                                  "THREECHAINS_IFUNC_TRUSTED_KEYS (" +
                                                  e.context() + ")");
    }
    (void)state.cache.load(arrived.id(), arrived.codec(), arrived.code());
    // Said once per code load: which foreign code runs here is worth a line.
    warn("running code of ifunc '" + name + "' that is not this target's own library: it is " +
         "signed by a trusted key");
  }
  return state.cache.find(view.code_id());
}

// A registration's failure as the prototype's callers can tell them apart:
// code the policy refuses is a policy decision, not a bad argument.
ucs_status_t status_of(const tc::Error& e) {
  if (e.is(tc::errc::import_refused) || e.is(tc::errc::code_refused)) return UCS_ERR_REJECTED;
  if (e.is(tc::errc::dependency_not_found)) return UCS_ERR_NO_ELEM;
  if (e.is(tc::errc::io)) return UCS_ERR_IO_ERROR;
  if (e.is(tc::errc::no_image_for_target)) return UCS_ERR_UNSUPPORTED;
  return UCS_ERR_INVALID_PARAM;
}

ucs_status_t refuse_name(const char* name) {
  return failed(std::string("ifunc name '") + (name != nullptr ? name : "(null)") +
                    "' refused: letters, digits, '_' and '-' only",
                UCS_ERR_INVALID_PARAM);
}

ucs_status_t register_by_name(ucp_context_h context, const char* ifunc_name, ucp_ifunc_h* ifunc_p,
                              tc::PayloadInitOrder program_order) {
  if (context == nullptr || ifunc_p == nullptr) return UCS_ERR_INVALID_PARAM;
  *ifunc_p = nullptr;
  if (!valid_name(ifunc_name)) return refuse_name(ifunc_name);
  try {
    ContextState& state = state_of(context);
    const auto it = state.by_name.find(ifunc_name);
    ucp_ifunc* handle =
        it != state.by_name.end() ? it->second : register_library(state, ifunc_name, program_order);
    count_registration(handle, program_order);
    *ifunc_p = handle;
    return UCS_OK;
  } catch (const tc::Error& e) {
    return failed(std::string("register '") + ifunc_name + "': " + e.what(), status_of(e));
  } catch (const std::exception& e) {
    return failed(std::string("register '") + ifunc_name + "': " + e.what(), UCS_ERR_NO_MEMORY);
  }
}

}  // namespace

extern "C" {

ucs_status_t ucp_ifunc_set_lib_dir(ucp_context_h context, const char* directory) {
  if (context == nullptr || directory == nullptr) return UCS_ERR_INVALID_PARAM;
  try {
    state_of(context).lib_dir = directory;
    return UCS_OK;
  } catch (const std::exception& e) {
    return failed(e.what(), UCS_ERR_NO_MEMORY);
  }
}

ucs_status_t ucp_register_ifunc(ucp_context_h context, const char* ifunc_name,
                                ucp_ifunc_h* ifunc_p) {
  return register_by_name(context, ifunc_name, ifunc_p, tc::PayloadInitOrder::source_first);
}

ucs_status_t ucp_register_ifunc_two_chains(ucp_context_h context, const char* ifunc_name,
                                           ucp_ifunc_h* ifunc_p) {
  return register_by_name(context, ifunc_name, ifunc_p, tc::PayloadInitOrder::payload_first);
}

ucs_status_t ucp_register_ifunc_param(ucp_context_h context, ucp_ifunc_reg_param_t param,
                                      ucp_ifunc_h* ifunc_p) {
  return register_by_name(context, param.name, ifunc_p, tc::PayloadInitOrder::source_first);
}

ucs_status_t ucp_register_ifunc_im(ucp_context_h context, ucp_ifunc_reg_param_t param,
                                   ucp_llvm_bc_t* bcs, int n_bcs, char** deps, int n_deps,
                                   ucp_ifunc_h* ifunc_p) {
  if (context == nullptr || ifunc_p == nullptr || bcs == nullptr || n_bcs <= 0 || n_deps < 0 ||
      (deps == nullptr && n_deps > 0)) {
    return UCS_ERR_INVALID_PARAM;
  }
  *ifunc_p = nullptr;
  const char* name = param.name;
  if (!valid_name(name)) return refuse_name(name);
  try {
    ContextState& state = state_of(context);
    tc::IfuncLibrary library{name, {}, {}};
    for (int i = 0; i < n_bcs; ++i) {
      if (bcs[i].triple == nullptr || (bcs[i].bc == nullptr && bcs[i].size != 0))
        return failed("register_im '" + std::string(name) + "': bitcode " + std::to_string(i) +
                          " has no triple or no bytes",
                      UCS_ERR_INVALID_PARAM);
      const auto* bytes = static_cast<const std::byte*>(bcs[i].bc);
      library.images.push_back({bcs[i].triple, tc::CodecId::bitcode,
                                std::vector<std::byte>(bytes, bytes + bcs[i].size)});
    }
    for (int i = 0; i < n_deps; ++i) {
      if (deps[i] == nullptr) return UCS_ERR_INVALID_PARAM;
      library.deps.emplace_back(deps[i]);
    }
    tc::Ifunc ifunc = tc::Ifunc::from_container(tc::pack_container(library));
    ucp_ifunc* handle = nullptr;
    if (const auto it = state.by_name.find(name); it != state.by_name.end()) {
      // The same code again counts as a registration; other code under a
      // name already held (the program's, or one a peer's frame loaded from
      // the directory) is not silently swapped for it.
      if (it->second->ifunc.id() != ifunc.id())
        return failed("register_im '" + std::string(name) + "': a library of that name with " +
                          "other code is already registered in this context",
                      UCS_ERR_ALREADY_EXISTS);
      handle = it->second;
    } else {
      handle = register_ifunc(state, name, std::move(ifunc), tc::PayloadInitOrder::source_first);
    }
    count_registration(handle, tc::PayloadInitOrder::source_first);
    *ifunc_p = handle;
    return UCS_OK;
  } catch (const tc::Error& e) {
    return failed(std::string("register_im '") + name + "': " + e.what(), status_of(e));
  } catch (const std::exception& e) {
    return failed(std::string("register_im '") + name + "': " + e.what(), UCS_ERR_NO_MEMORY);
  }
}

void ucp_deregister_ifunc(ucp_context_h context, ucp_ifunc_h ifunc_h) {
  if (context == nullptr || ifunc_h == nullptr) return;
  try {
    const ContextState* state = existing_state(context);
    if (state == nullptr || ifunc_h->owner != state || ifunc_h->registrations == 0) {
      warn("deregistering an ifunc this context does not hold registered");
      return;
    }
  } catch (const std::exception& e) {
    warn(std::string("deregister: ") + e.what());
    return;
  }
  // Only new messages stop: the code stays loaded for frames of it that are
  // still to arrive (peers were told this target holds it) until the
  // context is released.
  --ifunc_h->registrations;
}

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

void ucp_ifunc_forget_ep(ucp_context_h context, ucp_ep_h ep) {
  if (context == nullptr || ep == nullptr) return;
  try {
    if (ContextState* state = existing_state(context)) {
      for (auto& [name, handle] : state->by_name) handle->sent_to.erase(ep);
    }
  } catch (const std::exception& e) {
    warn(std::string("forget_ep: ") + e.what());
  }
}

ucs_status_t ucp_ifunc_msg_create(ucp_ifunc_h ifunc_h, void* source_args, size_t source_args_size,
                                  ucp_ifunc_msg_t* msg_p) {
  if (msg_p == nullptr) return UCS_ERR_INVALID_PARAM;
  // Whatever happens below, the message is one ucp_ifunc_msg_free takes:
  // the prototypes' programs free it even when the create failed, and
  // theirs is often an uninitialised local.
  *msg_p = ucp_ifunc_msg_t{};
  if (ifunc_h == nullptr) return UCS_ERR_INVALID_PARAM;
  if (ifunc_h->owner == nullptr || ifunc_h->registrations == 0) {
    return failed("msg_create: ifunc '" + ifunc_h->name + "' is not registered",
                  UCS_ERR_INVALID_PARAM);
  }
  // A library's payload functions make what they like of the source
  // arguments, NULL included (the prototypes' benchmarks pass NULL and a
  // size); only a plain copy needs them.
  if (source_args == nullptr && source_args_size != 0 && ifunc_h->payload_init == nullptr) {
    return failed("msg_create: ifunc '" + ifunc_h->name + "' has no " + ifunc_h->name +
                      "_payload_init, so its payload is a copy of the source arguments, and "
                      "they are NULL with a size of " +
                      std::to_string(source_args_size),
                  UCS_ERR_INVALID_PARAM);
  }
  const std::size_t max_payload = ifunc_h->payload_get_max_size != nullptr
                                      ? ifunc_h->payload_get_max_size(source_args, source_args_size)
                                      : source_args_size;
  const std::span<const std::byte> code = ifunc_h->ifunc.code();
  // A frame counts its parts in 32 bits (and the sums below cannot wrap).
  if (max_payload > UINT32_MAX || code.size() > UINT32_MAX) {
    return failed("msg_create: a payload of " + std::to_string(max_payload) + " bytes is over " +
                      "the 4 GiB a frame can carry",
                  UCS_ERR_EXCEEDS_LIMIT);
  }
  const std::size_t bytes = kPrefix + kPayloadStart + max_payload + code.size();
  auto* block = static_cast<std::byte*>(::operator new (bytes, std::align_val_t{16}, std::nothrow));
  if (block == nullptr) return UCS_ERR_NO_MEMORY;
  std::memset(block, 0, kPrefix + kPayloadStart);
  std::byte* frame = block + kPrefix;
  std::byte* payload = frame + kPayloadStart;
  std::size_t payload_size = max_payload;
  if (ifunc_h->payload_init != nullptr) {
    int rc = 0;
    if (ifunc_h->order == tc::PayloadInitOrder::payload_first) {
      rc = reinterpret_cast<payload_first_init_fn>(ifunc_h->payload_init)(
          payload, max_payload, source_args, source_args_size);
    } else {
      rc = reinterpret_cast<threechains_payload_init_fn>(ifunc_h->payload_init)(
          source_args, source_args_size, payload, &payload_size);
    }
    if (rc != 0 || payload_size > max_payload) {
      ::operator delete (block, std::align_val_t{16});
      return failed("'" + ifunc_h->name + "_payload_init' failed", UCS_ERR_CANCELED);
    }
  } else if (source_args_size != 0) {
    // No payload_init: a copy of the source arguments, as much as fits.
    payload_size = std::min(source_args_size, max_payload);
    std::memcpy(payload, source_args, payload_size);
  }
  tc::FrameBuilder full(
      {frame + kFrameStart, sizeof(tc::FrameHeader) + payload_size + code.size()});
  if (full.begin(ifunc_h->ifunc.codec(), ifunc_h->ifunc.id(), 0, payload_size, code.size()) !=
      tc::errc::ok) {  // cannot happen after the checks above; never send a half-built frame
    ::operator delete (block, std::align_val_t{16});
    return UCS_ERR_EXCEEDS_LIMIT;
  }
  full.write_code(code);
  // The cached form's header: the same, without code.
  tc::FrameHeader header{};
  std::memcpy(&header, frame + kFrameStart, sizeof(header));
  header.code_size = 0;
  std::memcpy(block + sizeof(CommitMark), &header, sizeof(header));
  *msg_p = {ifunc_h, frame, kPayloadStart + payload_size + code.size()};
  ++ifunc_h->messages;
  return UCS_OK;
}

ucs_status_t ucp_ifunc_msg_get_payload_ptr(ucp_ifunc_msg_t* msg, void** payload,
                                           size_t* payload_size) {
  if (msg == nullptr || msg->frame == nullptr || payload == nullptr) return UCS_ERR_INVALID_PARAM;
  auto* frame = static_cast<std::byte*>(msg->frame);
  tc::FrameHeader header{};
  std::memcpy(&header, frame + kFrameStart, sizeof(header));
  *payload = frame + kPayloadStart;
  if (payload_size != nullptr) *payload_size = header.payload_size;
  return UCS_OK;
}

void ucp_ifunc_msg_free(ucp_ifunc_msg_t msg) {
  if (msg.frame == nullptr) return;
  ::operator delete (static_cast<std::byte*>(msg.frame) - kPrefix, std::align_val_t{16});
  if (ucp_ifunc* handle = msg.ifunc_h;
      handle != nullptr && --handle->messages == 0 && handle->owner == nullptr) {
    delete handle;  // deregistered while this message lived
  }
}

ucs_status_t ucp_ifunc_send_nbix(ucp_ep_h ep, ucp_ifunc_msg_t msg, uint64_t remote_addr,
                                 ucp_rkey_h rkey) {
  if (ep == nullptr || msg.ifunc_h == nullptr || msg.frame == nullptr) return UCS_ERR_INVALID_PARAM;
  auto* frame = static_cast<std::byte*>(msg.frame);
  std::byte* block = frame - kPrefix;
  std::byte* header = frame + kFrameStart;
  std::byte* payload = frame + kPayloadStart;
  tc::FrameHeader h{};
  std::memcpy(&h, header, sizeof(h));
  bool first = false;
  try {
    first = msg.ifunc_h->sent_to.insert(ep).second;
  } catch (const std::bad_alloc&) {
    return UCS_ERR_NO_MEMORY;
  }
  if (first) {
    // The whole frame, code included, in one put.
    const std::size_t body = h.payload_size + h.code_size;
    const CommitMark mark{kMarkMagic, frame_checksum(header, payload, body),
                          sizeof(tc::FrameHeader) + body};
    std::memcpy(frame, &mark, sizeof(mark));
    const ucs_status_t status = ucp_put_nbi(ep, frame, msg.frame_size, remote_addr, rkey);
    if (UCS_STATUS_IS_ERR(status)) msg.ifunc_h->sent_to.erase(ep);  // its code is still to go
    return status;
  }
  // Cached: the prefix's mark and header, then the payload; the code stays home.
  std::byte* cached_header = block + sizeof(CommitMark);
  const CommitMark mark{kMarkMagic, frame_checksum(cached_header, payload, h.payload_size),
                        sizeof(tc::FrameHeader) + h.payload_size};
  std::memcpy(block, &mark, sizeof(mark));
  ucs_status_t status = ucp_put_nbi(ep, block, kPayloadStart, remote_addr, rkey);
  if (UCS_STATUS_IS_ERR(status) || h.payload_size == 0) return status;
  const ucs_status_t second =
      ucp_put_nbi(ep, payload, h.payload_size, remote_addr + kPayloadStart, rkey);
  return UCS_STATUS_IS_ERR(second) || second == UCS_INPROGRESS ? second : status;
}

ucs_status_t ucp_poll_ifunc(ucp_context_h context, void* buffer, size_t buffer_size,
                            void* target_args, ucp_worker_h worker) {
  if (context == nullptr || buffer == nullptr) return UCS_ERR_INVALID_PARAM;
  if (worker != nullptr) (void)ucp_worker_progress(worker);
  auto* bytes = static_cast<std::byte*>(buffer);
  if (buffer_size < kPayloadStart) return UCS_ERR_INVALID_PARAM;
  auto& magic = *reinterpret_cast<uint64_t*>(bytes);
  if (std::atomic_ref<uint64_t>(magic).load(std::memory_order_acquire) != kMarkMagic) {
    return UCS_ERR_NO_MESSAGE;
  }
  CommitMark mark{};
  std::memcpy(&mark, bytes, sizeof(mark));
  const auto clear = [&] {
    std::memset(bytes + sizeof(uint64_t), 0, sizeof(CommitMark) - sizeof(uint64_t));
    std::atomic_ref<uint64_t>(magic).store(0, std::memory_order_release);
  };
  if (mark.frame_bytes > buffer_size - kFrameStart) {
    clear();
    return failed("frame rejected: " + std::to_string(mark.frame_bytes) + " bytes do not fit the " +
                      std::to_string(buffer_size) + "-byte buffer",
                  UCS_ERR_CANCELED);
  }
  if (mark.frame_bytes < sizeof(tc::FrameHeader)) return UCS_ERR_NO_MESSAGE;  // still landing
  std::byte* header = bytes + kFrameStart;
  if (frame_checksum(header, header + sizeof(tc::FrameHeader),
                     mark.frame_bytes - sizeof(tc::FrameHeader)) != mark.checksum) {
    return UCS_ERR_NO_MESSAGE;  // not all of it has landed yet
  }
  tc::FrameView view;
  if (const tc::errc e = tc::FrameView::parse({header, mark.frame_bytes}, view);
      e != tc::errc::ok || view.size() != mark.frame_bytes) {
    clear();
    return failed(e != tc::errc::ok ? tc::FrameView::describe(e, {header, mark.frame_bytes})
                                    : "frame rejected: its header and its mark disagree on length",
                  UCS_ERR_CANCELED);
  }
  ContextState* found = nullptr;
  try {
    found = &state_of(context);  // made on first use: can fail (memory, a bad key file)
  } catch (const std::exception& e) {
    clear();
    return failed(std::string("frame rejected: ") + e.what(), UCS_ERR_CANCELED);
  }
  ContextState& state = *found;
  // Tiered code compiled meanwhile takes over here, before this frame runs;
  // a failed tier-1 compile leaves tier 0 running and is not this frame's error.
  if (state.cache.compiles_in_progress()) [[unlikely]] {
    try {
      (void)state.cache.promote_ready();
    } catch (const std::exception&) {  // tier 0 runs on; nothing may cross the C ABI
    }
  }
  tc::IfuncMain entry = state.cache.find(view.code_id());
  if (entry == nullptr) [[unlikely]] {
    try {
      entry = admit(state, view);
    } catch (const std::exception& e) {
      clear();
      return failed(std::string("frame rejected: ") + e.what(), UCS_ERR_CANCELED);
    }
  }
  state.cache.count_call(view.code_id());
  // Cleared before it runs, as the prototype did: a frame put here while it
  // runs (one it caused: a forwarded chase's answer, a ping-pong's reply)
  // must not be erased after it. The payload stays where it is meanwhile.
  const std::size_t payload_size = view.payload().size();
  clear();
  entry(bytes + kPayloadStart, payload_size, target_args);
  return UCS_OK;
}

ucs_status_t ucp_poll_ifunc_context(ucp_context_h context, void* buffer, size_t buffer_size,
                                    void* target_args) {
  if (context == nullptr) return UCS_ERR_INVALID_PARAM;
  ucp_worker_h worker = nullptr;
  try {
    ContextState& state = state_of(context);
    worker = state.sole_worker.load(std::memory_order_acquire);
    if (worker == nullptr && !state.warned_no_worker) [[unlikely]] {
      state.warned_no_worker = true;
      warn(
          "ucp_poll_ifunc without a worker progresses the context's worker only when it has "
          "exactly one that this library saw made (link libthreechains_ucp_ifunc before "
          "libucp): none progressed, so puts that need the target's progress (tcp) will not "
          "land; pass the worker (the 5-argument form)");
    }
  } catch (const std::exception& e) {
    return failed(std::string("poll: ") + e.what(), UCS_ERR_NO_MEMORY);
  }
  return ucp_poll_ifunc(context, buffer, buffer_size, target_args, worker);
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
