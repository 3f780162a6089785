// Node: one process of a mesh of ranks that send ifuncs to each other (X-RDMA).
// It owns a Receiver (for frames sent to it) and a Channel to every other rank,
// all on one Worker, and it is the runtime that injected code calls through
// <threechains/runtime.h>: sends from inside an ifunc are queued and carried
// out by poll() after the ifunc returns — never a re-entrant UCX progress,
// never a wait for credits inside a dispatch, never a deeper stack.
#pragma once

#include <threechains/channel.hpp>
#include <threechains/detail/runtime_hooks.hpp>
#include <threechains/receiver.hpp>

#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace threechains {

struct NodeAddress {
  std::string host;
  uint16_t port = 0;
};

struct NodeOptions {
  ReceiverOptions receiver;      // port, target_args, JIT options of this rank's Receiver
  ChannelOptions channel;        // ring geometry and delivery of the channels to other ranks
  uint32_t sends_per_poll = 64;  // queued sends carried out per poll, at most
  // Empty polls before run() yields the CPU. Ranks of a mesh wait on each
  // other; on a machine with fewer cores than ranks, a short spin keeps the
  // rank that has work from waiting for a time slice.
  uint32_t yield_after = 16;
};

struct NodeStats {
  uint64_t local_dispatches = 0;  // ifuncs an ifunc sent to its own rank
  uint64_t sends = 0;             // ifuncs sent to other ranks from injected code
  std::size_t max_queued = 0;     // the deepest the send queue got
};

class Node {
 public:
  Node(Worker worker, int64_t rank, int64_t ranks, NodeOptions options = {})
      : state_(std::make_unique<State>(std::move(worker), rank, ranks, std::move(options))) {
    if (rank < 0 || rank >= ranks) throw Error(errc::protocol, "Node: rank out of range");
    // Ifuncs delivered by AM run inside UCX progress, which also happens while
    // connecting: the runtime must be reachable from the start.
    detail::set_runtime_hooks(&state_->hooks);
    state_->receiver.defer_am_credits(true);
  }
  Node(Node&&) noexcept = default;
  Node& operator=(Node&&) noexcept = default;
  ~Node() {
    if (state_) detail::set_runtime_hooks(nullptr);
  }

  [[nodiscard]] uint16_t port() const noexcept { return state_->receiver.port(); }
  [[nodiscard]] int64_t rank() const noexcept { return state_->rank; }
  [[nodiscard]] int64_t ranks() const noexcept { return state_->ranks; }
  [[nodiscard]] Receiver& receiver() noexcept { return state_->receiver; }
  [[nodiscard]] const Worker& worker() const noexcept { return state_->worker; }
  [[nodiscard]] const NodeStats& stats() const noexcept { return state_->stats; }
  [[nodiscard]] std::size_t queued() const noexcept { return state_->pending.size(); }

  // Connects to every other rank (addresses[r] is rank r's Receiver; this
  // rank's own entry is ignored), serving this rank's Receiver meanwhile.
  void connect(const std::vector<NodeAddress>& addresses) {
    State& s = *state_;
    if (static_cast<int64_t>(addresses.size()) != s.ranks) {
      throw Error(errc::protocol, "Node::connect: need one address per rank");
    }
    ChannelOptions options = s.options.channel;
    options.rank = s.rank;
    s.channels.resize(addresses.size());
    for (int64_t r = 0; r < s.ranks; ++r) {
      if (r == s.rank) continue;
      s.channels[r] = std::make_unique<Channel>(
          s.source.connect(addresses[r].host, addresses[r].port, options, [this] { poll(); }));
    }
    s.linked.assign(static_cast<std::size_t>(s.ranks), false);
    s.unlinked = s.ranks - 1;
    link_credits();
  }

  // Makes an object of this process reachable from injected code by name.
  void expose(const std::string& name, void* object) { state_->named[name] = object; }

  // Sends `ifunc` with `value` to `rank` from host code (not from inside an
  // ifunc: there, use the runtime). Serves this rank's Receiver while the
  // destination's ring is full.
  template <TriviallyCopyablePayload T>
  void send(int64_t rank, const Ifunc& ifunc, const T& value) {
    send_bytes(rank, ifunc, std::as_bytes(std::span(&value, 1)));
  }
  void send_bytes(int64_t rank, const Ifunc& ifunc, std::span<const std::byte> payload) {
    State& s = *state_;
    if (rank == s.rank) {
      s.receiver.install(ifunc);
      enqueue(rank, s.receiver.code(ifunc.id()), payload.data(), payload.size());
      return;
    }
    Channel& ch = channel(rank);
    while (ch.try_send_with(ifunc, payload.size(), [&](std::byte* out) {
      if (!payload.empty()) std::memcpy(out, payload.data(), payload.size());
    }) == SendStatus::would_block) {
      poll();
    }
  }

  // Receives and runs frames, then carries out what the ifuncs queued.
  unsigned poll() {
    State& s = *state_;
    detail::set_runtime_hooks(&s.hooks);
    unsigned work = s.receiver.poll();
    if (s.unlinked != 0) [[unlikely]]
      link_credits();
    work += drain_queue();
    s.receiver.return_pending_credits();  // what no queued frame carried back
    return work;
  }

  template <class StopCondition>
  void run(StopCondition&& stop) {
    detail::spin_until([this] { return poll(); }, stop, state_->options.yield_after);
  }

