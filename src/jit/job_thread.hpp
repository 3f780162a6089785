// JobThread: one thread working through a queue of jobs at nice 10, below the
// thread that serves frames, its results taken back between dispatches. The
// tier-1 compiler (background_compiler.hpp), the preparation of confined
// containers (confined_preparation.hpp), the checks of large or confined
// code (engine/code_vetting.hpp), the window verifier (window_verification.hpp)
// and the thread that runs the compile workers (compile_worker.hpp) are
// each one. Each runs on JitOptions::helper_cpus where they are named, and
// never in a real-time class (helper_cpus.hpp).
#pragma once

#include "helper_cpus.hpp"

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace threechains {

template <class Job, class Result>
class JobThread {
 public:
  // `work` runs on the thread, one job at a time, and must not throw; it may
  // read only what outlives this object and does not change meanwhile.
  // `name`: the thread's, for top, perf and gdb (15 characters at most).
  // `cpus`: where it runs (JitOptions::helper_cpus).
  JobThread(const char* name, std::function<Result(Job&)> work, detail::HelperCpus cpus)
      : name_(name),
        cpus_(cpus),
        work_(std::move(work)),
        thread_([this](const std::stop_token& stop) { run(stop); }) {}
  // Stops the thread: a job under way finishes first; queued jobs are dropped
  // (a destructor must not wait for a queue).
  ~JobThread() {
    thread_.request_stop();
    wake_.notify_all();
  }  // thread_ joins here, before the members it uses go
  JobThread(const JobThread&) = delete;
  JobThread& operator=(const JobThread&) = delete;

  void submit(Job job) {
    {
      const std::lock_guard lock(mutex_);
      jobs_.push_back(std::move(job));
    }
    wake_.notify_one();
  }
  // Drops the queued jobs `drop` says (a running one finishes).
  template <class Drop>
  void drop_queued(Drop&& drop) {
    const std::lock_guard lock(mutex_);
    std::erase_if(jobs_, std::forward<Drop>(drop));
  }
  // Cheap enough for every poll: whether take_finished() has anything.
  [[nodiscard]] bool has_finished() const noexcept {
    return finished_count_.load(std::memory_order_acquire) != 0;
  }
  [[nodiscard]] std::vector<Result> take_finished() {
    const std::lock_guard lock(mutex_);
    std::vector<Result> out = std::move(finished_);
    finished_.clear();
    finished_count_.store(0, std::memory_order_release);
    return out;
  }

 private:
  void run(const std::stop_token& stop) {
    // It started with the serving thread's CPUs and class: where the
    // operator named others, there (before it is named, so that whoever
    // finds it by name finds it placed); out of a real-time class in any case.
    (void)cpus_.place(0);
    detail::leave_real_time(0);
    pthread_setname_np(pthread_self(), name_);
    // Below the dispatch loop: a job waking up must not preempt the thread
    // that serves frames (or a spinning peer on a shared core). Where cores
    // are idle it runs at full speed; where they spin, it still gets a share.
    (void)setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
    for (;;) {
      Job job;
      {
        std::unique_lock lock(mutex_);
        if (!wake_.wait(lock, stop, [this] { return !jobs_.empty(); }) || stop.stop_requested())
          return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      Result result = work_(job);
      const std::lock_guard lock(mutex_);
      finished_.push_back(std::move(result));
      finished_count_.store(finished_.size(), std::memory_order_release);
    }
  }

  const char* name_;
  const detail::HelperCpus cpus_;
  std::function<Result(Job&)> work_;
  std::mutex mutex_;
  std::condition_variable_any wake_;
  std::deque<Job> jobs_;
  std::vector<Result> finished_;
  std::atomic<std::size_t> finished_count_{0};
  std::jthread thread_;  // last: started after, and stopped before, what it uses
};

}  // namespace threechains
