// The watchdog of window_watchdog.hpp: one thread for the process, looking
// at every registered Watch each quarter of the smallest budget.
#include "confine/window_watchdog.hpp"

#include "asymmetric_fence.hpp"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

namespace threechains::confined {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::nanoseconds kShortestPeriod = std::chrono::microseconds(250);
// No window code run this long: the watchdog sleeps until the next run.
constexpr std::chrono::milliseconds kIdleBeforeParking{100};

class Watchdog {
 public:
  // Made on first use and never destroyed: threads that outlive static
  // destruction may still run window code, and a sleeping thread costs
  // nothing at exit.
  static Watchdog& get() {
    static Watchdog* const watchdog = new Watchdog();
    return *watchdog;
  }

  void add(Watch* watch, pthread_t thread) {
    const std::lock_guard lock(mutex_);
    // Either throws before anything is kept: the Watch's registration
    // then fails, and nothing here points at it.
    if (!started_) {
      std::thread([this] {
        pthread_setname_np(pthread_self(), "tc-watchdog");  // for ps, perf and a test
        look_forever();
      }).detach();
      started_ = true;
    }
    watched_.push_back({watch, thread, 0, {}});
    wake_.notify_one();
  }

  // The thread that owns `watch` is ending: after this the watchdog no
  // longer reads it or signals the thread.
  void remove(const Watch* watch) noexcept {
    const std::lock_guard lock(mutex_);
    std::erase_if(watched_, [watch](const Watched& w) { return w.watch == watch; });
  }

  // A run began while the watchdog was parked (ThreadWatch::parked_).
  void unpark() noexcept {
    const std::lock_guard lock(mutex_);
    ThreadWatch::parked_.store(false, std::memory_order_relaxed);
    wake_.notify_one();
  }

  // Whether every registering thread's runs see the watchdog's parking
  // (membarrier, asymmetric_fence.hpp); else it never parks.
  void can_park(bool yes) noexcept {
    const std::lock_guard lock(mutex_);
    parking_allowed_ = parking_allowed_ && yes;
  }

 private:
  struct Watched {
    Watch* watch;
    pthread_t thread;
    uint64_t seen;            // the invocation under way at the last look
    Clock::time_point since;  // the first look that saw it
  };

  void look_forever() {
    std::unique_lock lock(mutex_);
    Clock::time_point idle_since = Clock::now();
    for (;;) {
      if (watched_.empty()) {
        wake_.wait(lock, [this] { return !watched_.empty(); });
        continue;
      }
      wake_.wait_for(lock, period());
      const Clock::time_point now = Clock::now();
      if (look(now)) idle_since = now;
      if (now - idle_since >= kIdleBeforeParking && park(lock)) idle_since = Clock::now();
    }
  }

  // Sleeps until a run begins, if none is under way once every thread has
  // seen `parked_`: a run that began before it (its `running` store not
  // yet visible here) is seen after the fence, and one that begins after
  // it sees `parked_` and wakes the watchdog (WatchedRun). Under mutex_
  // (released while asleep). Whether it slept.
  bool park(std::unique_lock<std::mutex>& lock) {
    if (!parking_allowed_) return false;
    ThreadWatch::parked_.store(true, std::memory_order_relaxed);
    if (!detail::heavy_fence()) {
      parking_allowed_ = false;
      ThreadWatch::parked_.store(false, std::memory_order_relaxed);
      return false;
    }
    for (const Watched& w : watched_) {
      if (w.watch->running.load(std::memory_order_relaxed) != 0) {
        ThreadWatch::parked_.store(false, std::memory_order_relaxed);
        return false;
      }
    }
    wake_.wait(lock, [] { return !ThreadWatch::parked_.load(std::memory_order_relaxed); });
    for (Watched& w : watched_) w.seen = 0;  // the next look starts afresh
    return true;
  }

  [[nodiscard]] std::chrono::nanoseconds period() const noexcept {
    int64_t smallest = INT64_MAX;
    for (const Watched& w : watched_) {
      const int64_t budget = w.watch->budget_ns.load(std::memory_order_relaxed);
      if (budget > 0) smallest = std::min(smallest, budget);
    }
    if (smallest == INT64_MAX) return std::chrono::milliseconds(100);
    return std::max(std::chrono::nanoseconds(smallest / 4), kShortestPeriod);
  }

  // Under mutex_: a thread cannot end (and its pthread_t go stale) while
  // it is signalled, since it removes its Watch first. Whether any run was
  // under way.
  bool look(Clock::time_point now) noexcept {
    bool busy = false;
    for (Watched& w : watched_) {
      const uint64_t running = w.watch->running.load(std::memory_order_relaxed);
      busy = busy || running != 0;
      if (running == 0 || running != w.seen) {
        w.seen = running;
        w.since = now;
        continue;
      }
      const std::chrono::nanoseconds budget(w.watch->budget_ns.load(std::memory_order_relaxed));
      if (budget.count() <= 0 || now - w.since < budget) continue;
      w.watch->stop.store(running, std::memory_order_relaxed);
      pthread_kill(w.thread, watchdog_signal());  // again at each look until it stops
    }
    return busy;
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Watched> watched_;
  bool started_ = false;
  bool parking_allowed_ = true;
};

[[gnu::tls_model("initial-exec")]] thread_local bool thread_ending = false;

}  // namespace

// Owns a thread's Watch: registered when made, removed when the thread
// ends (after which a run on this thread, from another thread-local's
// destructor, registers nothing and goes unwatched).
struct WatchRegistration {
  Watch watch;
  WatchRegistration() { Watchdog::get().add(&watch, pthread_self()); }
  ~WatchRegistration() {
    ThreadWatch::current_ = nullptr;
    thread_ending = true;
    Watchdog::get().remove(&watch);
  }
  WatchRegistration(const WatchRegistration&) = delete;
  WatchRegistration& operator=(const WatchRegistration&) = delete;
};

constinit thread_local Watch* ThreadWatch::current_ = nullptr;

void ThreadWatch::wake_watchdog() noexcept {
  Watchdog::get().unpark();
}

Watch* ThreadWatch::register_this_thread() noexcept {
  if (thread_ending) return nullptr;
  try {
    Watchdog::get().can_park(detail::hot_side_registered());
    thread_local WatchRegistration registration;
    current_ = &registration.watch;
  } catch (...) {  // no memory for the list, or no thread: nothing watches
    return nullptr;
  }
  return current_;
}

int watchdog_signal() noexcept {
  // glibc keeps the first real-time signals for itself and moves SIGRTMIN
  // past them; the top ones are rarely claimed by anything.
  static const int number = SIGRTMAX - 2;
  return number;
}

}  // namespace threechains::confined
