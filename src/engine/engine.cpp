// Engine: set-up, control messages, link lifetimes. The dispatch path (frames
// into the JIT cache) is in dispatch.cpp, the send path in send_path.cpp.
#include "engine/engine.hpp"
#include "gpu/gpu_service.hpp"
#include "engine/fault_report.hpp"

#include "engine/admission.hpp"
#include "engine/asymmetric_fence.hpp"

#include <threechains/container.hpp>

#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string_view>

namespace threechains::detail {

namespace {

// One engine per UCX worker, found by its handle. Set-up paths only.
std::mutex registry_mutex;
std::unordered_map<ucp_worker_h, std::weak_ptr<Engine>>& registry() {
  static std::unordered_map<ucp_worker_h, std::weak_ptr<Engine>> engines;
  return engines;
}

// Rounds between looks at every peer for one lost: a backstop, since an
// endpoint's failure is noticed through Endpoint::failures() at once. A look
// walks every link, so not often: with a thousand peers it is not free.
constexpr unsigned kControlEvery = 0xfffff;

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

// What confined code may use besides its payload and its own state.
void Target::expose_regions() {
  std::vector<ExposedRegion> regions = options.exposed;
  if (options.target_args != nullptr && options.target_args_bytes != 0) {
    regions.push_back({"target_args",
                       {static_cast<std::byte*>(options.target_args), options.target_args_bytes},
                       options.target_args_writable});
  }
  cache.expose(regions);
}

Target::~Target() { unwatch_faults(this); }

Target::Target(const Worker& worker, ReceiverOptions receiver_options,
               Listener::OnConnect on_connect)
    : options(std::move(receiver_options)),
      cache(options.jit),
      listener(worker, options.port, std::move(on_connect)) {
  // A key of its own even if none was given: the handshake binds each proof
  // to the Receiver that asked for it (src/engine/handshake.cpp).
  if (!options.identity && !options.trust.any_peer()) options.identity = KeyPair::generate();
  expose_regions();
  watch_faults(this);
  if (!options.on_error) {
    options.on_error = [](const Error& e) {
      std::fprintf(stderr, "threechains receiver: %s\n", e.what());
    };
  }
  if (options.gpu) {
    // A GPU that cannot be opened costs its GPU ifuncs, never the Receiver:
    // they are refused with this reason, CPU ifuncs run as ever.
    try {
      gpu = std::make_unique<gpu::Service>(*options.gpu, options.max_slot_size,
                                            options.jit.code_cache_directory);
    } catch (const Error& e) {
      gpu_unavailable = e.context();
      options.on_error(Error(errc::gpu_failed, "no GPU for GPU ifuncs: " + gpu_unavailable));
    }
  }
}

Engine::Engine(Worker worker) : worker_(std::move(worker)) {
  const std::pair<unsigned, Handler> handlers[] = {
      {kAmHello, &on_hello}, {kAmWelcome, &on_welcome}, {kAmNeedCode, &on_need_code},
      {kAmCode, &on_code},   {kAmCredit, &on_credit},   {kAmFrame, &on_frame},
      {kAmBye, &on_bye},     {kAmChallenge, &on_challenge}, {kAmProof, &on_proof},
      {kAmCodeRefused, &on_code_refused}, {kAmDoorbell, &on_doorbell}};
  for (const auto& [id, handler] : handlers) worker_.set_library_am_handler(id, handler, this);
}

Engine::~Engine() {
  stop_thread();
  for (unsigned id : {kAmDoorbell, kAmHello, kAmWelcome, kAmNeedCode, kAmCode, kAmCredit, kAmFrame, kAmBye,
                      kAmChallenge, kAmProof, kAmCodeRefused}) {
    try {
      worker_.set_library_am_handler(id, nullptr, nullptr);
    } catch (...) {  // a destructor never throws; UCX only refuses a bad id
    }
  }
  stop_target();
  // Close every endpoint at once, then wait for all of them together, bounded.
  for (auto& [ep, link] : links_) closing_.push_back({link, link->endpoint.start_close()});
  links_.clear();
  inbound_.clear();
  polled_.clear();
  credit_due_.clear();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (!closing_.empty() && std::chrono::steady_clock::now() < deadline) {
    worker_.progress();
    reap_closing();
  }
  for (Closing& c : closing_) c.close.cancel(worker_);
  closing_.clear();
  outbox_.cancel_all(worker_);
}

std::shared_ptr<Engine> Engine::of(const Worker& worker) {
  const std::lock_guard lock(registry_mutex);
  auto& engines = registry();
  std::erase_if(engines, [](const auto& entry) { return entry.second.expired(); });
  if (auto existing = engines[worker.handle()].lock()) return existing;
  auto engine = std::make_shared<Engine>(worker);
  engines[worker.handle()] = engine;
  return engine;
}

unsigned Engine::progress() {
  const unsigned events = worker_.progress();
  last_events_ = events;
  // A peer that vanished is noticed by its endpoint's error handler, which
  // cannot reach us but counts (Endpoint::failures()); a control round then
  // finds which. And, as a backstop, every million rounds or so.
  if ((++rounds_ & kControlEvery) == 0) control_pending_ = true;
  if (const uint64_t failures = Endpoint::failures(); failures != failures_seen_) [[unlikely]] {
    failures_seen_ = failures;  // some endpoint failed (maybe another engine's): look
    control_pending_ = true;
  }
  if (control_pending_) [[unlikely]]
    handle_control();
  if (code_requests_pending_) [[unlikely]]
    serve_code_requests();
  if (!outbox_.empty()) outbox_.reap();
  if (!closing_.empty()) [[unlikely]]
    reap_closing();
  if (goodbyes_pending_.load(std::memory_order_relaxed)) [[unlikely]]
    take_deferred_goodbyes();
  return events;
}

Link* Engine::find(const ucp_am_recv_param_t* param) const noexcept {
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0) return nullptr;
  const auto it = links_.find(param->reply_ep);
  return it == links_.end() ? nullptr : it->second.get();
}

Candidate* Engine::candidate(const ucp_am_recv_param_t* param) const noexcept {
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0) return nullptr;
  return admission_.find(param->reply_ep);
}

