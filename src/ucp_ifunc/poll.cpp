// The prototypes' API: a target's poll of its buffer. A frame that landed
// whole is checked, its code admitted if it is new here (the target's own
// library of that name, or code signed by a trusted key), and run.
#include "trust/envelope.hpp"
#include "ucp_ifunc/context_state.hpp"
#include "ucp_ifunc/wire.hpp"

#include <threechains/container.hpp>

#include <atomic>
#include <cstring>

namespace tc = threechains;
using namespace tc::ucp_ifunc_detail;  // this room's own internals (context_state.hpp)

namespace {

using namespace tc::ucp_ifunc_wire;  // the buffer layout (wire.hpp)

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

}  // namespace

extern "C" {

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

}  // extern "C"
