// Engine, idle: a serving loop that found nothing to do for a while sleeps
// here until there may be work (ProgressOptions).
//
// What can bring work, and how each wakes us:
//   - messages of any kind (frames by AM, control, connections, peers lost):
//     UCX's event fd, armed with ucp_worker_arm;
//   - frames a source stores straight into its ring (shared memory): no UCX
//     event at all. Such a ring is polled while hot. Before sleeping, and
//     every few milliseconds for rings that had nothing since the last look,
//     we make rings cold: write a generation into each one's credit line,
//     fence, and look at the ring once more. A source that commits a frame
//     reads that word after its commit store and, seeing a generation it has
//     not rung for, sends kAmDoorbell — a message, which wakes the fd, and
//     whose handler makes the ring hot again. The fence pairing
//     (asymmetric_fence.hpp) makes it impossible for both to miss: either our
//     last look sees the frame, or the source sees the generation. So a poll
//     costs the same with one peer or a thousand idle ones;
//   - another thread (stop(), wake(), a Channel dropped elsewhere):
//     ucp_worker_signal;
//   - time (handshakes' deadlines, refused peers' linger, tier-1 compiles,
//     puts from a source with RDMA, which read no sleep word): shorter sleeps.
#include "asymmetric_fence.hpp"
#include "engine/engine.hpp"

#include <algorithm>

#include <poll.h>

namespace threechains::detail {

namespace {

// Sleeps this short while something happens on a clock rather than by message.
constexpr std::chrono::milliseconds kTimedWorkSleep{10};
constexpr std::chrono::milliseconds kCompileSleep{1};
// Without a heavy fence, or with a ring filled by RDMA puts, nothing wakes us
// for a frame stored into a ring: we look every millisecond.
constexpr std::chrono::milliseconds kUnsignalledRingSleep{1};
// How long a ring must have had nothing before it stops being polled. The
// pass costs one membarrier (tens of microseconds where that interrupts a
// busy virtual CPU), so not much more often than this.
constexpr std::chrono::milliseconds kCoolingInterval{5};

}  // namespace

bool Engine::has_timed_work() const noexcept {
  if (admission_.busy() || !closing_.empty()) return true;
  return std::any_of(links_.begin(), links_.end(),
                     [](const auto& entry) { return entry.second->refused; });
}

namespace {

// A ring the doorbell can wake: stored into directly (a source that puts
// by RDMA reads no sleep word), not waiting for code (a message settles
// that), its credits all returned (a cold ring is never looked at for them).
bool can_go_cold(const Link& link) noexcept {
  const Inbound& in = link.in;
  return !in.by_active_message && !in.credit && in.stalled_on == 0 &&
         in.reported == in.expected - 1 && link.misbehaved.empty();
}

bool holds_next_frame(const Inbound& in) noexcept {
  std::byte* slot = in.ring->data() + ((in.expected - 1) % in.slots) * in.slot_size;
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(slot))
             .load(std::memory_order_acquire) == in.expected;
}

void store_sleep_word(Inbound& in, uint64_t generation) noexcept {
  std::atomic_ref<uint64_t>(in.credit_line[kCreditLineSleep])
      .store(generation, std::memory_order_relaxed);
}

}  // namespace

void Engine::rebuild_polled() noexcept {
  rewarm_pending_ = false;
  polled_.clear();  // capacity: inbound_.size() (refresh_inbound)
  for (Link* link : inbound_)
    if (!link->in.by_active_message && !link->in.cold) polled_.push_back(link);
}

bool Engine::cool(uint64_t generation) {
  if (cooling_.empty()) return true;
  for (Link* link : cooling_) store_sleep_word(link->in, generation);
  // Store-then-load: the sleep words before our last look at the rings,
  // paired with the sources' commit-then-read (asymmetric_fence.hpp).
  if (!heavy_fence()) {
    for (Link* link : cooling_) store_sleep_word(link->in, 0);
    return false;
  }
  bool all_idle = true;
  for (Link* link : cooling_) {
    if (holds_next_frame(link->in)) {  // stored before the fence: it stays hot
      store_sleep_word(link->in, 0);
      all_idle = false;
      continue;
    }
    link->in.cold = true;
  }
  rebuild_polled();
  return all_idle;
}

