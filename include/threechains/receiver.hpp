// threechains::Receiver — the target side of ThreeChains (not a std::execution
// receiver). It listens for Sources, maps one ring of frame slots per connected
// source, and poll() dispatches each committed frame into the JIT cache:
// main(payload, payload_size, target_args). A bad frame is reported and
// skipped; the Receiver keeps serving.
#pragma once

#include <threechains/detail/outbox.hpp>
#include <threechains/detail/protocol.hpp>
#include <threechains/detail/spin.hpp>
#include <threechains/error.hpp>
#include <threechains/frame.hpp>
#include <threechains/ifunc.hpp>
#include <threechains/jit_cache.hpp>
#include <threechains/ucx/endpoint.hpp>
#include <threechains/ucx/listener.hpp>
#include <threechains/ucx/memory.hpp>
#include <threechains/ucx/worker.hpp>

#include <fmt/core.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace threechains {

struct ReceiverOptions {
  uint16_t port = 0;                    // 0: the OS picks one; see Receiver::port()
  uint32_t max_slots = 64;              // per source
  std::size_t max_slot_size = 1 << 20;  // per slot, commit word included
  void* target_args = nullptr;          // third argument of every ifunc's main
  JitOptions jit;
  // Called for every rejected frame or failed load; the default prints to stderr.
  std::function<void(const Error&)> on_error;
  uint32_t dispatch_burst = 64;  // frames per source per poll before moving on
};

// What the Receiver is running right now (valid inside an ifunc's main).
struct DispatchContext {
  CodeId code_id = 0;
  int64_t origin_rank = -1;  // rank of the source that sent the frame, -1 if not in a mesh
};

struct ReceiverStats {
  uint64_t frames_dispatched = 0;
  uint64_t frames_rejected = 0;
  uint64_t code_loads = 0;
  uint64_t cache_misses = 0;  // cached frames whose code had to be fetched
  uint64_t peers_connected = 0;
  uint64_t peers_closed = 0;  // all that left, said goodbye or not
  uint64_t peers_lost = 0;    // left without goodbye (endpoint error: crashed, cut off)
  std::chrono::nanoseconds last_load_time{0};
  std::chrono::nanoseconds total_load_time{0};
};

class Receiver {
 public:
  explicit Receiver(Worker worker, ReceiverOptions options = {})
      : core_(std::make_unique<Core>(std::move(worker), std::move(options))) {}

  [[nodiscard]] uint16_t port() const noexcept { return core_->listener.port(); }

  // Non-blocking: progresses the worker once and dispatches what is committed.
  // Returns the number of frames dispatched.
  unsigned poll() { return core_->poll(); }

  // Polls until `stop()` holds. Yields the CPU after a run of empty polls, so a
  // spinning Receiver does not starve its peers on an oversubscribed machine.
  template <class StopCondition>
  void run(StopCondition&& stop) {
    detail::spin_until([this] { return poll(); }, stop, 1024);
  }

  [[nodiscard]] JitCache& cache() noexcept { return core_->cache; }
  // Inside an ifunc's main: which code runs and where its frame came from.
  [[nodiscard]] const DispatchContext& running() const noexcept { return core_->running; }
  void set_running(const DispatchContext& context) noexcept { core_->running = context; }
  // An ifunc this process has loaded, by identity or by name (latest); nullptr if none.
  [[nodiscard]] const Ifunc* code(CodeId id) const noexcept {
    const auto it = core_->code_store.find(id);
    return it == core_->code_store.end() ? nullptr : &it->second;
  }
  [[nodiscard]] const Ifunc* code(const std::string& name) const noexcept {
    const auto it = core_->code_by_name.find(name);
    return it == core_->code_by_name.end() ? nullptr : code(it->second);
  }
  // Makes an ifunc this process holds (e.g. its own) runnable and sendable onward.
  void install(const Ifunc& ifunc) {
    if (core_->code_store.contains(ifunc.id())) return;  // already runnable and kept
    if (core_->load(ifunc.id(), ifunc.codec(), ifunc.code()) == nullptr) {
      throw Error(errc::jit_failed, "cannot install ifunc '" + ifunc.name() + "'");
    }
  }
  [[nodiscard]] const ReceiverStats& stats() const noexcept { return core_->stats; }
  [[nodiscard]] std::size_t peers() const noexcept { return core_->peers.size(); }
  void set_target_args(void* args) noexcept { core_->options.target_args = args; }
  [[nodiscard]] void* target_args() const noexcept { return core_->options.target_args; }

