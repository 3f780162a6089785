// Engine: its lifetime (one per UCX worker), a round of progress, the
// target role's start and stop, and the progress thread. Connecting is in
// connect.cpp, links after set-up in link_lifetime.cpp, the AM handlers in
// am_handlers.cpp, the dispatch path in dispatch.cpp, the send path in
// send_path.cpp.
#include "engine/engine.hpp"
#include "engine/code_vetting.hpp"
#include "engine/fault_report.hpp"
#include "gpu/gpu_service.hpp"

#include "engine/admission.hpp"

#include <threechains/container.hpp>

#include <cstdio>
#include <cstring>
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

Target::~Target() {
  unwatch_faults(this);
}

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
  const std::pair<unsigned, Handler> handlers[] = {{kAmHello, &on_hello},
                                                   {kAmWelcome, &on_welcome},
                                                   {kAmNeedCode, &on_need_code},
                                                   {kAmCode, &on_code},
                                                   {kAmCredit, &on_credit},
                                                   {kAmFrame, &on_frame},
                                                   {kAmBye, &on_bye},
                                                   {kAmChallenge, &on_challenge},
                                                   {kAmProof, &on_proof},
                                                   {kAmCodeRefused, &on_code_refused},
                                                   {kAmDoorbell, &on_doorbell}};
  for (const auto& [id, handler] : handlers) worker_.set_library_am_handler(id, handler, this);
}

Engine::~Engine() {
  stop_thread();
  for (unsigned id : {kAmDoorbell, kAmHello, kAmWelcome, kAmNeedCode, kAmCode, kAmCredit, kAmFrame,
                      kAmBye, kAmChallenge, kAmProof, kAmCodeRefused}) {
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
      serve_until(
          guarded_poll, sleep, [&] { return stop.stop_requested(); }, progress, yield_after);
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

}  // namespace threechains::detail
