// Source side. A Source opens Channels from one Worker; a Channel is one
// connection to a threechains::Receiver's ring. send() builds a frame straight
// in a ring slot (shared memory) or a staging slot (puts, Active Messages) and
// commits it; credits come back from the target, so the source never
// overwrites a slot the target has not consumed.
//
// Channel and Source are handles on the Worker's engine (src/engine): the
// connection state lives there, in one Link per remote process. Only the send
// path is inline.
#pragma once

#include <threechains/detail/outbound_ring.hpp>
#include <threechains/error.hpp>
#include <threechains/frame.hpp>
#include <threechains/ifunc.hpp>
#include <threechains/trust.hpp>
#include <threechains/ucx/endpoint.hpp>
#include <threechains/ucx/worker.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace threechains {

// How frames reach the target.
// `direct`: UCX maps the target's ring into this process (ucp_rkey_ptr, shared
//   memory): the frame is built in the target's slot itself and committed by a
//   release store; no UCX call, no copy beyond the payload's own.
// `put`: one-sided puts into the target's ring (native RMA: RDMA).
// `active_message`: each frame is a UCX Active Message that the target
//   dispatches from its handler (where RMA is emulated, as over tcp).
// `automatic`: direct if UCX gives a pointer, else AM if every RMA lane is tcp,
//   else put.
enum class Delivery { automatic, direct, put, active_message };

struct ChannelOptions {
  // Ring the source asks for; the Receiver may grant less (see Channel::slots()).
  uint32_t slots = 16;
  // Bytes per slot, commit word included. A frame must fit in one slot; a frame
  // whose code would not fit is sent in cached form and its code follows by AM.
  std::size_t slot_size = 128 * 1024;
  std::chrono::milliseconds connect_timeout{10000};
  // How long send() may block on a full ring, and flush() and close() wait for
  // the target, before they throw errc::timeout.
  std::chrono::milliseconds timeout{30000};
  Delivery delivery = Delivery::automatic;
  // The key this source proves it holds when the Receiver asks (one whose
  // Trust names its public key). Without it, only a Trust::anyone() Receiver
  // accepts the connection.
  std::optional<KeyPair> identity;
  // If set, connect fails unless the Receiver proves it holds this key
  // (ReceiverOptions::identity): no frame goes to an impostor.
  std::optional<PublicKey> target_key;
  // Ifuncs kept for resending when the target asks again (it evicted one, or
  // restarted). Beyond this, code whose frames the target has consumed is let
  // go; its next send carries the code again.
  std::size_t max_code_kept = 256;
};

// What a send did. `would_block` only from try_send: the ring is full.
enum class SendStatus { sent_cached, sent_with_code, would_block };

// A connection from this process to one Receiver. Move-only; moving one onto
// another closes the one it replaces (a goodbye, without waiting).
class Channel {
 public:
  Channel(Channel&& other) noexcept;
  Channel& operator=(Channel&& other) noexcept;
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;
  // Says goodbye without waiting for the target: frames already committed
  // still run there. close() first to wait for them and see errors.
  ~Channel();

  // Sends one frame whose payload `fill(std::byte* payload)` writes in place.
  // `fill` may return the number of bytes it wrote (at most payload_size).
  // Blocks (progressing the worker) while the ring is full, for at most
  // ChannelOptions::timeout.
  template <class Fill>
  SendStatus send_with(const Ifunc& ifunc, std::size_t payload_size, Fill&& fill) {
    for (;;) {
      const SendStatus status = try_send_with(ifunc, payload_size, fill);
      if (status != SendStatus::would_block) return status;
      wait_for_credit();
    }
  }