  // ---- for Node: credits shared by the two directions of a pair of ranks ----
  void defer_am_credits(bool defer) noexcept { core_->defer_am_credits = defer; }
  // Returns the credits not yet returned (AM delivery), e.g. not piggybacked.
  void return_pending_credits() {
    for (const auto& peer : core_->peers) {
      if (peer->ring && peer->reported != peer->expected - 1) core_->return_credit(*peer);
    }
  }
  // Links rank `rank`'s peer with this process's channel to it (its credit
  // word); returns the link a channel piggybacks through, or nullptr while that
  // rank has not connected here yet.
  [[nodiscard]] std::optional<detail::CreditLink> link_credits(int64_t rank,
                                                               uint64_t* credit_word) {
    for (const auto& peer : core_->peers) {
      if (peer->rank == rank && peer->ring) {
        peer->credit_word = credit_word;
        return detail::CreditLink{&peer->expected, &peer->reported};
      }
    }
    return std::nullopt;
  }
  [[nodiscard]] const Worker& worker() const noexcept { return core_->worker; }

 private:
  struct Peer {
    explicit Peer(Endpoint ep) : endpoint(std::move(ep)) {}
    Endpoint endpoint;
    std::optional<MemoryRegion> ring;
    std::optional<RemoteBuffer> credit;  // the source's credit word
    uint32_t slots = 0;
    std::size_t slot_size = 0;
    uint64_t expected = 1;      // sequence of the next frame to dispatch
    uint64_t reported = 0;      // last sequence credited back to the source
    uint64_t credit_value = 0;  // buffer of the credit put in flight
    void* credit_request = nullptr;
    uint64_t stalled_on = 0;          // sequence waiting for its code (cache miss), 0 if none
    bool by_active_message = false;   // the source delivers frames by AM, not into the ring
    int64_t rank = -1;                // the source's rank in a Node mesh
    uint64_t* credit_word = nullptr;  // Node: our channel to that rank, for piggybacked credits
    // AM delivery: frames that arrived while an earlier one waits for its code,
    // the waiting one first (slow path, copied).
    std::deque<std::vector<std::byte>> backlog;
    bool bye = false;
    std::optional<detail::Hello> hello;
    std::vector<std::byte> hello_rkey;
    struct Delivery {
      detail::CodeDelivery header;
      std::vector<std::byte> code;
    };
    std::vector<Delivery> deliveries;
  };

  struct Core {
    Core(Worker w, ReceiverOptions o)
        : worker(std::move(w)),
          options(std::move(o)),
          cache(options.jit),
          listener(worker, options.port, [this](ucp_conn_request_h request) {
            pending_connections.push_back(request);
            control_pending = true;
          }) {
      if (!options.on_error) {
        options.on_error = [](const Error& e) {
          fmt::print(stderr, "threechains receiver: {}\n", e.what());
        };
      }
      worker.set_am_handler(detail::kAmHello, &on_hello, this);
      worker.set_am_handler(detail::kAmCode, &on_code, this);
      worker.set_am_handler(detail::kAmBye, &on_bye, this);
      worker.set_am_handler(detail::kAmFrame, &on_frame, this);
    }
    Core(const Core&) = delete;
    Core& operator=(const Core&) = delete;
    ~Core() {
      worker.set_am_handler(detail::kAmHello, nullptr, nullptr);
      worker.set_am_handler(detail::kAmCode, nullptr, nullptr);
      worker.set_am_handler(detail::kAmBye, nullptr, nullptr);
      worker.set_am_handler(detail::kAmFrame, nullptr, nullptr);
      for (ucp_conn_request_h request : pending_connections) listener.reject(request);
      while (!peers.empty()) remove_peer(peers.size() - 1);
      outbox.cancel_all(worker);
    }

