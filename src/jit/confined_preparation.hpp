// ConfinedPreparation: what precedes a confined compile, on a thread of its
// own. Confined code arrives as a container; before a worker can compile it,
// the target checks its identity, inflates it, splits it into images, picks
// this host's IR image, keys it for the object store (and looks there) and
// writes the worker's job. For a 500 KB container (2.2 MB of bitcode) that
// is tens of milliseconds of copying and hashing, and for the counter's few
// KB still 90-111 us (threechains-bench-compile-end, 2026-11-30), which on the thread
// that serves frames stall every other peer for as long. Here it runs beside
// that thread, at nice 10 like the tier-1 compiler; the JitCache hands in
// the bytes and takes back what finished between dispatches.
#pragma once

#include "jit/compile_worker.hpp"
#include "jit/container_images.hpp"
#include "jit/job_thread.hpp"

#include <threechains/error.hpp>
#include <threechains/frame.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace threechains {

class ConfinedPreparation {
 public:
  struct Job {
    uint64_t serial = 0;  // tells its result from one for an earlier load of the same id
    CodeId id = 0;
    CodecId codec = CodecId::bitcode;
    std::vector<std::byte> code;  // the container: a private copy, which nobody else writes
    bool window_shape = false;    // whether to ask the worker for the window shape
  };
  struct Prepared {
    uint64_t serial = 0;
    CodeId id = 0;
    ParsedImage image;      // name, triple and deps; its bytes where a second compile may need them
    std::string store_key;  // empty without an object store
    std::optional<std::vector<std::byte>> stored;  // the object the store held under it
    CompileWorkers::Job job;                       // for the worker, where nothing was stored
    std::optional<Error> error;  // why it cannot compile (then nothing else is set)
    // The error is this process's (no memfd, no memory), not the code's.
    bool target_failed = false;
  };
  // Runs on the thread, one job at a time. It may read only what does not
  // change while this object lives (the owner's host description, its
  // store, its CompileWorkers' settings). An Error it throws is the
  // content's; one it stores in `error` with `target_failed` is not.
  using Prepare = std::function<void(Job&, Prepared&)>;

  // `cpus`: where its thread runs (JitOptions::helper_cpus).
  ConfinedPreparation(Prepare prepare, detail::HelperCpus cpus);
  // Stops the thread (~JobThread): a preparation under way finishes first
  // (milliseconds); queued jobs are dropped.
  ConfinedPreparation(const ConfinedPreparation&) = delete;
  ConfinedPreparation& operator=(const ConfinedPreparation&) = delete;

  void submit(Job job) { thread_.submit(std::move(job)); }
  // Drops the queued jobs for `id` (a running one finishes; its result is
  // told apart by its serial).
  void cancel(CodeId id) {
    thread_.drop_queued([id](const Job& job) { return job.id == id; });
  }
  // Cheap enough for every poll: whether take_finished() has anything.
  [[nodiscard]] bool has_finished() const noexcept { return thread_.has_finished(); }
  [[nodiscard]] std::vector<Prepared> take_finished() { return thread_.take_finished(); }

 private:
  [[nodiscard]] Prepared prepare(Job& job) const;  // on the thread: answers every job

  Prepare prepare_;
  JobThread<Job, Prepared> thread_;  // last: started after, and stopped before, what it uses
};

}  // namespace threechains
