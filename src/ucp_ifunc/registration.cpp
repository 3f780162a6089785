// The prototypes' API: registering an ifunc (by name from the library
// directory, or from bitcode in memory), deregistering it, and forgetting
// which endpoints hold its code.
#include "jit/payload_abi.hpp"
#include "ucp_ifunc/context_state.hpp"
#include "ucp_ifunc/library_files.hpp"

#include <threechains/container.hpp>

#include <cstdlib>
#include <cstring>

#include <dlfcn.h>

namespace tc = threechains;
using namespace tc::ucp_ifunc_detail;  // this room's own internals (context_state.hpp)

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

namespace threechains::ucp_ifunc_detail {

// Loads and registers the library `name` of the context's directory (the
// name is valid; library_files.hpp says which files). Throws Error.
::ucp_ifunc* register_library(ContextState& state, const std::string& name,
                              tc::PayloadInitOrder program_order) {
  const std::string directory = library_directory(state);
  tc::Ifunc ifunc = tc::ucp_ifunc::load_library_file(directory, name);
  if (ifunc.name() != name) {
    throw tc::Error(tc::errc::bad_container, directory + "/" + name + ".tcc holds ifunc '" +
                                                 ifunc.name() + "', not '" + name + "'");
  }
  return register_ifunc(state, name, std::move(ifunc), program_order);
}

}  // namespace threechains::ucp_ifunc_detail

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

}  // extern "C"