    unsigned poll() {
      worker.progress();
      // A peer that vanished is noticed by its endpoint's error handler, which
      // cannot reach us; look for such peers every few thousand polls.
      if ((++polls & 0xfff) == 0) control_pending = true;
      if (control_pending) [[unlikely]]
        handle_control();
      unsigned dispatched = 0;
      for (const std::unique_ptr<Peer>& peer : peers) {
        if (peer->ring) dispatched += drain(*peer);
      }
      return dispatched;
    }

    // ---- frames (hot path) -------------------------------------------------
    unsigned drain(Peer& peer) {
      unsigned dispatched = 0;
      for (uint32_t budget = options.dispatch_burst; budget != 0; --budget) {
        std::byte* slot = peer.ring->data() + ((peer.expected - 1) % peer.slots) * peer.slot_size;
        const uint64_t commit = std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(slot))
                                    .load(std::memory_order_acquire);
        if (commit != peer.expected) break;
        if (!dispatch(peer, slot + detail::kCommitWordSize,
                      peer.slot_size - detail::kCommitWordSize)) {
          break;  // waiting for code
        }
        ++peer.expected;
        ++dispatched;
      }
      // A Node sends AM-delivery credits after its queued sends, which may carry them.
      if (peer.reported != peer.expected - 1 && !(defer_am_credits && peer.by_active_message)) {
        return_credit(peer);
      }
      return dispatched;
    }

    // Validates and runs the frame at `frame` (`available` bytes may hold it).
    // Returns false if the frame must wait for its code.
    bool dispatch(Peer& peer, std::byte* frame_bytes, std::size_t available) {
      const std::span<const std::byte> bytes(frame_bytes, available);
      FrameView frame;
      errc e = FrameView::parse(bytes, frame);
      if (e == errc::ok && frame.sequence() != static_cast<uint32_t>(peer.expected))
        e = errc::bad_sequence;
      if (e != errc::ok) [[unlikely]] {
        reject(Error(e, e == errc::bad_sequence
                            ? "frame rejected: sequence " + std::to_string(frame.sequence()) +
                                  " where " + std::to_string(peer.expected) + " was due"
                            : FrameView::describe(e, bytes)));
        return true;
      }
      IfuncMain entry = cache.find(frame.code_id());
      if (entry == nullptr) [[unlikely]] {
        if (!frame.has_code()) return request_code(peer, frame);
        entry = load(frame.code_id(), frame.codec(), frame.code());
        if (entry == nullptr) return true;  // rejected; reported
      }
      peer.stalled_on = 0;
      running = {frame.code_id(), peer.rank};
      entry(frame_bytes + sizeof(FrameHeader), frame.header().payload_size, options.target_args);
      running = {};
      ++stats.frames_dispatched;
      return true;
    }

    // AM delivery: one frame, in UCX's receive buffer. The ifunc gets its
    // payload 16-byte aligned, as from a ring slot, so a misaligned buffer is
    // copied to scratch first.
    void dispatch_delivered(Peer& peer, std::byte* data, std::size_t length) {
      if (!peer.backlog.empty()) [[unlikely]] {
        peer.backlog.emplace_back(data, data + length);
        return;
      }
      std::byte* frame = data;
      if ((reinterpret_cast<uintptr_t>(data + sizeof(FrameHeader)) & 15) != 0) {
        if (scratch.size() * sizeof(ScratchBlock) < length + sizeof(ScratchBlock)) {
          scratch.resize(length / sizeof(ScratchBlock) + 2);
        }
        // header at +8, so the payload (+24 from the frame) lands 16-byte aligned
        frame = reinterpret_cast<std::byte*>(scratch.data()) + 8;
        std::memcpy(frame, data, length);
      }
      if (dispatch(peer, frame, length)) {
        ++peer.expected;
      } else {
        peer.backlog.emplace_back(data, data + length);
      }
    }