  // Non-blocking: returns SendStatus::would_block when the ring is full.
  template <class Fill>
  SendStatus try_send_with(const Ifunc& ifunc, std::size_t payload_size, Fill&& fill) {
    detail::OutboundRing& ring = *ring_;
    if (ring.full()) [[unlikely]]
      return SendStatus::would_block;
    const uint64_t sequence = ring.next_sequence;
    const std::size_t slot = ring.next_slot;
    std::byte* at = ring.direct_ring != nullptr ? ring.direct_ring + slot * ring.slot_size
                                                : detail::staging_slot(*engine_, *link_, slot);
    bool with_code = false;
    if (!ring.last_held_valid || ring.last_held != ifunc.id()) [[unlikely]]
      with_code = detail::prepare_code(*link_, ifunc, payload_size);
    const std::size_t code_size = with_code ? ifunc.code().size() : 0;
    FrameBuilder frame(std::span<std::byte>(at + detail::kCommitWordSize, ring.capacity()));
    if (frame.begin(ifunc.codec(), ifunc.id(), static_cast<uint32_t>(sequence), payload_size,
                    code_size) != errc::ok) [[unlikely]] {
      detail::throw_frame_too_large(*link_, ifunc, payload_size, payload_size);
    }
    if constexpr (std::is_convertible_v<std::invoke_result_t<Fill&, std::byte*>, std::size_t>) {
      // The fill wrote fewer bytes than it reserved: restate the header (the
      // payload does not move; the code, if any, goes right after it).
      const std::size_t written = fill(frame.payload());
      if (written > payload_size) [[unlikely]]
        detail::throw_frame_too_large(*link_, ifunc, payload_size, written);
      (void)frame.begin(ifunc.codec(), ifunc.id(), static_cast<uint32_t>(sequence), written,
                        code_size);
    } else {
      fill(frame.payload());
    }
    if (with_code) frame.write_code(ifunc.code());
    commit(at, slot, frame.size());
    ring.stats.frames_with_code += with_code ? 1 : 0;
    return with_code ? SendStatus::sent_with_code : SendStatus::sent_cached;
  }

  // Sends `payload` as it is. Over Active Message delivery (tcp) a payload of
  // kGatherBytes or more travels from the caller's buffer, gathered behind
  // the header by UCX, without a copy into the channel's staging slot; the
  // call then returns once UCX has let go of the buffer. Otherwise as
  // send_with with a copy.
  SendStatus send_bytes(const Ifunc& ifunc, std::span<const std::byte> payload);
  static constexpr std::size_t kGatherBytes = 16 * 1024;

  // Progresses until the target has consumed every frame sent so far; throws
  // errc::timeout after `limit`, or the UCX error if the target went away.
  void flush();
  void flush(std::chrono::milliseconds limit);

  // Flushes, tells the target goodbye, and closes the connection. Throws if the
  // target did not consume every frame (the channel is closed all the same).
  void close();

  // One round of progress on the Worker (answers the target's cache misses).
  unsigned progress();

  [[nodiscard]] uint32_t slots() const noexcept { return ring_->slots; }
  [[nodiscard]] std::size_t slot_size() const noexcept { return ring_->slot_size; }
  [[nodiscard]] std::size_t max_payload() const noexcept {
    return ring_->capacity() - sizeof(FrameHeader);
  }
  [[nodiscard]] uint64_t frames_in_flight() const noexcept {
    return ring_->next_sequence - 1 - ring_->consumed();
  }
  [[nodiscard]] const ChannelStats& stats() const noexcept { return ring_->stats; }
  [[nodiscard]] bool target_holds(CodeId id) const noexcept;
  // Forget what the target holds, so the next send of each ifunc carries its code.
  void forget_held_code() noexcept;
  // The UCX endpoint under this channel (to send your own Active Messages on
  // it). Once the target went away the endpoint is closed (handle() is null).
  [[nodiscard]] const Endpoint& endpoint() const noexcept;
  // How this channel's frames travel (resolved at connect).
  [[nodiscard]] Delivery delivery() const noexcept;

 private:
  friend class Source;
  friend class Node;
  friend struct ChannelAccess;
  Channel(std::shared_ptr<detail::Engine> engine, std::shared_ptr<detail::Link> link) noexcept;

