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

[[nodiscard]] inline const std::error_category& threechains_category() noexcept {
  struct category final : std::error_category {
    [[nodiscard]] const char* name() const noexcept override { return "threechains"; }
    [[nodiscard]] std::string message(int value) const override {
      switch (static_cast<errc>(value)) {
        case errc::ok:
          return "ok";
        case errc::bad_magic:
          return "bad frame magic";
        case errc::bad_version:
          return "unsupported frame version";
        case errc::bad_codec:
          return "unknown codec";
        case errc::truncated_frame:
          return "truncated frame";
        case errc::bad_sequence:
          return "frame sequence mismatch";
        case errc::code_identity_mismatch:
          return "code section does not match its identity";
        case errc::frame_too_large:
          return "frame larger than a ring slot";
        case errc::bad_container:
          return "malformed code container";
        case errc::no_image_for_target:
          return "no code image for this target";
        case errc::jit_failed:
          return "JIT compilation or linking failed";
        case errc::symbol_not_found:
          return "symbol not found";
        case errc::dependency_not_found:
          return "dependency library not found";
        case errc::unknown_code:
          return "source does not hold the requested code";
        case errc::protocol:
          return "protocol violation";
        case errc::invalid_argument:
          return "invalid argument";
        case errc::peer_gone:
          return "peer went away";
        case errc::timeout:
          return "timed out";
        case errc::io:
          return "I/O error";
        case errc::peer_refused:
          return "peer refused";
        case errc::code_refused:
          return "code refused";
        case errc::import_refused:
          return "import refused";
        case errc::limit_exceeded:
          return "limit exceeded";
        case errc::code_trapped:
          return "code trapped";
        case errc::gpu_failed:
          return "GPU ifunc failed";
      }
      return "unknown threechains error";
    }
  };
  static const category instance;
  return instance;
}

[[nodiscard]] inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), threechains_category()};
}

// UCX statuses are negative ints; the category keeps them as they are.
[[nodiscard]] inline const std::error_category& ucs_category() noexcept {
  struct category final : std::error_category {
    [[nodiscard]] const char* name() const noexcept override { return "ucs"; }
    [[nodiscard]] std::string message(int value) const override {
      return ucs_status_string(static_cast<ucs_status_t>(value));
    }
  };
  static const category instance;
  return instance;
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
  [[nodiscard]] std::string context() const {
    const std::string text = what();
    const std::string suffix = ": " + code().message();
    if (text.size() >= suffix.size() &&
        text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return text.substr(0, text.size() - suffix.size());
    }
    return text;
  }
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