    // AM delivery: runs what waited behind a cache miss, in order, once code came.
    void drain_backlog(Peer& peer) {
      while (!peer.backlog.empty()) {
        std::vector<std::byte> head = std::move(peer.backlog.front());
        peer.backlog.pop_front();
        std::vector<ScratchBlock> aligned(head.size() / sizeof(ScratchBlock) + 2);
        std::byte* frame = reinterpret_cast<std::byte*>(aligned.data()) + 8;
        std::memcpy(frame, head.data(), head.size());
        if (!dispatch(peer, frame, head.size())) {
          peer.backlog.push_front(std::move(head));
          return;
        }
        ++peer.expected;
      }
    }

    IfuncMain load(CodeId id, CodecId codec, std::span<const std::byte> code) {
      try {
        const LoadResult result = cache.load(id, codec, code);
        // Keep the code: injected code may send itself, or this ifunc, onward.
        const Ifunc ifunc = Ifunc::from_container(std::vector<std::byte>(code.begin(), code.end()));
        code_by_name[ifunc.name()] = id;
        code_store.insert_or_assign(id, ifunc);
        ++stats.code_loads;
        stats.last_load_time = result.compile_time;
        stats.total_load_time += result.compile_time;
        return result.entry;
      } catch (const Error& error) {
        reject(error);
        return nullptr;
      }
    }

    void reject(const Error& error) {
      ++stats.frames_rejected;
      options.on_error(error);
    }

    // A cached frame for code this target does not hold: ask its source once and
    // leave the frame in its slot (the source cannot overwrite it: no credit).
    bool request_code(Peer& peer, const FrameView& frame) {
      if (peer.stalled_on == peer.expected) return false;
      peer.stalled_on = peer.expected;
      ++stats.cache_misses;
      outbox.send(peer.endpoint, detail::kAmNeedCode,
                  detail::NeedCode{peer.expected, frame.code_id()}, {});
      return false;
    }

    void return_credit(Peer& peer) {
      if (peer.credit_request != nullptr) {
        if (ucp_request_check_status(peer.credit_request) == UCS_INPROGRESS) return;
        ucp_request_free(peer.credit_request);
        peer.credit_request = nullptr;
      }
      peer.credit_value = peer.expected - 1;
      ucp_request_param_t params{};
      ucs_status_ptr_t request;
      if (peer.by_active_message) {
        // Where RMA is emulated (tcp) an AM back is cheaper than a put.
        params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        params.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
        request = ucp_am_send_nbx(peer.endpoint.handle(), detail::kAmCredit, &peer.credit_value,
                                  sizeof(uint64_t), nullptr, 0, &params);
      } else {
        request = ucp_put_nbx(peer.endpoint.handle(), &peer.credit_value, sizeof(uint64_t),
                              peer.credit->address(), peer.credit->rkey(), &params);
      }
      if (UCS_PTR_IS_ERR(request)) [[unlikely]] {
        peer.bye = true;  // the source is unreachable; drop it on the next control round
        control_pending = true;
        return;
      }
      peer.credit_request = request;
      peer.reported = peer.credit_value;
    }

    // ---- control (slow path) ----------------------------------------------
    void handle_control() {
      control_pending = false;
      for (ucp_conn_request_h request : pending_connections) {
        try {
          peers.push_back(std::make_unique<Peer>(Endpoint::accept(worker, request)));
          by_endpoint.emplace(peers.back()->endpoint.handle(), peers.back().get());
          ++stats.peers_connected;
        } catch (const Error& error) {
          options.on_error(error);
        }
      }
      pending_connections.clear();
      for (std::size_t i = 0; i < peers.size(); ++i) {
        Peer& peer = *peers[i];
        if (peer.hello) open_ring(peer);
        for (Peer::Delivery& delivery : peer.deliveries) accept_code(peer, delivery);
        peer.deliveries.clear();
        if (!peer.backlog.empty()) drain_backlog(peer);
        if (peer.endpoint.failed() || peer.bye) {
          if (peer.ring) drain(peer);  // what the source committed before it left still runs
          remove_peer(i--);
        }
      }
      outbox.reap();
      if (!outbox.empty()) control_pending = true;  // keep reaping
    }

