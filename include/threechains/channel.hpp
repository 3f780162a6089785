// Source side. A Source serves one Worker's outgoing channels; a Channel is one
// connection to a Receiver's ring. send() writes a frame straight into a staging
// slot, puts it into the target's ring slot, fences, and puts the slot's commit
// word. Credits come back as a put into the Channel's credit word, so the
// source never overwrites a slot the target has not consumed.
#pragma once

#include <threechains/detail/outbox.hpp>
#include <threechains/detail/protocol.hpp>
#include <threechains/error.hpp>
#include <threechains/frame.hpp>
#include <threechains/ifunc.hpp>
#include <threechains/ucx/endpoint.hpp>
#include <threechains/ucx/memory.hpp>
#include <threechains/ucx/worker.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
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
  Delivery delivery = Delivery::automatic;
  // This process's rank when it is part of a Node mesh (the target tells
  // injected code where a frame came from); -1 otherwise.
  int64_t rank = -1;
};

// What a send did. `would_block` only from try_send: the ring is full.
enum class SendStatus { sent_cached, sent_with_code, would_block };

struct ChannelStats {
  uint64_t frames_sent = 0;
  uint64_t frames_with_code = 0;
  uint64_t code_requests_served = 0;  // cache misses the target reported
  std::size_t last_frame_size = 0;
};

namespace detail {
class SourceCore;

struct ChannelState {
  ChannelState(Endpoint ep, MemoryRegion credit_region, MemoryRegion staging_region)
      : endpoint(std::move(ep)),
        credit(std::move(credit_region)),
        staging(std::move(staging_region)) {}

  [[nodiscard]] uint64_t consumed() const noexcept {
    return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(credit.data()))
        .load(std::memory_order_acquire);
  }

  Endpoint endpoint;
  MemoryRegion credit;   // the target puts the last consumed sequence here
  MemoryRegion staging;  // one staging slot per ring slot, frames are built here
  std::optional<RemoteBuffer> ring;
  uint32_t slots = 0;
  std::size_t slot_size = 0;
  uint64_t next_sequence = 1;
  std::vector<void*> in_flight;     // per slot: the put requests not yet completed (body, commit)
  std::unordered_set<CodeId> held;  // code the target holds (or will, once it reads our frames)
  std::unordered_map<CodeId, Ifunc> sent_code;  // what we can resend on a cache miss
  std::vector<NeedCode> code_requests;
  bool by_active_message = false;
  std::optional<CreditLink> piggyback;  // Node: credits owed to the target ride on our frames
  std::vector<uint64_t> am_headers;     // per slot: the piggybacked credit of the frame in flight
  std::byte* direct_ring = nullptr;     // Delivery::direct: the target's ring, mapped here
  bool welcomed = false;
  ucs_status_t refused = UCS_OK;
  ChannelStats stats;
};

// Per-worker state shared by every Channel of a Source: AM handlers find a
// Channel by the endpoint that spoke.
class SourceCore {
 public:
  explicit SourceCore(Worker w) : worker(std::move(w)) {
    worker.set_am_handler(kAmWelcome, &on_welcome, this);
    worker.set_am_handler(kAmNeedCode, &on_need_code, this);
    worker.set_am_handler(kAmCredit, &on_credit, this);
  }
  SourceCore(const SourceCore&) = delete;
  SourceCore& operator=(const SourceCore&) = delete;
  ~SourceCore() {
    worker.set_am_handler(kAmWelcome, nullptr, nullptr);
    worker.set_am_handler(kAmNeedCode, nullptr, nullptr);
    worker.set_am_handler(kAmCredit, nullptr, nullptr);
    outbox.cancel_all(worker);
  }

  // One round: UCX progress, then answer cache misses (never from inside a handler).
  unsigned progress() {
    unsigned events = worker.progress();
    if (have_requests) [[unlikely]]
      serve_code_requests();
    if (!outbox.empty()) outbox.reap();
    return events;
  }

  Worker worker;
  Outbox outbox;
  std::unordered_map<ucp_ep_h, ChannelState*> channels;
  bool have_requests = false;

