// What confined_preparation.hpp says.
#include "jit/confined_preparation.hpp"

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <exception>
#include <utility>

namespace threechains {

ConfinedPreparation::ConfinedPreparation(Prepare prepare)
    : prepare_(std::move(prepare)), thread_([this](const std::stop_token& stop) { run(stop); }) {}

ConfinedPreparation::~ConfinedPreparation() {
  thread_.request_stop();
  wake_.notify_all();
}  // thread_ joins here, before the members it uses go

void ConfinedPreparation::submit(Job job) {
  {
    const std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  wake_.notify_one();
}

void ConfinedPreparation::cancel(CodeId id) {
  const std::lock_guard lock(mutex_);
  std::erase_if(jobs_, [id](const Job& job) { return job.id == id; });
}

std::vector<ConfinedPreparation::Prepared> ConfinedPreparation::take_finished() {
  const std::lock_guard lock(mutex_);
  std::vector<Prepared> out = std::move(finished_);
  finished_.clear();
  finished_count_.store(0, std::memory_order_release);
  return out;
}

void ConfinedPreparation::run(const std::stop_token& stop) {
  pthread_setname_np(pthread_self(), "tc-prepare");  // for top, perf and gdb
  // Below the thread that serves frames, as the worker it prepares for is.
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
    Prepared prepared;
    prepared.serial = job.serial;
    prepared.id = job.id;
    try {
      prepare_(job, prepared);
    } catch (const Error& error) {
      prepared.error = error;
    } catch (const std::exception& error) {  // every job is answered, whatever one threw
      prepared.error = Error(errc::jit_failed, std::string("preparing a compile: ") + error.what());
      prepared.target_failed = true;  // no memory, most likely: not the code's doing
    }
    const std::lock_guard lock(mutex_);
    finished_.push_back(std::move(prepared));
    finished_count_.store(finished_.size(), std::memory_order_release);
  }
}

}  // namespace threechains
