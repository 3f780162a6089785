// Node: a Receiver plus a Channel to every other rank on one engine, and the
// runtime injected code calls (<threechains/runtime.h>).
#include "engine/engine.hpp"

#include <threechains/node.hpp>

#include <cstring>
#include <deque>
#include <optional>
#include <unordered_map>

namespace threechains {
namespace detail {

struct NodeCore {
  NodeCore(Worker worker, int64_t my_rank, int64_t rank_count, NodeOptions node_options)
      : engine(Engine::of(worker)),
        rank(my_rank),
        ranks(rank_count),
        options(std::move(node_options)),
        receiver(started(engine, options.receiver)) {
    engine->serve_as_node(&hooks, options.defer_credits);
    hooks.node = this;
    hooks.rank = [](void* p) { return static_cast<NodeCore*>(p)->rank; };
    hooks.ranks = [](void* p) { return static_cast<NodeCore*>(p)->ranks; };
    hooks.origin = [](void* p) {
      return static_cast<NodeCore*>(p)->engine->target().running.origin_rank;
    };
    hooks.send_self = [](void* p, int64_t to, const void* payload, std::size_t size) {
      auto* core = static_cast<NodeCore*>(p);
      const CodeId id = core->engine->target().running.code_id;
      const Ifunc* ifunc = core->engine->stored(id);
      if (ifunc == nullptr) {
        return core->refuse("threechains_send_self: the running ifunc's code is not kept here");
      }
      return core->queue(to, *ifunc, payload, size, core->engine->confinement_of(id));
    };
    hooks.send_named = [](void* p, int64_t to, const char* name, const void* payload,
                          std::size_t size) {
      auto* core = static_cast<NodeCore*>(p);
      const std::string wanted = name != nullptr ? name : "";
      const Ifunc* ifunc = core->engine->stored(wanted);
      if (ifunc == nullptr) {
        return core->refuse("threechains_send_named: rank " + std::to_string(core->rank) +
                            " holds no ifunc named '" + wanted + "'");
      }
      return core->queue(to, *ifunc, payload, size, core->engine->confinement_of(ifunc->id()));
    };
    hooks.lookup = [](void* p, const char* name) -> void* {
      auto* core = static_cast<NodeCore*>(p);
      const auto it = core->named.find(name != nullptr ? name : "");
      return it == core->named.end() ? nullptr : it->second;
    };
  }

  // Starts the target role before a Receiver handle owns it: if this throws
  // (the Worker already has a Receiver), no handle stops that one.
  static std::shared_ptr<Engine> started(const std::shared_ptr<Engine>& engine,
                                         const ReceiverOptions& options) {
    engine->start_target(options);
    return engine;
  }

  // Queues a send from injected code; returns 0, or -1 (reported) if it cannot be done.
  int queue(int64_t to, const Ifunc& ifunc, const void* payload, std::size_t size,
            Confine confine) {
    if (to < 0 || to >= ranks) {
      return refuse("a send from ifunc '" + ifunc.name() + "' to rank " + std::to_string(to) +
                    ", outside [0, " + std::to_string(ranks) + ")");
    }
    if (pending.size() >= options.max_queued_sends ||
        size > options.max_queued_bytes - std::min(queued_bytes, options.max_queued_bytes)) {
      // Reported once per full spell, not once per refused send: an ifunc
      // that sends in a loop would otherwise flood the log too.
      ++stats.failed_sends;
      if (!queue_full_reported) {
        queue_full_reported = true;
        engine->report(Error(errc::limit_exceeded,
                             "a send from ifunc '" + ifunc.name() + "' refused: the send queue " +
                                 "holds " + std::to_string(pending.size()) + " sends of " +
                                 std::to_string(queued_bytes) + " bytes (NodeOptions::" +
                                 "max_queued_sends, max_queued_bytes)"));
      }
      return -1;
    }
    std::vector<std::byte> buffer;
    if (!spare.empty()) {
      buffer = std::move(spare.back());
      spare.pop_back();
    }
    buffer.resize(size);
    if (size != 0) std::memcpy(buffer.data(), payload, size);
    pending.push_back({to, ifunc, std::move(buffer), confine, engine->target().running.caller});
    queued_bytes += size;
    stats.max_queued = std::max(stats.max_queued, pending.size());
    return 0;
  }

