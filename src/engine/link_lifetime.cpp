// Engine, links after set-up: goodbyes, what a channel may still do, code a
// target asked for, the control round (admission, lost peers), and how a
// link is closed, retired and reaped.
#include "engine/admission.hpp"
#include "engine/engine.hpp"

#include <threechains/container.hpp>

#include <cstring>

namespace threechains::detail {

void Engine::say_goodbye(const std::shared_ptr<Link>& link) noexcept {
  if (on_other_thread()) {
    // The progress thread owns the worker (and the link): hand the goodbye over.
    try {
      const std::lock_guard lock(goodbyes_mutex_);
      deferred_goodbyes_.push_back(link);
      goodbyes_pending_.store(true, std::memory_order_release);
      wake();        // the thread may sleep
    } catch (...) {  // out of memory: the peer will see us as lost instead
    }
    return;
  }
  say_goodbye_here(*link);
}

void Engine::take_deferred_goodbyes() noexcept {
  std::vector<std::shared_ptr<Link>> links;
  {
    const std::lock_guard lock(goodbyes_mutex_);
    links.swap(deferred_goodbyes_);
    goodbyes_pending_.store(false, std::memory_order_relaxed);
  }
  for (const std::shared_ptr<Link>& link : links) say_goodbye_here(*link);
}

void Engine::say_goodbye_here(Link& link) noexcept {
  if (!link.out || link.out->state != Outbound::State::open) {
    if (link.out) link.out->state = Outbound::State::closed;
    return;
  }
  link.out->state = Outbound::State::closed;
  if (link.removed) return;  // the peer is gone; nothing to say
  try {
    // Puts and the goodbye travel on different paths; order them.
    if (link.out->delivery == Delivery::put) worker_.fence();
    if (link.out->hot.bye_word != nullptr)  // after every frame's commit (program order, release)
      std::atomic_ref<uint64_t>(*link.out->hot.bye_word).store(1, std::memory_order_release);
    outbox_.send(link.endpoint, kAmBye, uint64_t{0}, {});
  } catch (const Error&) {  // the peer went away meanwhile: it will be noticed as lost
  }
  if (!link.receiving() && !link.handshake.hello) {
    const auto it = links_.find(link.endpoint.handle());
    if (it != links_.end()) retire(it->second);
  }
}

bool Engine::closing(const Link& link) const noexcept {
  for (const Closing& c : closing_)
    if (c.link.get() == &link) return true;
  return false;
}

void Engine::check_sendable(const Link& link, const char* operation) const {
  if (link.endpoint.failed()) [[unlikely]] {
    throw Error(link.endpoint.status(),
                "channel to " + link.peer_name + ": " + operation + ": the target went away");
  }
  if (link.removed) [[unlikely]] {
    throw Error(errc::peer_gone, "channel to " + link.peer_name + ": " + operation +
                                     ": the target closed the connection");
  }
  if (link.out && !link.out->broken.empty()) [[unlikely]] {
    throw Error(link.out->broken_as,
                "channel to " + link.peer_name + ": " + operation + ": " + link.out->broken);
  }
  if (!link.out || link.out->state != Outbound::State::open) [[unlikely]] {
    throw Error(errc::invalid_argument,
                "channel to " + link.peer_name + ": " + operation + ": the channel is closed");
  }
}

void Engine::throw_code_refusal(Link& link, const char* operation) {
  if (!link.out || link.out->code_refusals.empty()) return;
  Outbound::CodeRefusal first = std::move(link.out->code_refusals.front());
  const std::size_t more = link.out->code_refusals.size() - 1 + link.out->code_refusals_dropped;
  link.out->code_refusals.clear();
  link.out->code_refusals_dropped = 0;
  const char* what = first.error == errc::code_trapped ? ": the target stopped an ifunc: "
                                                       : ": the target refused code: ";
  throw Error(first.error, "channel to " + link.peer_name + ": " + operation + what +
                               first.message +
                               (more != 0 ? " (and " + std::to_string(more) + " more)" : ""));
}

void Engine::serve_code_requests() {
  code_requests_pending_ = false;
  for (auto& [ep, link] : links_) {
    if (!link->out || link->out->code_requests.empty()) continue;
    Outbound& out = *link->out;
    for (const NeedCode& request : out.code_requests) {
      CodeDelivery delivery{};
      delivery.code_id = request.code_id;
      try {
        const auto it = out.sent.find(request.code_id);
        if (it == out.sent.end()) {
          outbox_.send(link->endpoint, kAmCode, delivery, {});
          continue;
        }
        delivery.codec = static_cast<uint8_t>(it->second.ifunc.codec());
        delivery.found = 1;
        // The Ifunc handle keeps the code alive until UCX is done with it.
        auto keep = std::make_shared<Ifunc>(it->second.ifunc);
        const std::span<const std::byte> code = keep->code();
        outbox_.send(link->endpoint, kAmCode, delivery, code, std::move(keep));
        out.code_unconfirmed = true;
        out.held.insert(request.code_id);
        ++out.hot.stats.code_requests_served;
      } catch (const Error&) {  // the peer went away; it will be noticed as lost
      }
    }
    out.code_requests.clear();
  }
}

// ---- control: handlers only record; this does the work ------------------------

void Engine::handle_control() {
  control_pending_ = false;
  if (target_) admit();
  // Work on a snapshot: links may leave the table below.
  std::vector<std::shared_ptr<Link>> snapshot;
  snapshot.reserve(links_.size());
  for (const auto& [ep, link] : links_) snapshot.push_back(link);
  for (const std::shared_ptr<Link>& link : snapshot) {
    if (link->out && link->out->challenge) answer_challenge(*link);
    if (link->handshake.hello || link->handshake.proof) answer_handshake(*link);
    if (!link->misbehaved.empty() && !link->refused) {
      if (target_) target_->stats.frames_rejected += 1;
      refuse_peer(*link, link->misbehaved);
      continue;
    }
    const bool code_came = !link->in.arrivals.empty();
    for (Inbound::CodeArrival& arrival : link->in.arrivals) accept_code(*link, arrival);
    link->in.arrivals.clear();
    // The frame that waited for it runs now, before another link's code can
    // push it out of a small cache.
    if (code_came && link->receiving() && !link->in.by_active_message) drain(*link);
    if (!link->in.backlog.empty()) drain_backlog(*link);
    const bool lost = link->endpoint.failed();
    // A goodbye stored into the credit line counts as one (kCreditLineBye).
    if (lost && link->receiving() && !link->in.bye && !link->in.by_active_message &&
        std::atomic_ref<uint64_t>(link->in.credit_line[kCreditLineBye])
                .load(std::memory_order_acquire) != 0)
      link->in.bye = true;
    if (link->receiving() && (lost || link->in.bye)) close_inbound(*link, lost && !link->in.bye);
    if (lost) {
      retire(link);  // a Channel on it sees the failure at its next blocking call
    } else if (link->in.bye && !link->receiving() && !link->sending()) {
      retire(link);
    }
  }
  expire_refused();
}

// The listener's connections go through Admission (admission.hpp) until they
// prove a key; the proven become Links here and get their rings.
void Engine::admit() {
  Target& t = *target_;
  const Admission::Report report = [this](const Error& error) { this->report(error); };
  if (!t.pending_connections.empty()) {
    std::vector<ucp_conn_request_h> requests;
    requests.swap(t.pending_connections);
    std::size_t peers = 0;  // refused ones are about to close: not peers
    for (const auto& [ep, link] : links_) peers += link->refused ? 0 : 1;
    admission_.accept(requests, peers, t.options, t.stats, report);
  }
  for (Proven& proven : admission_.step(t.options, t.stats, report)) {
    auto link = std::make_shared<Link>(std::move(proven.endpoint));
    link->peer_name = std::move(proven.peer_name);
    links_.emplace(link->endpoint.handle(), link);
    grant_ring(*link, proven.hello, proven.rkey);
  }
}

void Engine::close_inbound(Link& link, bool lost) noexcept {
  if (!link.receiving()) return;
  try {
    // What the source committed before it left still runs (unless it is
    // being disconnected for what it wrote).
    if (link.misbehaved.empty()) drain(link);
  } catch (...) {  // an ifunc threw; nothing more can run for this peer
  }
  link.in.open = false;
  if (!link.in.backlog.empty() || link.in.stalled_on != 0) {
    const std::size_t dropped = std::max<std::size_t>(link.in.backlog.size(), 1);
    if (target_) target_->stats.frames_rejected += dropped;
    report(Error(errc::peer_gone, std::to_string(dropped) + " frame(s) from " + link.peer_name +
                                      " dropped: they waited for code that never came"));
  }
  link.in.backlog.clear();
  link.in.stalled_on = 0;
  ring_bytes_granted_ -= link.in.ring_bytes;  // the memory goes with the Link; the budget now
  link.in.ring_bytes = 0;
  refresh_inbound();
  if (target_) {
    ++target_->stats.peers_closed;
    target_->stats.peers_lost += lost ? 1 : 0;
  }
}

void Engine::retire(std::shared_ptr<Link> link) noexcept {  // by value: it may be the table's own
  if (link->removed) return;
  link->removed = true;
  const bool was_receiving = link->receiving();
  if (was_receiving) close_inbound(*link, !link->in.bye);
  links_.erase(link->endpoint.handle());
  refresh_inbound();
  // A failed endpoint is force-closed (start_close decides): nothing waits on a
  // dead peer; nor on a refused one, which gets nothing more from us (a flushing
  // close could wait as long as a peer that never progresses likes); nor on
  // one we connected that never answered (a connect that timed out): its HELLO
  // may still sit in UCX's wire-up queue, which only a forced close empties
  // (UCX 1.13 aborts in ucp_worker_destroy on a request left there). Not when
  // the link also served the peer's channel to us: what we queued for that
  // (a WELCOME, a credit) must still go.
  const bool unanswered =
      link->out && link->out->state == Outbound::State::connecting && !was_receiving;
  closing_.push_back({link, link->refused || unanswered ? link->endpoint.start_force_close()
                                                        : link->endpoint.start_close()});
}

void Engine::reap_closing() noexcept {
  std::erase_if(closing_, [](Closing& c) { return c.close.reap() != UCS_INPROGRESS; });
}

void Engine::refresh_inbound() {
  inbound_.clear();
  for (const auto& [ep, link] : links_)
    if (link->receiving()) inbound_.push_back(link.get());
  // The lists a poll walks hold only links of inbound_, and have room for all
  // of them: adding to them in a poll never allocates.
  polled_.reserve(inbound_.size());
  credit_due_.reserve(inbound_.size());
  cooling_.reserve(inbound_.size());
  std::erase_if(credit_due_, [](Link* link) {
    if (link->receiving()) return false;
    link->in.credit_due = false;
    return true;
  });
  rebuild_polled();
}

std::shared_ptr<Link> Engine::inbound_link_of_rank(int64_t rank) const {
  for (const auto& [ep, link] : links_)
    if (link->rank == rank && link->receiving()) return link;
  return nullptr;
}

}  // namespace threechains::detail