    void open_ring(Peer& peer) {
      const detail::Hello hello = *peer.hello;
      peer.hello.reset();
      detail::Welcome welcome{detail::kProtocolVersion, UCS_OK, 0, 0, 0, 0};
      std::vector<std::byte> rkey;
      try {
        if (hello.version != detail::kProtocolVersion || peer.ring) {
          welcome.status = UCS_ERR_UNSUPPORTED;
        } else {
          peer.rank = hello.rank;
          peer.slots = std::min(hello.slots, options.max_slots);
          peer.slot_size = std::min<std::size_t>(hello.slot_size, options.max_slot_size) &
                           ~(detail::kSlotAlignment - 1);
          peer.credit.emplace(peer.endpoint, hello.credit_address, sizeof(uint64_t),
                              peer.hello_rkey);
          peer.ring.emplace(worker.context(), std::size_t{peer.slots} * peer.slot_size);
          rkey = peer.ring->pack_rkey();
          welcome.slots = peer.slots;
          welcome.slot_size = peer.slot_size;
          welcome.ring_address = peer.ring->address();
        }
      } catch (const Error& error) {
        welcome.status =
            error.ucs_status() != UCS_ERR_NO_MESSAGE ? error.ucs_status() : UCS_ERR_NO_RESOURCE;
        peer.ring.reset();
        options.on_error(error);
      }
      outbox.send(peer.endpoint, detail::kAmWelcome, welcome, rkey);
    }

    void accept_code(Peer& peer, Peer::Delivery& delivery) {
      if (delivery.header.found == 0) {
        // The source cannot supply the code: the stalled frame can never run.
        if (peer.stalled_on != 0) {
          reject(Error(errc::unknown_code,
                       "frame " + std::to_string(peer.stalled_on) +
                           " dropped: its source no longer holds the code it names"));
          skip_stalled(peer);
        }
        return;
      }
      if (cache.contains(delivery.header.code_id)) return;
      if (load(delivery.header.code_id, static_cast<CodecId>(delivery.header.codec),
               delivery.code) == nullptr &&
          peer.stalled_on != 0) {
        skip_stalled(peer);  // the code is bad; the frame waiting for it cannot run
      }
    }

    void skip_stalled(Peer& peer) {
      if (peer.stalled_on == peer.expected) {
        ++peer.expected;
        if (!peer.backlog.empty()) peer.backlog.pop_front();  // AM delivery: the frame itself
      }
      peer.stalled_on = 0;
    }

    void remove_peer(std::size_t index) {
      Peer& peer = *peers[index];
      if (peer.credit_request != nullptr) {
        if (ucp_request_check_status(peer.credit_request) == UCS_INPROGRESS) {
          ucp_request_cancel(worker.handle(), peer.credit_request);
        }
        while (ucp_request_check_status(peer.credit_request) == UCS_INPROGRESS) worker.progress();
        ucp_request_free(peer.credit_request);
      }
      by_endpoint.erase(peer.endpoint.handle());
      peer.credit.reset();
      peer.endpoint.close(std::chrono::milliseconds(500));
      ++stats.peers_closed;
      stats.peers_lost += peer.bye ? 0 : 1;
      peers.erase(peers.begin() + static_cast<std::ptrdiff_t>(index));
    }