  int refuse(const std::string& why) {
    ++stats.failed_sends;
    engine->report(Error(errc::invalid_argument, why));
    return -1;
  }

  Channel& channel(int64_t to) {
    if (to < 0 || to >= ranks || to == rank || !channels[static_cast<std::size_t>(to)]) {
      throw Error(errc::invalid_argument, "Node rank " + std::to_string(rank) +
                                              ": no channel to rank " + std::to_string(to));
    }
    return *channels[static_cast<std::size_t>(to)];
  }

  unsigned poll() {
    unsigned work = engine->poll_without_credits();
    work += drain_queue();
    engine->return_credits();  // what no queued frame carried back
    engine->start_due_compiles();
    return work;
  }

  // Sends queued for a full ring wait for a credit the peer may store into
  // its credit line (no message): the Node keeps polling until they are out.
  bool sleep(std::chrono::milliseconds limit) {
    if (!pending.empty()) return true;
    return engine->sleep_until_work(limit);
  }

  // Carries out queued sends in order; a full ring leaves the rest for later.
  unsigned drain_queue() {
    unsigned done = 0;
    while (!pending.empty() && done < options.sends_per_poll) {
      Pending& next = pending.front();
      if (next.rank == rank) {
        // Local: run it here, from the loop, not from inside the sender.
        const CachedIfunc* entry = engine->target().cache.find_ifunc(next.ifunc.id());
        if (entry == nullptr) {  // evicted under the cache's limits since it was queued
          try {
            engine->install(next.ifunc, next.confine);
            entry = engine->target().cache.find_ifunc(next.ifunc.id());
          } catch (const Error& error) {
            engine->report(error);
          }
        }
        if (entry != nullptr) {
          if (const std::optional<ConfinedTrap> trap = engine->run_entry(
                  *entry, next.ifunc.id(), rank, "this rank", next.payload.data(),
                  next.payload.size(), next.caller))
            engine->report(engine->trap_error(*entry, next.ifunc.id(), *trap, "this rank"));
          ++stats.local_dispatches;
        } else {
          (void)refuse("ifunc '" + next.ifunc.name() + "' is no longer loaded on rank " +
                       std::to_string(rank));
        }
      } else {
        // Still connecting to that rank (frames arrive while we connect): later.
        const auto to = static_cast<std::size_t>(next.rank);
        if (to >= channels.size() || !channels[to]) break;
        const std::vector<std::byte>& payload = next.payload;
        try {
          const SendStatus status =
              channels[to]->try_send_with(next.ifunc, payload.size(), [&](std::byte* out) {
                if (!payload.empty()) std::memcpy(out, payload.data(), payload.size());
              });
          if (status == SendStatus::would_block) break;
          ++stats.sends;
        } catch (const Error& error) {  // that rank is gone: the send is lost, and said so
          ++stats.failed_sends;
          engine->report(error);
        }
      }
      queued_bytes -= next.payload.size();
      queue_full_reported = false;
      // Kept for the next sends, a few and no larger than a slot needs.
      if (spare.size() < 64 && next.payload.capacity() <= (std::size_t{1} << 20))
        spare.push_back(std::move(next.payload));
      pending.pop_front();
      ++done;
    }
    return done;
  }

  struct Pending {
    int64_t rank;
    Ifunc ifunc;  // a handle: shares the kept code
    std::vector<std::byte> payload;
    Confine confine;  // how its code runs here, should it have to be loaded again
    uint64_t caller;  // whose key the sending invocation ran for: a local send runs for it too
  };

