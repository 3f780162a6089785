// Test hooks: reach under the public API, for tests only (never installed).
#pragma once

#include <threechains/channel.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>
#include <span>

namespace threechains {

struct HandshakeAccess {
  // While set, this process's sources sign their proofs wrongly (one bit
  // flipped): what a peer that knows a trusted public key, not its secret, sends.
  static void forge_proofs(bool forge) noexcept;
  // Until cleared, this process's sources ask for credits by put and send
  // `rkey` (or, if none, their credit word's own) as its rkey, with the
  // credit word's address moved by `address_shift`, and sign all of it as
  // usual: what a trusted peer with a broken or hostile credit word sends.
  static void override_hello_credit(std::optional<std::vector<std::byte>> rkey,
                                    int64_t address_shift = 0);
  static void clear_hello_credit() noexcept;
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
  // Where the next frame's bytes go in the target's own memory (after the
  // slot's commit word), when frames are written there directly (shared
  // memory); null where they travel as messages. What a hostile source can
  // keep writing after it committed the frame.
  [[nodiscard]] static std::byte* next_frame_in_target(Channel& channel);
  // Stores `consumed` where the target's credits land for this channel, as
  // the target would: a wrong count, for the source's own checks.
  static void store_credit(Channel& channel, uint64_t consumed);
};

}  // namespace threechains
