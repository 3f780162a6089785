// Errors: one exception type for the whole library, keeping the UCX status or
// the library's own error code, so callers can branch on what went wrong.
#pragma once

#include <ucs/type/status.h>

#include <optional>
#include <string>
#include <system_error>

namespace threechains {

// What can go wrong outside UCX itself. Each value names the failed rule.
enum class errc {
  ok = 0,
  bad_magic,               // a frame does not start with the ThreeChains magic
  bad_version,             // a frame of a protocol version this build does not speak
  bad_codec,               // a frame names a codec this build does not know
  truncated_frame,         // header sizes point beyond the bytes that arrived
  bad_sequence,            // a frame's sequence does not match its slot's commit word
  code_identity_mismatch,  // a code section whose hash is not the identity it claims
  frame_too_large,         // a frame does not fit in one ring slot
  bad_container,           // a code container that cannot be parsed
  no_image_for_target,     // a container without an image for this process's triple
  jit_failed,              // compiling or linking the code failed
  symbol_not_found,        // the entry point or an external symbol is missing
  dependency_not_found,    // a shared library an ifunc needs cannot be loaded
  unknown_code,            // the source no longer holds the code a target asked for
  protocol,                // a control message that breaks the connection protocol
  invalid_argument,        // a call was given an argument it cannot use
  peer_gone,               // the process at the other end went away
  timeout,                 // a bounded wait ran out
  io,                      // a file could not be read or written
  peer_refused,            // a peer that did not prove a trusted identity
  code_refused,            // code that is unsigned, tampered, or signed by an untrusted key
  import_refused,          // code that imports what the target's ImportPolicy does not allow
  limit_exceeded,          // a request beyond one of the Receiver's configured limits
  code_trapped,            // confined code broke a rule and was stopped (confinement.hpp)
  gpu_failed,              // GPU code could not run: no GPU, driver, PTX JIT, kernel fault, timeout
};

// The categories of the library's error codes (defined in the library, so
// there is one of each in a process: codes compare by category address).
[[nodiscard]] const std::error_category& threechains_category() noexcept;
// UCX statuses are negative ints; the category keeps them as they are.
[[nodiscard]] const std::error_category& ucs_category() noexcept;

[[nodiscard]] inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), threechains_category()};
}

[[nodiscard]] inline std::error_code make_error_code(ucs_status_t s) noexcept {
  return {static_cast<int>(s), ucs_category()};
}

// The library's one exception: a std::system_error whose code() is either a
// ucs_status_t (ucs_category) or an errc (threechains_category). what() is
// "<context>: <the code's message>", the message once.
class Error : public std::system_error {
 public:
  Error(errc e, const std::string& what) : std::system_error(make_error_code(e), what) {}
  Error(ucs_status_t s, const std::string& what) : std::system_error(make_error_code(s), what) {}

  [[nodiscard]] bool is(errc e) const noexcept { return code() == make_error_code(e); }
  // what() without the code's message at its end: the context alone, to wrap
  // into another Error without saying the message twice.
  [[nodiscard]] std::string context() const;
  // The UCX status this error carries, if it came from UCX.
  [[nodiscard]] std::optional<ucs_status_t> ucs_status() const noexcept {
    if (code().category() != ucs_category()) return std::nullopt;
    return static_cast<ucs_status_t>(code().value());
  }
};

// The one checking function for every UCX status on set-up paths.
// UCS_OK and UCS_INPROGRESS are not errors.
inline void check(ucs_status_t status, const char* what) {
  if (status != UCS_OK && status != UCS_INPROGRESS) [[unlikely]] {
    throw Error(status, what);  // std::system_error appends the status text
  }
}

}  // namespace threechains

template <>
struct std::is_error_code_enum<threechains::errc> : std::true_type {};
