// Test hooks: reach under the public API, for tests only (never installed).
#pragma once

#include <threechains/channel.hpp>

#include <cstddef>
#include <span>

namespace threechains {

struct ChannelAccess {
  // Puts pre-built frame bytes into the next slot exactly as they are; the
  // Receiver validates them like any other frame. Blocks while the ring is full.
  static void send_raw_frame(Channel& channel, std::span<const std::byte> frame);
};

}  // namespace threechains