uint64_t Engine::next_generation() noexcept {
  if (++sleep_generation_ == 0) sleep_generation_ = 1;  // 0 means polled
  return sleep_generation_;
}

void Engine::cool_idle_rings() {
  // Spinning for good (sleep_when_idle off) keeps every ring polled too: the
  // first frame after a silence then never waits for a doorbell.
  if (!has_target() || !target_->options.progress.sleep_when_idle) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_cooling_ < kCoolingInterval) return;
  last_cooling_ = now;
  cooling_.clear();  // capacity: inbound_.size()
  for (Link* link : polled_) {
    if (!link->in.active && can_go_cold(*link)) cooling_.push_back(link);
    link->in.active = false;
  }
  (void)cool(next_generation());
}

bool Engine::sleep_until_work(std::chrono::milliseconds limit) {
  if (event_fd_ < 0) {
    int fd = -1;
    if (ucp_worker_get_efd(worker_.handle(), &fd) != UCS_OK) {  // no wake-up support here
      sched_yield();
      return false;
    }
    event_fd_ = fd;
  }
  if (goodbyes_pending_.load(std::memory_order_acquire)) return true;
  // A doorbell handled by a progress() outside poll() (a flush, a send on
  // this worker): its ring is hot but not yet polled. Poll first.
  if (rewarm_pending_) {
    rebuild_polled();
    return true;
  }
  limit = std::clamp(limit, std::chrono::milliseconds(1), std::chrono::milliseconds(3'600'000));
  // A credit still owed (one in flight, or one a Node held back) wakes no
  // one when it can go: send what can go now, and look again soon.
  if (has_target() && !credit_due_.empty()) {
    return_credits(CreditTiming::now);
    if (!credit_due_.empty()) limit = std::min(limit, kUnsignalledRingSleep);
  }
  if (has_target() && (target_->cache.compiles_in_progress() || !target_->vetting_waits.empty()))
    limit = std::min(limit, kCompileSleep);
  if (has_timed_work()) limit = std::min(limit, kTimedWorkSleep);
  // Every ring still polled goes cold: the doorbell wakes us for it. One
  // that cannot (puts, a stalled frame) is looked at when the sleep times out.
  cooling_.clear();
  for (Link* link : polled_) {
    if (can_go_cold(*link)) {
      cooling_.push_back(link);
    } else if (!link->in.by_active_message && link->in.stalled_on == 0) {
      limit = std::min(limit, kUnsignalledRingSleep);
    }
  }
  if (!cool(next_generation())) {
    if (!polled_.empty() && std::any_of(polled_.begin(), polled_.end(), [](const Link* link) {
          return holds_next_frame(link->in);
        }))
      return true;                                   // a frame came in as we cooled: no sleep
    limit = std::min(limit, kUnsignalledRingSleep);  // no fence here: look now and then
  }
  bool woken = true;
  // UCS_ERR_BUSY: events arrived since the last progress; poll them first.
  if (ucp_worker_arm(worker_.handle()) == UCS_OK) {
    if (has_target()) ++target_->stats.sleeps;
    pollfd fd{event_fd_, POLLIN, 0};
    woken = ::poll(&fd, 1, static_cast<int>(limit.count())) > 0;
  }
  // Rings stay cold until their doorbells ring. Lost peers are looked for
  // every few thousand rounds, and rounds are rare now: look at once (an
  // endpoint's failure is what may have woken us).
  control_pending_ = true;
  return woken;
}

void Engine::wake() noexcept {
  (void)ucp_worker_signal(worker_.handle());
}

}  // namespace threechains::detail
