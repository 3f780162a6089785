// Test hooks: reach under the public API, for tests only (never installed).
#pragma once

#include <threechains/channel.hpp>

#include <cstddef>
#include <span>

namespace threechains {

struct HandshakeAccess {
  // While set, this process's sources sign their proofs wrongly (one bit
  // flipped): what a peer that knows a trusted public key, not its secret, sends.
  static void forge_proofs(bool forge) noexcept;
};

struct ChannelAccess {
  // Puts pre-built frame bytes into the next slot exactly as they are; the
  // Receiver validates them like any other frame. Blocks while the ring is full.
  static void send_raw_frame(Channel& channel, std::span<const std::byte> frame);
};

}  // namespace threechains