  // Stamps the commit word and hands the frame over; moves to the next sequence.
  void commit(std::byte* at, std::size_t slot, std::size_t frame_bytes) {
    detail::OutboundRing& ring = *ring_;
    const uint64_t sequence = ring.next_sequence;
    if (ring.direct_ring != nullptr) {
      // The frame's bytes are already in the target's slot. Large copies may
      // use non-temporal stores, which a release store does not order on x86:
      // fence those fully first.
      if (frame_bytes >= kFullFenceBytes) std::atomic_thread_fence(std::memory_order_seq_cst);
      std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(at))
          .store(sequence, std::memory_order_release);
      detail::wake_if_asleep(ring, *link_);
    } else {
      std::memcpy(at, &sequence, sizeof(sequence));
      detail::put_frame(*engine_, *link_, slot, frame_bytes);
    }
    ring.advance();
    ++ring.stats.frames_sent;
    ring.stats.last_frame_size = frame_bytes;
  }

  // Blocks until a slot is free; throws on timeout or if the target went away.
  void wait_for_credit();
  // Says goodbye without waiting and lets go of the engine and the link.
  void release() noexcept;

  static constexpr std::size_t kFullFenceBytes = 16 * 1024;

  std::shared_ptr<detail::Engine> engine_;
  std::shared_ptr<detail::Link> link_;
  detail::OutboundRing* ring_ = nullptr;  // inside *link_, which this handle keeps alive
};

// Where a Receiver listens.
struct ReceiverAddress {
  std::string host;
  uint16_t port = 0;
};

// The source side of one Worker: opens Channels to Receivers.
class Source {
 public:
  explicit Source(Worker worker);

  // Connects to a Receiver listening at host:port and waits for its ring.
  [[nodiscard]] Channel connect(const std::string& host, uint16_t port,
                                const ChannelOptions& options = {});

  // Connects to every target at once (the same one several times opens
  // several channels) and waits for all their rings: the handshakes overlap
  // (docs/performance.md: 256 channels to one Receiver over tcp at 0.22x
  // the time one by one with 64 in flight, 0.78x with 4). At most
  // `in_flight_per_target` handshakes (0 counts as 1) to one target, as
  // written (host, port), at a time: a Receiver takes
  // ReceiverLimits::max_pending_per_address (4 by default) unproven
  // connections from one host and lets the oldest go beyond that; raise
  // both together. ChannelOptions::connect_timeout applies to each channel
  // from its own start. The channels come in the order of `targets`. All or
  // nothing: if one fails, the ones in flight are let finish (or time out),
  // the open ones say goodbye, all are let go, and the first failure is
  // thrown.
  [[nodiscard]] std::vector<Channel> connect_all(std::span<const ReceiverAddress> targets,
                                                 const ChannelOptions& options = {},
                                                 std::size_t in_flight_per_target = 4);

  unsigned progress();
  [[nodiscard]] const Worker& worker() const noexcept;

 private:
  std::shared_ptr<detail::Engine> engine_;
};

// ---- typed send ----------------------------------------------------------

// A payload that can be written into a frame byte for byte.
template <class T>
concept TriviallyCopyablePayload = std::is_trivially_copyable_v<T> && !std::is_pointer_v<T>;

// Sends `value` as the payload, copied once, straight into the frame.
template <TriviallyCopyablePayload T>
SendStatus send(Channel& channel, const Ifunc& ifunc, const T& value) {
  return channel.send_with(ifunc, sizeof(T),
                           [&](std::byte* payload) { std::memcpy(payload, &value, sizeof(T)); });
}

// Sends raw bytes as the payload (Channel::send_bytes: large ones over tcp
// without a copy).
inline SendStatus send(Channel& channel, const Ifunc& ifunc, std::span<const std::byte> payload) {
  return channel.send_bytes(ifunc, payload);
}

template <TriviallyCopyablePayload T>
SendStatus try_send(Channel& channel, const Ifunc& ifunc, const T& value) {
  return channel.try_send_with(
      ifunc, sizeof(T), [&](std::byte* payload) { std::memcpy(payload, &value, sizeof(T)); });
}

}  // namespace threechains
