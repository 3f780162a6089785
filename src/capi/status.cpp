// The C API's statuses and the calling thread's last-error message.
#include "capi/handles.hpp"

#include <array>

namespace threechains::capi {
namespace {
thread_local std::string last_error;
}

threechains_status fail(threechains_status status, const std::string& message) noexcept {
  try {
    last_error = message;
  } catch (...) {
    last_error.clear();  // no memory for the message: the status still says what
  }
  return status;
}

threechains_status status_of(const Error& error) noexcept {
  if (error.ucs_status()) return THREECHAINS_UCX_ERROR;
  if (error.code().category() == threechains_category()) {
    return static_cast<threechains_status>(error.code().value());
  }
  return THREECHAINS_UNKNOWN_ERROR;
}

}  // namespace threechains::capi

extern "C" {

const char* threechains_last_error(void) { return threechains::capi::last_error.c_str(); }

const char* threechains_status_string(threechains_status status) {
  switch (status) {
    case THREECHAINS_OK:
      return "ok";
    case THREECHAINS_WOULD_BLOCK:
      return "the ring is full";
    case THREECHAINS_UCX_ERROR:
      return "UCX error";
    case THREECHAINS_UNKNOWN_ERROR:
      return "unknown error";
    default:
      break;
  }
  if (status > THREECHAINS_OK && status <= THREECHAINS_GPU_FAILED) {
    // The C++ category's messages, kept for the process (one per value). Made
    // on first use, which allocates: a failure must not reach C.
    try {
      static const auto messages = [] {
        std::array<std::string, THREECHAINS_GPU_FAILED + 1> all;
        for (int v = 0; v <= THREECHAINS_GPU_FAILED; ++v) {
          all[static_cast<std::size_t>(v)] = threechains::threechains_category().message(v);
        }
        return all;
      }();
      return messages[static_cast<std::size_t>(status)].c_str();
    } catch (...) {
      return "(no memory for the status text)";
    }
  }
  return "unknown status";
}

const char* threechains_version(void) { return THREECHAINS_VERSION_STRING; }

}  // extern "C"