    Peer* find(const ucp_am_recv_param_t* param) {
      if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0) return nullptr;
      const auto it = by_endpoint.find(param->reply_ep);
      return it == by_endpoint.end() ? nullptr : it->second;
    }

    static ucs_status_t on_hello(void* arg, const void* header, std::size_t header_length,
                                 void* data, std::size_t length, const ucp_am_recv_param_t* param) {
      auto* self = static_cast<Core*>(arg);
      Peer* peer = self->find(param);
      if (peer == nullptr || header_length != sizeof(detail::Hello)) return UCS_OK;
      peer->hello.emplace();
      std::memcpy(&*peer->hello, header, sizeof(detail::Hello));
      peer->hello_rkey.assign(static_cast<const std::byte*>(data),
                              static_cast<const std::byte*>(data) + length);
      self->control_pending = true;
      return UCS_OK;
    }

    static ucs_status_t on_code(void* arg, const void* header, std::size_t header_length,
                                void* data, std::size_t length, const ucp_am_recv_param_t* param) {
      auto* self = static_cast<Core*>(arg);
      Peer* peer = self->find(param);
      if (peer == nullptr || header_length != sizeof(detail::CodeDelivery)) return UCS_OK;
      Peer::Delivery delivery;
      std::memcpy(&delivery.header, header, sizeof(detail::CodeDelivery));
      delivery.code.assign(static_cast<const std::byte*>(data),
                           static_cast<const std::byte*>(data) + length);
      peer->deliveries.push_back(std::move(delivery));
      self->control_pending = true;
      return UCS_OK;
    }

    // AM delivery: the frame runs right here, inside UCX's progress, with no copy
    // unless its payload would be misaligned or it must wait for its code.
    static ucs_status_t on_frame(void* arg, const void* header, std::size_t header_length,
                                 void* data, std::size_t length, const ucp_am_recv_param_t* param) {
      auto* self = static_cast<Core*>(arg);
      Peer* peer = self->find(param);
      if (peer == nullptr || !peer->ring || length < detail::kCommitWordSize) [[unlikely]]
        return UCS_OK;
      peer->by_active_message = true;
      // A piggybacked credit for this process's own channel to that rank.
      if (header_length == sizeof(uint64_t) && peer->credit_word != nullptr) {
        uint64_t consumed;
        std::memcpy(&consumed, header, sizeof(consumed));
        std::atomic_ref<uint64_t> word(*peer->credit_word);
        if (consumed > word.load(std::memory_order_relaxed))
          word.store(consumed, std::memory_order_release);
      }
      // Data: | sequence (8 B) | frame |, like a ring slot.
      self->dispatch_delivered(*peer, static_cast<std::byte*>(data) + detail::kCommitWordSize,
                               length - detail::kCommitWordSize);
      return UCS_OK;
    }

    static ucs_status_t on_bye(void* arg, const void*, std::size_t, void*, std::size_t,
                               const ucp_am_recv_param_t* param) {
      auto* self = static_cast<Core*>(arg);
      if (Peer* peer = self->find(param)) {
        peer->bye = true;
        self->control_pending = true;
      }
      return UCS_OK;
    }

    Worker worker;
    ReceiverOptions options;
    JitCache cache;
    detail::Outbox outbox;
    std::vector<std::unique_ptr<Peer>> peers;
    std::unordered_map<ucp_ep_h, Peer*> by_endpoint;
    std::vector<ucp_conn_request_h> pending_connections;
    bool control_pending = false;
    bool defer_am_credits = false;  // a Node returns them after its queued sends
    uint32_t polls = 0;
    struct alignas(16) ScratchBlock {
      std::byte bytes[16];
    };
    std::vector<ScratchBlock> scratch;  // AM delivery: realigned frames
    ReceiverStats stats;
    DispatchContext running;                               // what is running now, if anything
    std::unordered_map<CodeId, Ifunc> code_store;          // every ifunc this process has loaded
    std::unordered_map<std::string, CodeId> code_by_name;  // the latest code of each name
    Listener listener;  // last: destroyed first, so no connection arrives mid-teardown
  };

  std::unique_ptr<Core> core_;
};

}  // namespace threechains