// ---- source role -------------------------------------------------------------

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

std::vector<std::shared_ptr<Link>> Engine::connect_all(
    std::span<const ReceiverAddress> targets, const ChannelOptions& options,
    std::size_t in_flight_per_target, int64_t my_rank, const std::function<void()>& while_waiting) {
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
      if (links[i]->removed) throw Error(errc::peer_gone, what[i] + ": the peer closed the connection");
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
    throw Error(UCS_ERR_UNSUPPORTED,
                "connect " + link.peer_name +
                    ": Delivery::put needs remote memory access on both sides "
                    "(ContextOptions::remote_memory_access), and " +
                    (worker_.context().remote_memory_access() ? "the Receiver's context"
                                                              : "this context") +
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

void Engine::say_goodbye(const std::shared_ptr<Link>& link) noexcept {
  if (on_other_thread()) {
    // The progress thread owns the worker (and the link): hand the goodbye over.
    try {
      const std::lock_guard lock(goodbyes_mutex_);
      deferred_goodbyes_.push_back(link);
      goodbyes_pending_.store(true, std::memory_order_release);
      wake();  // the thread may sleep
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
  const std::size_t more =
      link.out->code_refusals.size() - 1 + link.out->code_refusals_dropped;
  link.out->code_refusals.clear();
  link.out->code_refusals_dropped = 0;
  const char* what =
      first.error == errc::code_trapped ? ": the target stopped an ifunc: " : ": the target refused code: ";
  throw Error(first.error, "channel to " + link.peer_name + ": " + operation + what + first.message +
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

// ---- background progress -------------------------------------------------------

void Engine::start_thread(std::function<unsigned()> poll,
                          std::function<void(std::chrono::milliseconds)> sleep,
                          const ProgressOptions& progress, unsigned yield_after) {
  if (threaded_.exchange(true)) {
    throw Error(errc::invalid_argument, "this Worker is already served by a progress thread");
  }
  try {
    thread_ = std::jthread([this, poll = std::move(poll), sleep = std::move(sleep), progress,
                            yield_after](std::stop_token stop) {
      thread_id_.store(std::this_thread::get_id(), std::memory_order_release);
      // The same rhythm as run(): spin while there is work, yield, then sleep when idle.
      const auto guarded_poll = [&]() -> unsigned {
        try {
          return poll();
        } catch (const Error& error) {  // nobody to throw to on this thread: report it
          report(error);
        } catch (const std::exception& error) {
          report(Error(errc::jit_failed, std::string("progress thread: ") + error.what()));
        }
        return 0;
      };
      serve_until(guarded_poll, sleep, [&] { return stop.stop_requested(); }, progress,
                  yield_after);
    });
  } catch (...) {
    threaded_.store(false);
    throw;
  }
}

void Engine::stop_thread() noexcept {
  if (!thread_.joinable()) return;
  thread_.request_stop();
  wake();  // it may sleep
  // From the thread itself (an ifunc or an error callback): it ends after this
  // poll; whoever stops it from outside, or the engine's destructor, joins.
  if (std::this_thread::get_id() == thread_id_.load(std::memory_order_acquire)) return;
  thread_.join();
  thread_id_.store({}, std::memory_order_release);
  threaded_.store(false, std::memory_order_release);
  take_deferred_goodbyes();  // dropped while the thread ran: said now, on this thread
}

void Engine::check_not_threaded(const char* call) const {
  if (on_other_thread()) [[unlikely]] {
    throw Error(errc::invalid_argument, std::string(call) +
                                            ": this Worker is served by its progress thread; "
                                            "stop() it first");
  }
}

// ---- target role -----------------------------------------------------------------

void Engine::start_target(ReceiverOptions options) {
  if (target_) {
    throw Error(errc::invalid_argument,
                "this Worker already has a Receiver (or a Node); one per Worker");
  }
  target_ = std::make_unique<Target>(worker_, std::move(options), [this](ucp_conn_request_h r) {
    target_->pending_connections.push_back(r);
    control_pending_ = true;
  });
}

void Engine::stop_target() noexcept {
  if (!target_) return;
  // Accepted and closed, never rejected (see admission.hpp).
  for (ucp_conn_request_h request : target_->pending_connections) {
    try {
      Endpoint endpoint = Endpoint::accept(worker_, request);
      closing_.push_back({std::make_shared<Link>(endpoint), endpoint.start_force_close()});
    } catch (const Error&) {  // the client went away
    }
  }
  target_->pending_connections.clear();
  admission_.close_all();
  // Every peer sending to us loses its ring: links with nothing else to carry go.
  std::vector<std::shared_ptr<Link>> snapshot;
  for (const auto& [ep, link] : links_) snapshot.push_back(link);
  for (const std::shared_ptr<Link>& link : snapshot) {
    link->in.open = false;  // its ring is freed with the Link: the peer may still write
    link->in.backlog.clear();
    if (!link->sending()) retire(link);
  }
  inbound_.clear();
  polled_.clear();
  credit_due_.clear();
  ring_bytes_granted_ = 0;
  keep_code_ = false;
  runtime_hooks_ = nullptr;
  target_.reset();
}

void Engine::report(const Error& error) {
  if (!target_) return;
  try {
    target_->options.on_error(error);
  } catch (...) {  // a throwing error callback must not stop the Receiver
  }
}

// ---- Active Message handlers: record and return; work happens in progress() ---

ucs_status_t Engine::on_hello(void* arg, const void* header, std::size_t header_length, void* data,
                              std::size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Engine*>(arg);
  const bool rendezvous = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  Handshake* handshake = nullptr;
  if (Link* link = self->find(param)) {
    if (!link->refused) handshake = &link->handshake;
  } else if (Candidate* candidate = self->candidate(param)) {
    if (!candidate->refused) handshake = &candidate->handshake;
  }
  if (handshake != nullptr && handshake->take_hello(header, header_length, data, length, rendezvous))
    self->control_pending_ = true;
  return UCS_OK;
}

ucs_status_t Engine::on_welcome(void* arg, const void* header, std::size_t header_length,
                                void* data, std::size_t length, const ucp_am_recv_param_t* param) {
  Link* link = static_cast<Engine*>(arg)->find(param);
  if (link == nullptr || !link->out || header_length != sizeof(Welcome)) return UCS_OK;
  Outbound& out = *link->out;
  Welcome welcome;
  std::memcpy(&welcome, header, sizeof(welcome));
  if (out.state == Outbound::State::open && welcome.status != UCS_OK) {
    // A refusal after the ring was granted: the target disconnects us (our
    // ring's state went inconsistent, we ignored credits) and says why.
    std::string reason = "the target disconnected this channel";
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0 && length != 0)
      reason.append(": ").append(static_cast<const char*>(data), std::min(length, kMaxReasonSize));
    out.break_with(errc::peer_refused, std::move(reason));
    return UCS_OK;
  }
  if (out.state != Outbound::State::connecting) return UCS_OK;
  if (welcome.version != kProtocolVersion || welcome.status != UCS_OK) {
    out.refusal =
        welcome.status != UCS_OK ? static_cast<ucs_status_t>(welcome.status) : UCS_ERR_UNSUPPORTED;
    if (welcome.version != kProtocolVersion) {
      out.refusal_reason = "the Receiver speaks protocol version " +
                           std::to_string(welcome.version) + ", this build " +
                           std::to_string(kProtocolVersion);
    } else if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
      out.refusal_reason.assign(static_cast<const char*>(data),
                                std::min(length, kMaxReasonSize));
    }
    out.state = Outbound::State::refused;
    return UCS_OK;
  }
  if (out.target_key && !out.target_proven) {
    // A ring from a Receiver that never proved the key we insist on (no
    // CHALLENGE, or a WELCOME ahead of it): not one frame goes there.
    out.refusal = UCS_ERR_REJECTED;
    out.refusal_reason = "the Receiver did not prove it holds the key in ChannelOptions::target_key";
    out.state = Outbound::State::refused;
    return UCS_OK;
  }
  try {
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0 || length == 0 ||
        length > kMaxRkeySize) {
      throw Error(errc::protocol, "a WELCOME without a usable rkey");
    }
    out.ring.emplace(link->endpoint, welcome.ring_address,
                     std::size_t{welcome.slots} * welcome.slot_size + kCreditLineSize,
                     std::span<const std::byte>(static_cast<const std::byte*>(data), length));
    if (out.ring->outside_its_segment())
      throw Error(errc::protocol, "the WELCOME's ring lies outside the memory its rkey maps");
    out.credit_by_put = (welcome.flags & kWelcomeCreditByPut) != 0;
    out.hot.slots = welcome.slots;
    out.hot.slot_size = welcome.slot_size;
    out.state = Outbound::State::open;
  } catch (const Error& error) {  // never let an exception cross UCX's C frames
    out.refusal = error.ucs_status().value_or(UCS_ERR_INVALID_PARAM);
    out.refusal_reason = error.what();
    out.state = Outbound::State::refused;
  }
  return UCS_OK;
}

ucs_status_t Engine::on_need_code(void* arg, const void* header, std::size_t header_length, void*,
                                  std::size_t, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Engine*>(arg);
  Link* link = self->find(param);
  if (link == nullptr || !link->sending() || header_length != sizeof(NeedCode)) return UCS_OK;
  NeedCode request;
  std::memcpy(&request, header, sizeof(request));
  link->out->code_requests.push_back(request);
  self->code_requests_pending_ = true;
  return UCS_OK;
}

ucs_status_t Engine::on_code(void* arg, const void* header, std::size_t header_length, void* data,
                             std::size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Engine*>(arg);
  Link* link = self->find(param);
  // Code only from a peer we granted a ring (it proved its key), and only of
  // a size we accept: nothing else is even copied.
  if (link == nullptr || !link->receiving() || header_length != sizeof(CodeDelivery) ||
      (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0 ||
      link->in.arrivals.size() >= kMaxCodeArrivals) {
    return UCS_OK;
  }
  Inbound::CodeArrival arrival;
  std::memcpy(&arrival.header, header, sizeof(CodeDelivery));
  if (self->target_ && length > self->target_->options.limits.max_code_bytes) {
    arrival.too_large = length;
  } else {
    arrival.code.assign(static_cast<const std::byte*>(data),
                        static_cast<const std::byte*>(data) + length);
  }
  link->in.arrivals.push_back(std::move(arrival));
  self->control_pending_ = true;
  return UCS_OK;
}

// AM delivery: credits come back as AMs; they land in the same credit word.
ucs_status_t Engine::on_credit(void* arg, const void* header, std::size_t header_length, void*,
                               std::size_t, const ucp_am_recv_param_t* param) {
  Link* link = static_cast<Engine*>(arg)->find(param);
  if (link == nullptr || !link->out || header_length != sizeof(uint64_t) ||
      !link->out->credit_is_local())
    return UCS_OK;
  uint64_t consumed;
  std::memcpy(&consumed, header, sizeof(consumed));
  link->out->take_credit(consumed);
  return UCS_OK;
}

ucs_status_t Engine::on_challenge(void* arg, const void* header, std::size_t header_length, void*,
                                  std::size_t, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Engine*>(arg);
  Link* link = self->find(param);
  if (link == nullptr || !link->out || link->out->state != Outbound::State::connecting ||
      header_length != sizeof(Challenge)) {
    return UCS_OK;
  }
  link->out->challenge.emplace();
  std::memcpy(&*link->out->challenge, header, sizeof(Challenge));
  self->control_pending_ = true;
  return UCS_OK;
}

ucs_status_t Engine::on_proof(void* arg, const void* header, std::size_t header_length, void*,
                              std::size_t, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Engine*>(arg);
  Handshake* handshake = nullptr;
  if (Link* link = self->find(param)) {
    if (!link->refused) handshake = &link->handshake;
  } else if (Candidate* candidate = self->candidate(param)) {
    if (!candidate->refused) handshake = &candidate->handshake;
  }
  if (handshake != nullptr && handshake->take_proof(header, header_length))
    self->control_pending_ = true;
  return UCS_OK;
}

ucs_status_t Engine::on_code_refused(void* arg, const void* header, std::size_t header_length,
                                     void* data, std::size_t length,
                                     const ucp_am_recv_param_t* param) {
  Link* link = static_cast<Engine*>(arg)->find(param);
  if (link == nullptr || !link->out || header_length != sizeof(CodeRefused)) return UCS_OK;
  CodeRefused refused;
  std::memcpy(&refused, header, sizeof(refused));
  Outbound& out = *link->out;
  ++out.refusals_heard;
  out.held.erase(refused.code_id);  // not held there: a later send carries the code again
  if (out.hot.last_held_valid && out.hot.last_held == refused.code_id) out.hot.last_held_valid = false;
  try {
    if (out.code_refusals.size() >= 16) {
      ++out.code_refusals_dropped;
    } else {
      std::string text;
      if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0)
        text.assign(static_cast<const char*>(data), std::min(length, kMaxReasonSize));
      out.code_refusals.push_back({static_cast<errc>(refused.error), std::move(text)});
    }
  } catch (...) {  // out of memory: the refusal is counted only
    ++out.code_refusals_dropped;
  }
  return UCS_OK;
}

// A source stored a frame into its ring, which we no longer poll (cold, or
// we slept): its arrival woke the event fd; the ring is polled again. From a
// peer that is no Link of ours (no ring), it did nothing else.
ucs_status_t Engine::on_doorbell(void* arg, const void*, std::size_t, void*, std::size_t,
                                 const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Engine*>(arg);
  Link* link = self->find(param);
  if (link != nullptr && link->receiving() && link->in.cold) {
    link->in.cold = false;
    std::atomic_ref<uint64_t>(link->in.credit_line[kCreditLineSleep])
        .store(0, std::memory_order_relaxed);
    self->rewarm_pending_ = true;
    if (self->target_) ++self->target_->stats.doorbells;
  }
  return UCS_OK;
}

ucs_status_t Engine::on_bye(void* arg, const void*, std::size_t, void*, std::size_t,
                            const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Engine*>(arg);
  if (Link* link = self->find(param)) {
    link->in.bye = true;
    self->control_pending_ = true;
  } else if (Candidate* candidate = self->candidate(param)) {
    candidate->bye = true;  // it leaves before it proved anything: closed
    self->control_pending_ = true;
  }
  return UCS_OK;
}

}  // namespace threechains::detail
