// Internal: the JitCache's side of the compile worker
// (compile_worker_protocol.hpp): a fresh process per compile of confined
// bitcode, started, timed and reaped here. A compile that crashes, hangs,
// runs out of memory or writes too much costs its process only; its caller
// gets errc::code_refused naming the cause.
#pragma once

#include "helper_cpus.hpp"
#include "jit/job_thread.hpp"

#include <threechains/error.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <sys/types.h>
#include <time.h>

namespace threechains {

class CompileWorkers {
 public:
  struct Settings {
    int optimisation_level = 2;                        // JitOptions::optimisation_level
    int codegen_level = 2;                             // JitOptions::codegen_level
    std::size_t max_global_bytes = 0;                  // ConfinementOptions::max_global_bytes
    std::chrono::milliseconds time_limit{2000};        // ConfinementOptions::compile_time_limit
    std::size_t memory_limit = 0;                      // ConfinementOptions::compile_memory_limit
    std::size_t output_limit = std::size_t{64} << 20;  // the object and messages, at most
    bool window_shape = false;                         // ConfinementOptions::window_tier
    detail::HelperCpus cpus;                           // JitOptions::helper_cpus
  };
  struct Outcome {
    std::vector<std::byte> object;  // the compiled object, if it compiled
    std::optional<Error> error;     // why not
    std::chrono::nanoseconds took{0};
    // The target could not run a worker (none found, none started, reaped
    // by someone else): errc::jit_failed, and no fault of the code's.
    bool target_failed = false;
  };

  // A compile's job, written out (a memfd: its header, name and bitcode)
  // and ready for a worker to read. Owns its descriptor.
  class Job {
   public:
    Job() = default;
    explicit Job(int fd) noexcept : fd_(fd) {}
    Job(Job&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
    Job& operator=(Job&& other) noexcept;
    Job(const Job&) = delete;
    Job& operator=(const Job&) = delete;
    ~Job();
    [[nodiscard]] int fd() const noexcept { return fd_; }

   private:
    int fd_ = -1;
  };

  explicit CompileWorkers(const Settings& settings);
  // Kills and reaps the workers still running, and those being started:
  // their compiles are dropped.
  ~CompileWorkers();
  CompileWorkers(const CompileWorkers&) = delete;
  CompileWorkers& operator=(const CompileWorkers&) = delete;

  // Writes the job for a compile of `bitcode` (an IR image of ifunc
  // `name`). Reads only what construction set: safe on any thread, so
  // writing a large image need not hold up the one that serves frames.
  // `checked_only`: the checked pass whatever Settings::window_shape says
  // (the load may not take the window tier: JitCache's
  // windows_for_new_loads said no, or the window tier refused what the
  // worker made of it the first time).
  [[nodiscard]] Job prepare(const std::string& name, std::span<const std::byte> bitcode,
                            bool checked_only = false) const;
  // Queues `job` under `ticket`; one worker runs at a time, the rest wait
  // in order. Each is started, watched (its limits: stop_if_late) and
  // reaped on tc-compiles, a thread of its own: posix_spawn holds its
  // caller until the worker has exec'd (0.12-1.1 ms on the 2-core VM), and
  // looking at the worker and reading its object are system calls and
  // copies that on the serving thread delayed every other peer.
  void submit(uint64_t ticket, Job job);
  // Never blocks, and makes no system call: what finished since the last
  // call (a compile that could not start, too: target_failed).
  [[nodiscard]] std::vector<std::pair<uint64_t, Outcome>> poll();
  // Drops a queued or running compile; poll() never returns it. A running
  // worker is killed and reaped on tc-compiles at once.
  void cancel(uint64_t ticket) noexcept;
  // Whether a compile submitted has not come back through poll() yet (a
  // cancelled one included, until tc-compiles hands back what it stopped).
  [[nodiscard]] bool busy() const noexcept {
    return !outstanding_.empty() || !failed_to_start_.empty();
  }

  // Compiles now, on this thread, and waits (for as long as stop_if_late
  // lets the worker run).
  [[nodiscard]] Outcome compile(const std::string& name, std::span<const std::byte> bitcode,
                                bool checked_only = false);

 private:
  struct Queued {
    uint64_t serial = 0;  // this submission's: unlike its ticket, never reused
    Job job;
  };
  struct Finished {
    uint64_t serial = 0;
    Outcome outcome;
  };
  struct Running {
    pid_t pid = -1;
    int pidfd = -1;
    int object = -1;  // memfds the worker writes
    int refusal = -1;
    int messages = -1;  // its stdout and stderr
    std::chrono::steady_clock::time_point started;
    clockid_t cpu_clock{};  // its CPU time, read from here
    bool has_cpu_clock = false;
    // Its CPU time when last seen to grow, and when: a worker whose CPU
    // time stands still is blocked; one whose CPU time grows slowly is
    // starved by a busy machine.
    std::chrono::nanoseconds cpu_seen{0};
    std::chrono::steady_clock::time_point cpu_moved;
    enum class Stopped { no, cpu, blocked, starved } stopped = Stopped::no;
  };

  // Reads only what construction set: runs on tc-compiles too.
  [[nodiscard]] Running start(const Job& job) const;
  // tc-compiles' work: starts, watches and reaps one worker.
  [[nodiscard]] Finished supervise(Queued& job) const noexcept;
  // Waits for `worker` to end, stopping it when stop_if_late says, or
  // when `give_up` does (cancelled: then reaped, and its outcome is not
  // the code's). `wake`, if not -1, is polled beside its exit.
  [[nodiscard]] Outcome watch(Running& worker, const std::function<bool()>& give_up,
                              int wake) const;
  // Whether tc-compiles should stop the compile `serial`.
  [[nodiscard]] bool given_up(uint64_t serial) const noexcept;
  void wake_supervisor() const noexcept;
  // The outcome of `worker`, which exited with `status`; closes its descriptors.
  [[nodiscard]] Outcome finish(Running& worker, int status) const;
  static void stop(Running& worker) noexcept;  // kills, reaps, closes
  // Kills `worker` if it is past its time (true if stopped):
  // - its CPU time over the limit: the code's fault;
  // - past kBlockedFactor times the limit on the clock, its CPU time
  //   standing still for the limit: blocked on nothing it may wait for,
  //   the code's fault too;
  // - past kStarvedFactor times the limit on the clock, its CPU time still
  //   growing: starved at nice 10 by a busy machine, the target's fault
  //   (and what it holds, memory and the one compile slot, has to end).
  bool stop_if_late(Running& worker) const noexcept;
  static constexpr int kBlockedFactor = 4;
  static constexpr int kStarvedFactor = 16;

  Settings settings_;
  std::string program_;
  std::vector<std::string> environment_;  // the workers': VARIABLE=value
  int wake_ = -1;                         // an eventfd: tc-compiles looks again at once
  // What the serving thread submitted and tc-compiles has not handed back,
  // by serial. Read and written on the serving thread only.
  struct Outstanding {
    uint64_t ticket = 0;
    bool cancelled = false;  // dropped when it comes back
  };
  std::map<uint64_t, Outstanding> outstanding_;
  uint64_t next_serial_ = 0;
  std::vector<std::pair<uint64_t, Outcome>> failed_to_start_;
  // Serials cancelled while tc-compiles may be running them.
  mutable std::mutex cancel_mutex_;
  std::set<uint64_t> cancelled_;
  std::atomic<bool> stopping_{false};
  // Made at the first submit. Last: stopped before what its work reads.
  std::unique_ptr<JobThread<Queued, Finished>> supervisor_;
};

}  // namespace threechains