  [[nodiscard]] Channel& channel(int64_t rank) {
    State& s = *state_;
    if (rank < 0 || rank >= s.ranks || rank == s.rank || !s.channels[rank]) {
      throw Error(errc::protocol, "Node: no channel to rank " + std::to_string(rank));
    }
    return *s.channels[rank];
  }

  // Finishes queued sends and closes every channel (each says goodbye).
  void close() {
    State& s = *state_;
    while (!s.pending.empty()) poll();
    for (auto& ch : s.channels) {
      if (!ch) continue;
      // The other rank may be waiting for our Receiver to consume its frames.
      while (ch->frames_in_flight() != 0) poll();
      ch->close();
      ch.reset();
    }
  }

 private:
  struct Pending {
    int64_t rank;
    const Ifunc* ifunc;  // in the Receiver's code store, which never moves its entries
    std::vector<std::byte> payload;
  };

  struct State {
    State(Worker w, int64_t r, int64_t n, NodeOptions o)
        : worker(std::move(w)),
          rank(r),
          ranks(n),
          options(std::move(o)),
          receiver(worker, options.receiver),
          source(worker) {
      hooks.node = this;
      hooks.rank = [](void* p) { return static_cast<State*>(p)->rank; };
      hooks.ranks = [](void* p) { return static_cast<State*>(p)->ranks; };
      hooks.origin = [](void* p) { return static_cast<State*>(p)->receiver.running().origin_rank; };
      hooks.send_self = [](void* p, int64_t to, const void* payload, std::size_t size) {
        auto* s = static_cast<State*>(p);
        return s->queue(to, s->receiver.code(s->receiver.running().code_id), payload, size);
      };
      hooks.send_named = [](void* p, int64_t to, const char* name, const void* payload,
                            std::size_t size) {
        auto* s = static_cast<State*>(p);
        return s->queue(to, name != nullptr ? s->receiver.code(std::string(name)) : nullptr,
                        payload, size);
      };
      hooks.lookup = [](void* p, const char* name) -> void* {
        auto* s = static_cast<State*>(p);
        const auto it = s->named.find(name != nullptr ? name : "");
        return it == s->named.end() ? nullptr : it->second;
      };
    }

    int queue(int64_t to, const Ifunc* ifunc, const void* payload, std::size_t size) {
      if (ifunc == nullptr || to < 0 || to >= ranks) return -1;
      std::vector<std::byte> buffer;
      if (!spare.empty()) {
        buffer = std::move(spare.back());
        spare.pop_back();
      }
      buffer.resize(size);
      if (size != 0) std::memcpy(buffer.data(), payload, size);
      pending.push_back({to, ifunc, std::move(buffer)});
      stats.max_queued = std::max(stats.max_queued, pending.size());
      return 0;
    }

    Worker worker;
    int64_t rank;
    int64_t ranks;
    NodeOptions options;
    Receiver receiver;
    Source source;
    std::vector<std::unique_ptr<Channel>> channels;
    std::unordered_map<std::string, void*> named;
    std::deque<Pending> pending;
    std::vector<std::vector<std::byte>> spare;  // payload buffers to reuse
    detail::RuntimeHooks hooks;
    NodeStats stats;
    std::vector<bool> linked;  // per rank: the two directions share credits
    int64_t unlinked = 0;
  };

  void enqueue(int64_t rank, const Ifunc* ifunc, const std::byte* payload, std::size_t size) {
    if (state_->queue(rank, ifunc, payload, size) != 0)
      throw Error(errc::protocol, "Node: cannot queue send");
  }

  // Pairs each AM-delivery channel with the Receiver peer of the same rank, once
  // that rank has connected here, so their credits ride on each other's frames.
  void link_credits() {
    State& s = *state_;
    for (int64_t r = 0; r < s.ranks; ++r) {
      if (r == s.rank || s.linked[r] || !s.channels[r]) continue;
      if (s.channels[r]->delivery() != Delivery::active_message) {
        s.linked[r] = true;  // puts and direct stores need no help
        --s.unlinked;
        continue;
      }
      if (auto link = s.receiver.link_credits(r, s.channels[r]->credit_word())) {
        s.channels[r]->share_credits(*link);
        s.linked[r] = true;
        --s.unlinked;
      }
    }
  }

  // Carries out queued sends in order; a full ring leaves the rest for later.
  unsigned drain_queue() {
    State& s = *state_;
    unsigned done = 0;
    while (!s.pending.empty() && done < s.options.sends_per_poll) {
      Pending& next = s.pending.front();
      if (next.rank == s.rank) {
        // Local: run it here, from the loop, not from inside the sender.
        const IfuncMain entry = s.receiver.cache().find(next.ifunc->id());
        if (entry != nullptr) {
          s.receiver.set_running({next.ifunc->id(), s.rank});
          entry(next.payload.data(), next.payload.size(), s.receiver.target_args());
          s.receiver.set_running({});
          ++s.stats.local_dispatches;
        }
      } else {
        // Still connecting to that rank (frames arrive while we connect): later.
        if (static_cast<std::size_t>(next.rank) >= s.channels.size() || !s.channels[next.rank])
          break;
        const std::vector<std::byte>& payload = next.payload;
        const SendStatus status =
            s.channels[next.rank]->try_send_with(*next.ifunc, payload.size(), [&](std::byte* out) {
              if (!payload.empty()) std::memcpy(out, payload.data(), payload.size());
            });
        if (status == SendStatus::would_block) break;
        ++s.stats.sends;
      }
      s.spare.push_back(std::move(next.payload));
      s.pending.pop_front();
      ++done;
    }
    return done;
  }

  std::unique_ptr<State> state_;
};

}  // namespace threechains
