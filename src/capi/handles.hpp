// What the C API's opaque handles are, and the one wrapper every C entry point
// goes through: C++ exceptions never cross into C; they become a status and
// the calling thread's last-error message.
#pragma once

#include <threechains/threechains.h>
#include <threechains/launch.hpp>
#include <threechains/threechains.hpp>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>

struct threechains_context {
  threechains::Context context;
};
struct threechains_worker {
  threechains::Worker worker;
};
struct threechains_keypair {
  threechains::KeyPair key;
};
struct threechains_public_key {
  threechains::PublicKey key;
};
struct threechains_trust {
  threechains::Trust trust;
};
struct threechains_ifunc {
  threechains::Ifunc ifunc;
};
struct threechains_receiver {
  threechains::Receiver receiver;
  bool threaded = false;  // its progress thread runs (and writes the statistics)
};
struct threechains_source {
  threechains::Source source;
};
struct threechains_channel {
  threechains::Channel channel;
};
struct threechains_node {
  // Declared first, so destroyed after the Node: the Node's goodbyes go out
  // while the launcher's session (PMIx) still stands.
  std::optional<threechains::Launch> launch;
  threechains::Node node;
};

namespace threechains::capi {

// Records `message` as the calling thread's last error and returns `status`.
threechains_status fail(threechains_status status, const std::string& message) noexcept;
// The status an exception of the library stands for.
[[nodiscard]] threechains_status status_of(const Error& error) noexcept;

// Runs `body`, turning whatever it throws into a status and a message.
template <class Body>
threechains_status guarded(const char* call, Body&& body) noexcept {
  try {
    body();
    return THREECHAINS_OK;
  } catch (const Error& e) {
    return fail(status_of(e), std::string(call) + ": " + e.what());
  } catch (const std::bad_alloc&) {
    return fail(THREECHAINS_UNKNOWN_ERROR, std::string(call) + ": out of memory");
  } catch (const std::exception& e) {
    return fail(THREECHAINS_UNKNOWN_ERROR, std::string(call) + ": " + e.what());
  } catch (...) {
    return fail(THREECHAINS_UNKNOWN_ERROR, std::string(call) + ": unknown exception");
  }
}

// Whether every pointer a call needs was given.
template <class... Pointers>
[[nodiscard]] bool all_given(const Pointers*... pointers) noexcept {
  return ((pointers != nullptr) && ...);
}

// A caller's option struct over the defaults: only the bytes its `size` says
// it has (an older program's struct is shorter than ours).
template <class Options>
[[nodiscard]] Options read_options(const Options* given, Options defaults) noexcept {
  if (given != nullptr) {
    const std::size_t size = std::min(given->size, sizeof(Options));
    std::memcpy(static_cast<void*>(&defaults), given, size);
    defaults.size = sizeof(Options);
  }
  return defaults;
}

[[nodiscard]] ReceiverOptions receiver_options(const threechains_receiver_options& options);
[[nodiscard]] ChannelOptions channel_options(const threechains_channel_options& options);
[[nodiscard]] threechains_receiver_options default_receiver_options() noexcept;
[[nodiscard]] threechains_channel_options default_channel_options() noexcept;

}  // namespace threechains::capi
