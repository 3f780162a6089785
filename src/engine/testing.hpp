// Test hooks: reach under the public API, for tests only (never installed).
#pragma once

#include <threechains/channel.hpp>

#include <cstddef>
#include <cstdint>
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
  // The same, with `commit_word` where the frame's sequence belongs (the
  // slot's commit word; in front of an Active Message frame): what a source
  // whose ring state went wrong, or a hostile one, writes.
  static void send_raw_frame(Channel& channel, std::span<const std::byte> frame,
                             uint64_t commit_word);
  // Stores `consumed` where the target's credits land for this channel, as
  // the target would: a wrong count, for the source's own checks.
  static void store_credit(Channel& channel, uint64_t consumed);
};

}  // namespace threechains