 private:
  ChannelState* find(const ucp_am_recv_param_t* param) {
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0) return nullptr;
    const auto it = channels.find(param->reply_ep);
    return it == channels.end() ? nullptr : it->second;
  }

  static ucs_status_t on_welcome(void* arg, const void* header, std::size_t header_length,
                                 void* data, std::size_t length, const ucp_am_recv_param_t* param) {
    auto* self = static_cast<SourceCore*>(arg);
    ChannelState* ch = self->find(param);
    if (ch == nullptr || header_length != sizeof(Welcome)) return UCS_OK;
    Welcome welcome;
    std::memcpy(&welcome, header, sizeof(welcome));
    if (welcome.version != kProtocolVersion || welcome.status != UCS_OK) {
      ch->refused = welcome.status != UCS_OK ? static_cast<ucs_status_t>(welcome.status)
                                             : UCS_ERR_UNSUPPORTED;
    } else {
      ch->slots = welcome.slots;
      ch->slot_size = welcome.slot_size;
      ch->ring.emplace(ch->endpoint, welcome.ring_address,
                       std::size_t{welcome.slots} * welcome.slot_size,
                       std::span<const std::byte>(static_cast<const std::byte*>(data), length));
    }
    ch->welcomed = true;
    return UCS_OK;
  }

  // AM delivery: credits come back as AMs; they land in the same credit word.
  static ucs_status_t on_credit(void* arg, const void* header, std::size_t header_length, void*,
                                std::size_t, const ucp_am_recv_param_t* param) {
    ChannelState* ch = static_cast<SourceCore*>(arg)->find(param);
    if (ch == nullptr || header_length != sizeof(uint64_t)) return UCS_OK;
    uint64_t consumed;
    std::memcpy(&consumed, header, sizeof(consumed));
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(ch->credit.data()))
        .store(consumed, std::memory_order_release);
    return UCS_OK;
  }

  static ucs_status_t on_need_code(void* arg, const void* header, std::size_t header_length, void*,
                                   std::size_t, const ucp_am_recv_param_t* param) {
    auto* self = static_cast<SourceCore*>(arg);
    ChannelState* ch = self->find(param);
    if (ch == nullptr || header_length != sizeof(NeedCode)) return UCS_OK;
    NeedCode request;
    std::memcpy(&request, header, sizeof(request));
    ch->code_requests.push_back(request);
    self->have_requests = true;
    return UCS_OK;
  }

  void serve_code_requests() {
    have_requests = false;
    for (auto& [ep, ch] : channels) {
      for (const NeedCode& request : ch->code_requests) {
        CodeDelivery delivery{};
        delivery.code_id = request.code_id;
        const auto it = ch->sent_code.find(request.code_id);
        if (it == ch->sent_code.end()) {
          outbox.send(ch->endpoint, kAmCode, delivery, {});
          continue;
        }
        const Ifunc& ifunc = it->second;
        delivery.codec = static_cast<uint8_t>(ifunc.codec());
        delivery.found = 1;
        // The Ifunc handle keeps the code alive until UCX is done with it.
        auto keep = std::make_shared<Ifunc>(ifunc);
        const std::span<const std::byte> code = keep->code();
        outbox.send(ch->endpoint, kAmCode, delivery, code, std::move(keep));
        ch->held.insert(request.code_id);
        ++ch->stats.code_requests_served;
      }
      ch->code_requests.clear();
    }
  }
};
}  // namespace detail

// A connection from this process to one Receiver. Move-only.
class Channel {
 public:
  Channel(Channel&&) noexcept = default;
  Channel& operator=(Channel&&) noexcept = default;
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;
  ~Channel() {
    if (state_) {
      try {
        close();
      } catch (...) {  // a destructor never throws; close() explicitly to see errors
      }
    }
  }

