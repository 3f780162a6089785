// Internal: the part of a Link's sending direction that Channel's inline send
// path touches. It lives inside its Link (src/engine/link.hpp); a Channel keeps
// that Link alive, so the pointer a Channel holds to this is valid as long as
// the Channel is.
#pragma once

#include <threechains/frame.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace threechains {

class Ifunc;

struct ChannelStats {
  uint64_t frames_sent = 0;
  uint64_t frames_with_code = 0;
  uint64_t frames_gathered = 0;       // sent from the caller's buffer (Channel::send_bytes)
  uint64_t code_requests_served = 0;  // cache misses the target reported
  std::size_t last_frame_size = 0;
};

namespace detail {

class Engine;
struct Link;

// Ring slot: | commit word (8 B) | frame |. The commit word carries the frame's
// full 64-bit sequence number and is written last, so a Receiver that sees
// sequence s in it knows the frame's bytes have landed.
inline constexpr std::size_t kCommitWordSize = 8;
inline constexpr std::size_t kSlotAlignment = 64;

struct OutboundRing {
  std::byte* direct_ring = nullptr;   // Delivery::direct: the target's ring, mapped here
  std::byte* staging = nullptr;       // otherwise: one staging slot per ring slot
  uint64_t* consumed_word = nullptr;  // the target's credit: last sequence it consumed
  // Delivery::direct: the word of the target's credit line that says it
  // sleeps (a generation, 0 while awake), and the generation we last rang
  // the doorbell for. nullptr otherwise: frames by message wake it themselves.
  // Like consumed_word, both words point into the target's ring as mapped
  // by the Outbound's RemoteBuffer, which lives in the same Link as this.
  uint64_t* sleep_word = nullptr;  // read only
  uint64_t* bye_word = nullptr;    // in the same line: set when we say goodbye
  uint64_t rung = 0;
  // The last frame sent rang the doorbell: the target was asleep, and the
  // wake-up may have put it on this core. A flush or credit wait that follows
  // yields at once then, not only after kYieldAfter (src/engine/send_path.cpp).
  bool woke_target = false;
  // This process could not register for the target's asymmetric fence
  // (membarrier): the commit store is fenced before the sleep word is read.
  bool full_fence = false;
  uint64_t next_sequence = 1;
  uint32_t next_slot = 0;  // next_sequence's slot, (next_sequence - 1) % slots, kept, not divided
  std::size_t slot_size = 0;
  uint32_t slots = 0;
  bool last_held_valid = false;  // the last ifunc sent is known to be held by the target
  CodeId last_held = 0;
  ChannelStats stats;

  [[nodiscard]] uint64_t consumed() const noexcept {
    return std::atomic_ref<uint64_t>(*consumed_word).load(std::memory_order_acquire);
  }
  [[nodiscard]] bool full() const noexcept { return next_sequence - 1 - consumed() >= slots; }
  [[nodiscard]] std::size_t capacity() const noexcept { return slot_size - kCommitWordSize; }
  // The frame of next_sequence went out: on to the next sequence and slot.
  void advance() noexcept {
    ++next_sequence;
    if (++next_slot == slots) next_slot = 0;
  }
};

// The out-of-line halves of the send path (src/engine/send_path.cpp).
// Where the frame of `slot` is built when it is not stored directly: a staging
// slot that UCX has finished with.
[[nodiscard]] std::byte* staging_slot(Engine& engine, Link& link, std::size_t slot);
// Records that `ifunc` goes to this target; returns true if its code travels in
// this frame (false: the target holds it, or it is too big and follows by the
// cache-miss path).
[[nodiscard]] bool prepare_code(Link& link, const Ifunc& ifunc, std::size_t payload_size);
// Puts a frame that is ready in its staging slot (put or Active Message).
void put_frame(Engine& engine, Link& link, std::size_t slot, std::size_t frame_bytes);
// A frame was stored into a ring the target no longer polls: wake it. False
// if the message could not go (the next frame tries again).
[[nodiscard]] bool ring_doorbell(Link& link) noexcept;

// After a commit store into a direct ring: rings the target's doorbell if it
// sleeps. Store-then-load against the target's "store the sleep word, then
// look at the rings": the target's membarrier() is the fence on its side and
// on ours, so here only the compiler is kept from swapping the two.
inline void wake_if_asleep(OutboundRing& ring, Link& link) noexcept {
  if (ring.full_fence) [[unlikely]]
    std::atomic_thread_fence(std::memory_order_seq_cst);
  else
    std::atomic_signal_fence(std::memory_order_seq_cst);
  const uint64_t asleep = std::atomic_ref<uint64_t>(*ring.sleep_word).load(std::memory_order_relaxed);
  bool woke = false;
  if (asleep != 0 && asleep != ring.rung) [[unlikely]] {
    if (ring_doorbell(link)) {
      ring.rung = asleep;
      woke = true;
    }
  }
  ring.woke_target = woke;  // only the last frame's doorbell counts
}
[[noreturn]] void throw_frame_too_large(const Link& link, const Ifunc& ifunc,
                                        std::size_t payload_size, std::size_t written);

}  // namespace detail
}  // namespace threechains
