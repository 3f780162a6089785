// Engine, idle: a serving loop that found nothing to do for a while sleeps
// here until there may be work (ProgressOptions).
//
// What can bring work, and how each wakes us:
//   - messages of any kind (frames by AM, control, connections, peers lost):
//     UCX's event fd, armed with ucp_worker_arm;
//   - frames a source stores straight into its ring (shared memory): no UCX
//     event at all. Before sleeping we write a sleep generation into every
//     such ring's credit line, fence, and look at the rings once more; a
//     source that commits a frame reads that word after its commit store and,
//     seeing a generation it has not rung for, sends kAmDoorbell — a message,
//     which wakes the fd. The fence pairing (asymmetric_fence.hpp) makes it
//     impossible for both to miss: either our last look sees the frame, or
//     the source sees the generation;
//   - another thread (stop(), wake(), a Channel dropped elsewhere):
//     ucp_worker_signal;
//   - time (handshakes' deadlines, refused peers' linger, tier-1 compiles,
//     puts from a source with RDMA, which read no sleep word): shorter sleeps.
#include "engine/asymmetric_fence.hpp"
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

}  // namespace

bool Engine::has_timed_work() const noexcept {
  if (admission_.busy() || !closing_.empty()) return true;
  return std::any_of(links_.begin(), links_.end(),
                     [](const auto& entry) { return entry.second->refused; });
}

void Engine::store_sleep_words(uint64_t generation) noexcept {
  for (Link* link : inbound_) {
    if (link->in.by_active_message || link->in.credit_line == nullptr) continue;
    std::atomic_ref<uint64_t>(link->in.credit_line[kCreditLineSleep])
        .store(generation, std::memory_order_relaxed);
  }
}

bool Engine::committed_frame_waiting() const noexcept {
  for (const Link* link : inbound_) {
    const Inbound& in = link->in;
    // Frames by message wake the fd themselves; a frame that waits for its
    // code waits for a message too.
    if (in.by_active_message || in.stalled_on != 0) continue;
    const std::byte* slot = in.ring->data() + ((in.expected - 1) % in.slots) * in.slot_size;
    const uint64_t commit =
        std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(const_cast<std::byte*>(slot)))
            .load(std::memory_order_acquire);
    if (commit == in.expected) return true;
  }
  return false;
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
  if (has_target() && target_->cache.compiles_in_progress()) limit = std::min(limit, kCompileSleep);
  if (has_timed_work()) limit = std::min(limit, kTimedWorkSleep);
  for (const Link* link : inbound_)
    if (link->in.credit) limit = std::min(limit, kUnsignalledRingSleep);  // puts may fill it

  if (++sleep_generation_ == 0) sleep_generation_ = 1;  // 0 means awake
  store_sleep_words(sleep_generation_);
  if (!heavy_fence()) limit = std::min(limit, kUnsignalledRingSleep);
  bool woken = true;
  if (!committed_frame_waiting()) {
    // UCS_ERR_BUSY: events arrived since the last progress; poll them first.
    const ucs_status_t armed = ucp_worker_arm(worker_.handle());
    if (armed == UCS_OK) {
      if (has_target()) ++target_->stats.sleeps;
      pollfd fd{event_fd_, POLLIN, 0};
      woken = ::poll(&fd, 1, static_cast<int>(limit.count())) > 0;
    }
  }
  store_sleep_words(0);
  // Lost peers are looked for every few thousand rounds, and rounds are
  // rare now: look at once (an endpoint's failure is what may have woken us).
  control_pending_ = true;
  return woken;
}

void Engine::wake() noexcept {
  (void)ucp_worker_signal(worker_.handle());
}

}  // namespace threechains::detail
