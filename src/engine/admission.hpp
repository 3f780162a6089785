// Admission policy: which connection still proving its key gives way when a
// new one arrives. Pure (no UCX): the engine passes what it has, this says
// whom to refuse; tests/test_limits.cpp checks it directly.
//
// Two caps (ReceiverLimits): at most max_pending_per_address connections
// from one address (IP, any port) may be proving at once, and at most
// max_pending_handshakes in all. Over the first, the newcomer's own address
// gives way (its oldest); over the second, the address holding the most
// pending handshakes does. So one address that floods the listener with
// half-open handshakes evicts its own, never a peer from elsewhere that is
// halfway through proving its key; the short handshake deadline and the
// total cap bound what many addresses together can hold.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <sys/socket.h>

namespace threechains::detail {

struct ProvingPeer {
  std::string_view address;
  std::chrono::steady_clock::time_point accepted_at;
};

struct AdmissionLimits {
  uint32_t max_pending;              // ReceiverLimits::max_pending_handshakes
  uint32_t max_pending_per_address;  // ReceiverLimits::max_pending_per_address
};

// The index in `proving` of the connection to refuse so that one from
// `newcomer` can prove its key, or nothing if it fits as things are.
[[nodiscard]] std::optional<std::size_t> choose_eviction(std::span<const ProvingPeer> proving,
                                                         std::string_view newcomer,
                                                         AdmissionLimits limits);

// "192.0.2.7" or "2001:db8::1" (no port: the policy counts hosts), or
// "unknown" where UCX could not say.
[[nodiscard]] std::string host_of(const sockaddr_storage& address);

}  // namespace threechains::detail
