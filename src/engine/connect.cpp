// Engine, source role: connecting to a Receiver (one or many at once), the
// handshake up to its welcome, and the delivery a channel's frames take.
#include "asymmetric_fence.hpp"
#include "engine/engine.hpp"

#include <threechains/container.hpp>

#include <cstring>
#include <map>
#include <string_view>

namespace threechains::detail {

namespace {

std::string describe_peer(const std::string& host, uint16_t port) {
  return host + ":" + std::to_string(port);
}

// The slot size a source asks for (aligned), or errc::invalid_argument.
std::size_t checked_slot_size(const ChannelOptions& options) {
  const std::size_t slot_size = (options.slot_size + kSlotAlignment - 1) & ~(kSlotAlignment - 1);
  if (options.slots == 0 || slot_size < kCommitWordSize + sizeof(FrameHeader) + 8) {
    throw Error(errc::invalid_argument,
                "ChannelOptions: need at least one slot of at least 64 bytes (asked for " +
                    std::to_string(options.slots) + " of " + std::to_string(options.slot_size) +
                    ")");
  }
  return slot_size;
}

}  // namespace

std::shared_ptr<Link> Engine::connect(const std::string& host, uint16_t port,
                                      const ChannelOptions& options, int64_t my_rank,
                                      const std::function<void()>& while_waiting) {
  std::shared_ptr<Link> link = begin_connect(host, port, options, my_rank);
  try {
    wait_for_welcome(*link, "connect " + link->peer_name, options, while_waiting);
    finish_outbound(*link, options);
  } catch (...) {
    retire(link);
    throw;
  }
  return link;
}

std::shared_ptr<Link> Engine::begin_connect(const std::string& host, uint16_t port,
                                            const ChannelOptions& options, int64_t my_rank) {
  // Before the endpoint exists: UCX 1.13 cannot close one its connection
  // manager is still connecting.
  (void)checked_slot_size(options);
  auto link = std::make_shared<Link>(Endpoint::connect(worker_, host, port));
  link->peer_name = describe_peer(host, port);
  links_.emplace(link->endpoint.handle(), link);
  try {
    start_outbound(*link, options, my_rank);
  } catch (...) {
    retire(link);
    throw;
  }
  return link;
}

std::vector<std::shared_ptr<Link>> Engine::connect_all(std::span<const ReceiverAddress> targets,
                                                       const ChannelOptions& options,
                                                       std::size_t in_flight_per_target,
                                                       int64_t my_rank,
                                                       const std::function<void()>& while_waiting) {
  const std::size_t window = std::max<std::size_t>(in_flight_per_target, 1);
  std::vector<std::shared_ptr<Link>> links(targets.size());
  std::vector<std::chrono::steady_clock::time_point> deadlines(targets.size());
  std::vector<std::string> what(targets.size());  // for errors, made once
  // Handshakes in flight, per target as written (host, port): each Receiver
  // takes only so many unproven ones from one host, and evicts the oldest
  // beyond that.
  std::map<std::pair<std::string, uint16_t>, std::size_t> in_flight;
  std::vector<std::size_t> unstarted(targets.size());
  for (std::size_t i = 0; i < targets.size(); ++i) unstarted[i] = i;
  std::vector<std::size_t> waiting;  // started, not yet answered
  std::vector<bool> finished(targets.size(), false);
  try {
    while (!unstarted.empty() || !waiting.empty()) {
      // Start what the windows allow, in order; a target whose window is
      // full does not hold back the others (the result is by index).
      std::erase_if(unstarted, [&](std::size_t i) {
        const ReceiverAddress& t = targets[i];
        std::size_t& busy = in_flight[{t.host, t.port}];
        if (busy >= window) return false;
        links[i] = begin_connect(t.host, t.port, options, my_rank);
        deadlines[i] = std::chrono::steady_clock::now() + options.connect_timeout;
        what[i] = "connect " + links[i]->peer_name;
        ++busy;
        waiting.push_back(i);
        return true;
      });
      (void)progress();
      if (while_waiting) while_waiting();
      // Finish the ones whose Receiver answered; throw for the first failure.
      for (std::size_t w = 0; w < waiting.size();) {
        const std::size_t i = waiting[w];
        if (!settled(*links[i], what[i], options, deadlines[i])) {
          ++w;
          continue;
        }
        finish_outbound(*links[i], options);
        finished[i] = true;
        --in_flight[{targets[i].host, targets[i].port}];
        waiting[w] = waiting.back();
        waiting.pop_back();
      }
    }
    // One that opened early may have lost its peer while the others connected.
    for (std::size_t i = 0; i < links.size(); ++i) {
      if (links[i]->endpoint.failed()) throw Error(links[i]->endpoint.status(), what[i]);
      if (links[i]->removed)
        throw Error(errc::peer_gone, what[i] + ": the peer closed the connection");
    }
  } catch (...) {
    abandon_connects(links, deadlines, finished, options);
    throw;
  }
  return links;
}

void Engine::abandon_connects(std::span<const std::shared_ptr<Link>> links,
                              std::span<const std::chrono::steady_clock::time_point> deadlines,
                              const std::vector<bool>& finished,
                              const ChannelOptions& options) noexcept {
  const auto unanswered = [&](std::size_t i) {
    const Link& link = *links[i];
    return link.out && link.out->state == Outbound::State::connecting && !link.endpoint.failed() &&
           !link.removed && std::chrono::steady_clock::now() <= deadlines[i];
  };
  try {
    for (;;) {
      bool any = false;
      for (std::size_t i = 0; i < links.size() && !any; ++i) any = links[i] && unanswered(i);
      if (!any) break;
      (void)progress();
    }
  } catch (...) {  // progress failed: let go as things are
  }
  for (std::size_t i = 0; i < links.size(); ++i) {
    const std::shared_ptr<Link>& link = links[i];
    if (!link) continue;
    if (link->out && link->out->state == Outbound::State::open && !finished[i]) {
      // Its ring as a finished one's, so its goodbye goes where a closed
      // channel's does (over shared memory, also into the credit line).
      try {
        finish_outbound(*link, options);
      } catch (...) {  // not usable from here: let it go without a goodbye
        retire(link);
        continue;
      }
    }
    if (link->out && link->out->state == Outbound::State::open) {
      // As a Channel's release: the goodbye, and the Receiver, having read
      // it, closes the connection (closed here at once, the close could
      // overtake the goodbye on another lane: the peer would count it lost).
      say_goodbye(link);
    } else {
      retire(link);  // refused, failed, or no answer in time
    }
  }
}

void Engine::open_outbound(Link& link, const ChannelOptions& options, int64_t my_rank,
                           const std::function<void()>& while_waiting) {
  start_outbound(link, options, my_rank);
  wait_for_welcome(link, "connect " + link.peer_name, options, while_waiting);
  finish_outbound(link, options);
}

void Engine::start_outbound(Link& link, const ChannelOptions& options, int64_t my_rank) {
  const std::size_t slot_size = checked_slot_size(options);
  if (link.out && link.out->state == Outbound::State::open) {
    throw Error(errc::invalid_argument, "a channel to " + link.peer_name + " is already open");
  }
  const Context& context = worker_.context();
  Outbound& out = link.out.emplace(MemoryRegion(context, kSlotAlignment));
  out.timeout = options.timeout;
  out.hot.consumed_word = reinterpret_cast<uint64_t*>(out.credit.data());
  out.max_code_kept = std::max<std::size_t>(options.max_code_kept, 1);
  const Hello hello = make_hello(out, options, slot_size, my_rank);
  outbox_.send(link.endpoint, kAmHello, hello, out.hello_rkey);
}

void Engine::finish_outbound(Link& link, const ChannelOptions& options) {
  const std::size_t slot_size = checked_slot_size(options);
  Outbound& out = *link.out;
  const Context& context = worker_.context();
  if (out.hot.slots > options.slots || out.hot.slot_size > slot_size) {
    out.state = Outbound::State::refused;
    throw Error(errc::protocol, "connect " + link.peer_name +
                                    ": the Receiver granted a larger ring than asked for");
  }
  out.in_flight.resize(std::size_t{out.hot.slots} * 2);
  out.am_headers.assign(out.hot.slots, 0);
  out.am_pieces.assign(out.hot.slots, {});
  out.delivery = resolve_delivery(options.delivery, link);
  if (out.delivery == Delivery::put && !out.credit_by_put) {
    out.state = Outbound::State::refused;
    throw Error(
        UCS_ERR_UNSUPPORTED,
        "connect " + link.peer_name +
            ": Delivery::put needs remote memory access on both sides "
            "(ContextOptions::remote_memory_access), and " +
            (worker_.context().remote_memory_access() ? "the Receiver's context" : "this context") +
            " has none");
  }
  if (out.delivery != Delivery::direct) {
    out.staging.emplace(context, std::size_t{out.hot.slots} * out.hot.slot_size);
    out.hot.staging = out.staging->data();
  } else {
    out.hot.direct_ring = static_cast<std::byte*>(out.ring->direct_pointer());
    if (out.hot.direct_ring == nullptr) {
      out.state = Outbound::State::refused;
      throw Error(UCS_ERR_UNSUPPORTED, "connect " + link.peer_name +
                                           ": Delivery::direct, but UCX cannot map this "
                                           "target's ring here");
    }
    // Credits not put to us are read where the target stores them. The
    // pointer is into the mapping `out.ring` holds: both live in this Outbound,
    // and the Channel that reads it holds the Link.
    auto* credit_line = reinterpret_cast<uint64_t*>(out.hot.direct_ring +
                                                    std::size_t{out.hot.slots} * out.hot.slot_size);
    if (!out.credit_by_put) out.hot.consumed_word = credit_line;
    // Frames stored here wake nobody: the commit looks whether the target sleeps.
    out.hot.sleep_word = credit_line + kCreditLineSleep;
    out.hot.bye_word = credit_line + kCreditLineBye;
    out.hot.full_fence = !hot_side_registered();
  }
}

void Engine::wait_for_welcome(Link& link, const std::string& what, const ChannelOptions& options,
                              const std::function<void()>& while_waiting) {
  const auto deadline = std::chrono::steady_clock::now() + options.connect_timeout;
  do {
    progress();
    if (while_waiting) while_waiting();
  } while (!settled(link, what, options, deadline));
}

bool Engine::settled(Link& link, const std::string& what, const ChannelOptions& options,
                     std::chrono::steady_clock::time_point deadline) {
  Outbound& out = *link.out;
  if (out.state == Outbound::State::connecting) {
    // A refusal says why; the target's close that follows it may be seen
    // first (over shared memory the refusal waits in another lane's queue):
    // look for the refusal a little longer before reporting the reset.
    if (link.endpoint.failed()) {
      const auto grace = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
      while (out.state == Outbound::State::connecting && std::chrono::steady_clock::now() < grace)
        progress();
      if (out.state == Outbound::State::connecting) throw Error(link.endpoint.status(), what);
    } else if (link.removed) {
      throw Error(errc::peer_gone, what + ": the peer closed the connection");
    } else if (std::chrono::steady_clock::now() > deadline) {
      throw Error(errc::timeout, what + ": no answer from a Receiver within " +
                                     std::to_string(options.connect_timeout.count()) + " ms");
    } else {
      return false;
    }
  }
  if (out.state == Outbound::State::closed)
    throw Error(errc::peer_gone, what + ": the channel was closed while it connected");
  if (out.state == Outbound::State::refused) {
    const std::string reason = out.refusal_reason.empty() ? "" : ": " + out.refusal_reason;
    if (out.refusal == UCS_ERR_REJECTED) throw Error(errc::peer_refused, what + reason);
    throw Error(out.refusal, what + ": refused" + reason);
  }
  return true;
}

// UCX 1.13 cannot be asked which transport carries RMA, so: a direct pointer
// to the ring means shared memory; without RMA on both sides, AM; otherwise
// read the endpoint's lane table, and if every RMA lane is tcp (RMA emulated
// in software), use AM.
Delivery Engine::resolve_delivery(Delivery wanted, const Link& link) const {
  if (wanted != Delivery::automatic) return wanted;
  if (link.out->ring->direct_pointer() != nullptr) return Delivery::direct;
  if (!link.out->credit_by_put) return Delivery::active_message;
  const std::string lanes = link.endpoint.describe();
  bool any = false;
  std::size_t at = 0;
  while (at < lanes.size()) {
    const std::size_t end = std::min(lanes.find('\n', at), lanes.size());
    const std::string_view line(lanes.data() + at, end - at);
    if (line.find("lane[") != std::string_view::npos &&
        line.find("rma") != std::string_view::npos) {
      if (line.find("tcp/") == std::string_view::npos) return Delivery::put;
      any = true;
    }
    at = end + 1;
  }
  return any ? Delivery::active_message : Delivery::put;
}

}  // namespace threechains::detail