  // Sends one frame whose payload `fill(std::byte* payload)` writes in place.
  // `fill` may return the number of bytes it wrote (at most payload_size).
  // Blocks (progressing the worker) while the ring is full.
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
    detail::ChannelState& ch = *state_;
    std::byte* staging = acquire_slot();
    if (staging == nullptr) [[unlikely]]
      return SendStatus::would_block;
    const std::size_t capacity = ch.slot_size - detail::kCommitWordSize;
    bool with_code = !ch.held.contains(ifunc.id());
    if (with_code) [[unlikely]] {
      ch.sent_code.emplace(ifunc.id(), ifunc);
      ch.held.insert(ifunc.id());
      // Too big to travel with its code: send it cached; the target's miss
      // fetches the code by AM, and the payload still runs exactly once.
      with_code = frame_size(payload_size, ifunc.code().size()) <= capacity;
    }
    FrameBuilder frame(std::span<std::byte>(staging + detail::kCommitWordSize, capacity));
    const std::size_t code_size = with_code ? ifunc.code().size() : 0;
    if (frame.begin(ifunc.codec(), ifunc.id(), static_cast<uint32_t>(ch.next_sequence),
                    payload_size, code_size) != errc::ok) [[unlikely]] {
      throw Error(errc::frame_too_large,
                  "ifunc '" + ifunc.name() + "': a " + std::to_string(payload_size) +
                      "-byte payload does not fit a " + std::to_string(ch.slot_size) +
                      "-byte ring slot (" + std::to_string(max_payload()) +
                      " bytes of payload at most)");
    }
    if constexpr (std::is_convertible_v<std::invoke_result_t<Fill&, std::byte*>, std::size_t>) {
      // The fill wrote fewer bytes than it reserved: restate the header (the
      // payload does not move; the code, if any, goes right after it).
      const std::size_t written = fill(frame.payload());
      if (written > payload_size) [[unlikely]] {
        throw Error(errc::frame_too_large, "payload fill wrote " + std::to_string(written) +
                                               " bytes, reserved " + std::to_string(payload_size));
      }
      (void)frame.begin(ifunc.codec(), ifunc.id(), static_cast<uint32_t>(ch.next_sequence), written,
                        code_size);
    } else {
      fill(frame.payload());
    }
    if (with_code) frame.write_code(ifunc.code());
    commit_slot(staging, frame.size());
    ch.stats.frames_with_code += with_code ? 1 : 0;
    return with_code ? SendStatus::sent_with_code : SendStatus::sent_cached;
  }

  // Puts pre-built frame bytes into the next slot exactly as they are (relays,
  // tools, tests); the Receiver validates them like any other frame. Blocks
  // while the ring is full.
  void send_frame(std::span<const std::byte> frame) {
    std::byte* staging = nullptr;
    while ((staging = acquire_slot()) == nullptr) wait_for_credit();
    if (frame.size() > state_->slot_size - detail::kCommitWordSize) {
      throw Error(errc::frame_too_large, std::to_string(frame.size()) +
                                             "-byte frame does not fit a " +
                                             std::to_string(state_->slot_size) + "-byte ring slot");
    }
    std::memcpy(staging + detail::kCommitWordSize, frame.data(), frame.size());
    commit_slot(staging, frame.size());
  }

  // Progresses until the target has consumed every frame sent so far.
  void flush(std::chrono::milliseconds limit = std::chrono::seconds(60)) {
    const uint64_t last = state_->next_sequence - 1;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (state_->consumed() < last) {
      for (int spin = 0; spin < 32; ++spin) {
        if (state_->consumed() >= last) return;
      }
      progress_or_fail();
      if (std::chrono::steady_clock::now() > deadline) {
        throw Error(errc::timeout, "flush: the target consumed " +
                                       std::to_string(state_->consumed()) + " of " +
                                       std::to_string(last) + " frames");
      }
    }
  }

  // Flushes, tells the target goodbye, and closes the endpoint. Throws if the
  // target did not consume every frame (the channel is closed all the same).
  void close() {
    if (!state_) return;
    std::exception_ptr error;
    if (!state_->endpoint.failed()) {
      try {
        flush(std::chrono::seconds(10));
        core_->outbox.send(state_->endpoint, detail::kAmBye, uint64_t{0}, {});
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
        while (!core_->outbox.empty() && !state_->endpoint.failed() &&
               std::chrono::steady_clock::now() < deadline) {
          core_->progress();
        }
      } catch (...) {
        error = std::current_exception();
      }
    }
    core_->channels.erase(state_->endpoint.handle());
    drain_requests(*core_, *state_);
    state_->ring.reset();  // the rkey goes before its endpoint
    state_->endpoint.close();
    state_.reset();
    core_.reset();
    if (error) std::rethrow_exception(error);
  }

  // One round of progress on the Source's worker (answers cache misses).
  unsigned progress() { return core_->progress(); }

  [[nodiscard]] uint32_t slots() const noexcept { return state_->slots; }
  [[nodiscard]] std::size_t slot_size() const noexcept { return state_->slot_size; }
  [[nodiscard]] std::size_t max_payload() const noexcept {
    return state_->slot_size - detail::kCommitWordSize - sizeof(FrameHeader);
  }
  [[nodiscard]] uint64_t frames_in_flight() const noexcept {
    return state_->next_sequence - 1 - state_->consumed();
  }
  [[nodiscard]] const ChannelStats& stats() const noexcept { return state_->stats; }
  [[nodiscard]] bool target_holds(CodeId id) const noexcept { return state_->held.contains(id); }
  // Forget what the target holds, so the next send of each ifunc carries its code.
  void forget_held_code() noexcept { state_->held.clear(); }
  [[nodiscard]] const Endpoint& endpoint() const noexcept { return state_->endpoint; }
  // Node only: carry the credits of the reverse direction in this channel's AM
  // frames; the Receiver updates credit_word() from the frames coming back.
  void share_credits(const detail::CreditLink& link) {
    state_->am_headers.assign(state_->slots, 0);
    state_->piggyback = link;
  }
  [[nodiscard]] uint64_t* credit_word() const noexcept {
    return reinterpret_cast<uint64_t*>(state_->credit.data());
  }

  // How this channel's frames travel (resolved at connect).
  [[nodiscard]] Delivery delivery() const noexcept {
    if (state_->direct_ring != nullptr) return Delivery::direct;
    return state_->by_active_message ? Delivery::active_message : Delivery::put;
  }

 private:
  friend class Source;
  Channel(std::shared_ptr<detail::SourceCore> core, std::unique_ptr<detail::ChannelState> state)
      : core_(std::move(core)), state_(std::move(state)) {}

  void progress_or_fail() {
    core_->progress();
    if (state_->endpoint.failed()) [[unlikely]] {
      throw Error(state_->endpoint.status(), "channel: the target went away");
    }
  }

  // Over shared memory credits land without progress: look at the credit word
  // a few times before paying for a round of UCX progress.
  void wait_for_credit() {
    const uint64_t sequence = state_->next_sequence;
    for (;;) {
      for (int spin = 0; spin < 32; ++spin) {
        if (sequence - 1 - state_->consumed() < state_->slots) return;
      }
      progress_or_fail();
    }
  }

  static constexpr std::size_t kFullFenceBytes = 16 * 1024;

  // Where the next frame is built (a staging slot, or with Delivery::direct the
  // target's slot itself), or nullptr when the ring is full.
  std::byte* acquire_slot() {
    detail::ChannelState& ch = *state_;
    const uint64_t sequence = ch.next_sequence;
    if (sequence - 1 - ch.consumed() >= ch.slots) [[unlikely]]
      return nullptr;
    const std::size_t slot = (sequence - 1) % ch.slots;
    if (ch.direct_ring != nullptr) return ch.direct_ring + slot * ch.slot_size;
    reclaim_staging(slot);
    return ch.staging.data() + slot * ch.slot_size;
  }

  // Stamps the commit word, puts the frame, and moves to the next sequence.
  void commit_slot(std::byte* staging, std::size_t frame_bytes) {
    detail::ChannelState& ch = *state_;
    const uint64_t sequence = ch.next_sequence;
    if (ch.direct_ring != nullptr) {
      // The frame's bytes are already in the target's slot. Large copies may
      // use non-temporal stores, which a release store does not order on x86:
      // fence those fully first.
      if (frame_bytes >= kFullFenceBytes) std::atomic_thread_fence(std::memory_order_seq_cst);
      std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(staging))
          .store(sequence, std::memory_order_release);
    } else {
      std::memcpy(staging, &sequence, sizeof(sequence));
      put_frame((sequence - 1) % ch.slots, staging, frame_bytes);
    }
    ch.next_sequence = sequence + 1;
    ++ch.stats.frames_sent;
    ch.stats.last_frame_size = frame_bytes;
  }

  // A staging slot is reused only once UCX has let go of its previous puts.
  void reclaim_staging(std::size_t slot) {
    void** requests = &state_->in_flight[slot * 2];
    for (int i = 0; i < 2; ++i) {
      if (requests[i] == nullptr) continue;
      while (ucp_request_check_status(requests[i]) == UCS_INPROGRESS) progress_or_fail();
      ucp_request_free(requests[i]);
      requests[i] = nullptr;
    }
  }

  static void drain_requests(detail::SourceCore& core, detail::ChannelState& state) noexcept {
    for (void*& request : state.in_flight) {
      if (request == nullptr) continue;
      if (ucp_request_check_status(request) == UCS_INPROGRESS)
        ucp_request_cancel(core.worker.handle(), request);
      while (ucp_request_check_status(request) == UCS_INPROGRESS) core.worker.progress();
      ucp_request_free(request);
      request = nullptr;
    }
  }

  // Ring: body first, then (after a fence) the commit word, so the target never
  // sees a commit word before the frame it commits. AM: the frame is the message.
  void put_frame(std::size_t slot, std::byte* staging, std::size_t frame_bytes) {
    detail::ChannelState& ch = *state_;
    void** requests = &ch.in_flight[slot * 2];
    ucp_request_param_t params{};
    if (ch.by_active_message) {
      params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      params.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
      // The commit word travels too: it puts the payload 16-byte aligned in the
      // target's (16-aligned) receive buffer, and it repeats the sequence.
      const void* header = nullptr;
      std::size_t header_length = 0;
      if (ch.piggyback) {
        uint64_t& credit = ch.am_headers[slot];
        credit = *ch.piggyback->expected - 1;
        *ch.piggyback->reported = credit;  // it travels with this frame
        header = &credit;
        header_length = sizeof(credit);
      }
      requests[0] =
          issue(ucp_am_send_nbx(ch.endpoint.handle(), detail::kAmFrame, header, header_length,
                                staging, detail::kCommitWordSize + frame_bytes, &params));
      return;
    }
    const uint64_t remote = ch.ring->address() + slot * ch.slot_size;
    requests[0] =
        issue(ucp_put_nbx(ch.endpoint.handle(), staging + detail::kCommitWordSize, frame_bytes,
                          remote + detail::kCommitWordSize, ch.ring->rkey(), &params));
    core_->worker.fence();
    requests[1] = issue(ucp_put_nbx(ch.endpoint.handle(), staging, detail::kCommitWordSize, remote,
                                    ch.ring->rkey(), &params));
  }

  static void* issue(ucs_status_ptr_t request) {
    if (UCS_PTR_IS_ERR(request)) [[unlikely]]
      check(UCS_PTR_STATUS(request), "ucp_put_nbx(frame)");
    return request;
  }

  std::shared_ptr<detail::SourceCore> core_;
  std::unique_ptr<detail::ChannelState> state_;
};