  // Destroyed bottom up: queued sends, then channels (goodbyes), then the
  // Receiver (which unhooks the runtime from the engine), then the hooks.
  std::shared_ptr<Engine> engine;
  int64_t rank;
  int64_t ranks;
  NodeOptions options;
  RuntimeHooks hooks;
  std::unordered_map<std::string, void*> named;
  NodeStats stats;
  Receiver receiver;  // the target role of `engine`, stopped when the Node goes
  std::vector<std::optional<Channel>> channels;
  std::deque<Pending> pending;  // references to queued entries stay valid across push_back
  std::size_t queued_bytes = 0;  // payload bytes in `pending`
  bool queue_full_reported = false;  // since the queue last had room
  std::vector<std::vector<std::byte>> spare;  // payload buffers to reuse
};

}  // namespace detail

Node::Node(Worker worker, int64_t rank, int64_t ranks, NodeOptions options) {
  if (ranks <= 0 || rank < 0 || rank >= ranks) {
    throw Error(errc::invalid_argument, "Node: rank " + std::to_string(rank) + " outside [0, " +
                                            std::to_string(ranks) + ")");
  }
  core_ = std::make_unique<detail::NodeCore>(std::move(worker), rank, ranks, std::move(options));
}

Node::Node(Node&& other) noexcept = default;

Node& Node::operator=(Node&& other) noexcept {
  if (this != &other) {
    stop();
    core_.reset();  // its channels say goodbye, its Receiver stops
    core_ = std::move(other.core_);
  }
  return *this;
}

Node::~Node() {
  stop();
}

uint16_t Node::port() const noexcept {
  return core_->receiver.port();
}
int64_t Node::rank() const noexcept {
  return core_->rank;
}
int64_t Node::ranks() const noexcept {
  return core_->ranks;
}
Receiver& Node::receiver() noexcept {
  return core_->receiver;
}
const Worker& Node::worker() const noexcept {
  return core_->engine->worker();
}
const NodeStats& Node::stats() const noexcept {
  return core_->stats;
}
std::size_t Node::queued() const noexcept {
  return core_->pending.size();
}
unsigned Node::yield_after() const noexcept {
  return std::max<unsigned>(core_->options.yield_after, 1);
}

unsigned Node::serve_round() {
  const unsigned work = poll();
  return work + core_->engine->last_events();
}

const ProgressOptions& Node::progress_options() const noexcept {
  return core_->options.receiver.progress;
}

bool Node::wait(std::chrono::milliseconds limit) {
  core_->engine->check_not_threaded("Node::wait");
  return core_->sleep(limit);
}

void Node::wake() noexcept {
  if (core_) core_->engine->wake();
}

void Node::connect(const std::vector<NodeAddress>& addresses) {
  detail::NodeCore& c = *core_;
  c.engine->check_not_threaded("Node::connect");
  if (static_cast<int64_t>(addresses.size()) != c.ranks) {
    throw Error(errc::invalid_argument, "Node::connect: " + std::to_string(addresses.size()) +
                                            " addresses for " + std::to_string(c.ranks) + " ranks");
  }
  c.channels.resize(addresses.size());
  const auto serve = [&c] { (void)c.poll(); };
  // Higher ranks: this rank opens the connection. One at a time: all ranks
  // connecting at once would put every lower rank's handshake on a rank
  // together, past its Receiver's limits on unproven connections
  // (ReceiverLimits::max_pending_*), which evict the oldest.
  for (int64_t r = c.rank + 1; r < c.ranks; ++r) {
    const NodeAddress& a = addresses[static_cast<std::size_t>(r)];
    std::shared_ptr<detail::Link> link =
        c.engine->connect(a.host, a.port, c.options.channel, c.rank, serve);
    link->rank = r;
    c.channels[static_cast<std::size_t>(r)].emplace(Channel(c.engine, std::move(link)));
  }
  // Lower ranks connect here; send back over the same connection.
  for (int64_t r = 0; r < c.rank; ++r) {
    const auto deadline = std::chrono::steady_clock::now() + c.options.channel.connect_timeout;
    std::shared_ptr<detail::Link> link;
    while (!(link = c.engine->inbound_link_of_rank(r))) {
      serve();
      if (std::chrono::steady_clock::now() > deadline) {
        throw Error(errc::timeout, "Node rank " + std::to_string(c.rank) + ": rank " +
                                       std::to_string(r) + " did not connect within " +
                                       std::to_string(c.options.channel.connect_timeout.count()) +
                                       " ms");
      }
    }
    c.engine->open_outbound(*link, c.options.channel, c.rank, serve);
    c.channels[static_cast<std::size_t>(r)].emplace(Channel(c.engine, std::move(link)));
  }
}

void Node::expose(const std::string& name, void* object) {
  core_->engine->check_not_threaded("Node::expose");
  core_->named[name] = object;
}

void Node::expose(const std::string& name, std::span<std::byte> bytes, bool writable) {
  core_->engine->check_not_threaded("Node::expose");
  core_->named[name] = bytes.data();
  detail::Target& target = core_->engine->target();
  std::erase_if(target.options.exposed, [&](const ExposedRegion& r) { return r.name == name; });
  target.options.exposed.push_back({name, bytes, writable});
  core_->engine->expose_anew();
}

void Node::send_bytes(int64_t rank, const Ifunc& ifunc, std::span<const std::byte> payload) {
  detail::NodeCore& c = *core_;
  c.engine->check_not_threaded("Node::send");
  if (rank == c.rank) {
    c.engine->install(ifunc);  // the application's own: as it is
    if (c.queue(rank, ifunc, payload.data(), payload.size(), Confine::no) != 0)
      throw Error(errc::invalid_argument,
                  "Node: cannot queue a send to rank " + std::to_string(rank));
    return;
  }
  Channel& ch = c.channel(rank);
  while (ch.try_send_with(ifunc, payload.size(), [&](std::byte* out) {
    if (!payload.empty()) std::memcpy(out, payload.data(), payload.size());
  }) == SendStatus::would_block) {
    (void)c.poll();
    c.engine->check_sendable(*ch.link_, "send");
  }
}

unsigned Node::poll() {
  core_->engine->check_not_threaded("Node::poll");
  return core_->poll();
}

void Node::start() {
  detail::NodeCore* core = core_.get();  // the thread is joined before the core goes
  core->engine->start_thread([core] { return core->poll() + core->engine->last_events(); },
                             [core](std::chrono::milliseconds limit) { (void)core->sleep(limit); },
                             core->options.receiver.progress, yield_after());
}

void Node::stop() noexcept {
  if (core_) core_->engine->stop_thread();
}

Channel& Node::channel(int64_t rank) {
  return core_->channel(rank);
}

void Node::close() {
  detail::NodeCore& c = *core_;
  c.engine->check_not_threaded("Node::close");
  const auto queue_deadline = std::chrono::steady_clock::now() + c.options.channel.timeout;
  while (!c.pending.empty()) {
    (void)c.poll();
    if (std::chrono::steady_clock::now() > queue_deadline) {
      throw Error(errc::timeout, "Node rank " + std::to_string(c.rank) +
                                     ": close: " + std::to_string(c.pending.size()) +
                                     " queued sends could not be carried out");
    }
  }
  // Credits a poll deferred (a reply might have carried them) go now: the
  // other ranks may be flushing their channels to us.
  c.engine->return_credits(detail::Engine::CreditTiming::now);
  for (std::optional<Channel>& ch : c.channels) {
    if (!ch) continue;
    // The other rank may be waiting for our Receiver to consume its frames.
    const auto deadline = std::chrono::steady_clock::now() + c.options.channel.timeout;
    while (ch->frames_in_flight() != 0 && std::chrono::steady_clock::now() < deadline) {
      (void)c.poll();
      c.engine->return_credits(detail::Engine::CreditTiming::now);
    }
    ch->close();
    ch.reset();
  }
}

}  // namespace threechains