// The source side of one Worker: opens Channels to Receivers.
class Source {
 public:
  explicit Source(Worker worker) : core_(std::make_shared<detail::SourceCore>(std::move(worker))) {}

  // Connects to a Receiver listening at host:port and waits for its ring.
  // `while_waiting` runs on every round of the wait (a Node polls its own
  // Receiver there, so two processes can connect to each other at once).
  [[nodiscard]] Channel connect(const std::string& host, uint16_t port,
                                const ChannelOptions& options = {},
                                const std::function<void()>& while_waiting = nullptr) {
    const Worker& worker = core_->worker;
    const Context& context = worker.context();
    const std::size_t slot_size =
        (options.slot_size + detail::kSlotAlignment - 1) & ~(detail::kSlotAlignment - 1);
    if (options.slots == 0 || slot_size < detail::kCommitWordSize + sizeof(FrameHeader) + 8) {
      throw Error(errc::protocol, "ChannelOptions: need at least one slot of at least 64 bytes");
    }
    auto state = std::make_unique<detail::ChannelState>(
        Endpoint::connect(worker, host, port), MemoryRegion(context, detail::kSlotAlignment),
        MemoryRegion(context, std::size_t{options.slots} * slot_size));
    core_->channels.emplace(state->endpoint.handle(), state.get());
    Channel channel(core_, std::move(state));
    detail::ChannelState& ch = *channel.state_;

    const detail::Hello hello{detail::kProtocolVersion, options.slots, slot_size,
                              ch.credit.address(), options.rank};
    const std::vector<std::byte> rkey = ch.credit.pack_rkey();
    core_->outbox.send(ch.endpoint, detail::kAmHello, hello, rkey);
    const auto deadline = std::chrono::steady_clock::now() + options.connect_timeout;
    while (!ch.welcomed) {
      channel.progress_or_fail();
      if (while_waiting) while_waiting();
      if (std::chrono::steady_clock::now() > deadline) {
        throw Error(errc::timeout,
                    "connect " + host + ":" + std::to_string(port) + ": no answer from a Receiver");
      }
    }
    if (ch.refused != UCS_OK)
      throw Error(ch.refused, "connect " + host + ":" + std::to_string(port) + ": refused");
    if (ch.slots > options.slots || ch.slot_size > slot_size) {
      throw Error(errc::protocol, "connect: the Receiver granted a larger ring than asked for");
    }
    ch.in_flight.assign(std::size_t{ch.slots} * 2, nullptr);
    const Delivery delivery = resolve_delivery(options.delivery, ch);
    ch.by_active_message = delivery == Delivery::active_message;
    if (delivery == Delivery::direct) {
      ch.direct_ring = static_cast<std::byte*>(ch.ring->direct_pointer());
      if (ch.direct_ring == nullptr) {
        throw Error(UCS_ERR_UNSUPPORTED,
                    "Delivery::direct: UCX cannot map this target's ring here");
      }
    }
    return channel;
  }

  unsigned progress() { return core_->progress(); }
  [[nodiscard]] const Worker& worker() const noexcept { return core_->worker; }

 private:
  // UCX 1.13 cannot be asked which transport carries RMA, so: a direct pointer
  // to the ring means shared memory (put); otherwise read the endpoint's lane
  // table, and if every RMA lane is tcp (RMA emulated in software), use AM.
  static Delivery resolve_delivery(Delivery wanted, const detail::ChannelState& ch) {
    if (wanted != Delivery::automatic) return wanted;
    if (ch.ring->direct_pointer() != nullptr) return Delivery::direct;
    return rma_lanes_are_tcp(ch.endpoint.describe()) ? Delivery::active_message : Delivery::put;
  }

  static bool rma_lanes_are_tcp(const std::string& lanes) {
    bool any = false;
    std::size_t at = 0;
    while (at < lanes.size()) {
      const std::size_t end = std::min(lanes.find('\n', at), lanes.size());
      const std::string_view line(lanes.data() + at, end - at);
      if (line.find("lane[") != std::string_view::npos &&
          line.find("rma") != std::string_view::npos) {
        if (line.find("tcp/") == std::string_view::npos) return false;
        any = true;
      }
      at = end + 1;
    }
    return any;
  }

  std::shared_ptr<detail::SourceCore> core_;
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

// Sends raw bytes as the payload.
inline SendStatus send(Channel& channel, const Ifunc& ifunc, std::span<const std::byte> payload) {
  return channel.send_with(ifunc, payload.size(), [&](std::byte* out) {
    if (!payload.empty()) std::memcpy(out, payload.data(), payload.size());
  });
}

template <TriviallyCopyablePayload T>
SendStatus try_send(Channel& channel, const Ifunc& ifunc, const T& value) {
  return channel.try_send_with(
      ifunc, sizeof(T), [&](std::byte* payload) { std::memcpy(payload, &value, sizeof(T)); });
}

}  // namespace threechains
