// Internal: the JitCache's side of the compile worker
// (compile_worker_protocol.hpp): a fresh process per compile of confined
// bitcode, started, timed and reaped here. A compile that crashes, hangs,
// runs out of memory or writes too much costs its process only; its caller
// gets errc::code_refused naming the cause.
#pragma once

#include "helper_cpus.hpp"
#include "jit/job_thread.hpp"

#include <threechains/error.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
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
  // in order.
  void submit(uint64_t ticket, Job job);
  // Never blocks: kills a worker past its time, reaps the ones that ended,
  // has the next started (on the spawner thread: a posix_spawn holds its
  // caller until the worker has exec'd, 1.1 ms here), and returns what
  // finished. Called on every poll of a
  // target while a compile runs, it looks at the running worker (two
  // system calls) once per kLookEvery: every poll, they took a poll's p99
  // from 0.8 to 3.4 us (threechains-bench-compile-isolation, 2-core VM).
  [[nodiscard]] std::vector<std::pair<uint64_t, Outcome>> poll();
  // Drops a queued or running compile; poll() never returns it. A worker
  // being started for it is stopped in the next poll().
  void cancel(uint64_t ticket) noexcept;
  // Whether poll() has anything to do: a compile queued, starting, running,
  // or a failure to hand back. JitCache polls while this holds, loads
  // pending or not, so that a cancelled start is stopped and reaped.
  [[nodiscard]] bool busy() const noexcept {
    return starting_ || running_ || !queued_.empty() || !failed_to_start_.empty();
  }

  // Compiles now, on this thread, and waits (for as long as stop_if_late
  // lets the worker run).
  [[nodiscard]] Outcome compile(const std::string& name, std::span<const std::byte> bitcode,
                                bool checked_only = false);

 private:
  struct Queued {
    uint64_t ticket = 0;
    Job job;
  };
  struct Running {
    uint64_t ticket = 0;
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

  // A worker the spawner started, or why it could not: one left untaken
  // (its compile cancelled meanwhile, or the CompileWorkers going) is
  // stopped as it goes.
  struct Started {
    uint64_t ticket = 0;
    std::optional<Running> worker;
    std::optional<Error> error;
    Started() = default;
    Started(Started&& other) noexcept
        : ticket(other.ticket),
          worker(std::exchange(other.worker, std::nullopt)),
          error(std::move(other.error)) {}
    Started& operator=(Started&& other) noexcept;
    Started(const Started&) = delete;
    Started& operator=(const Started&) = delete;
    ~Started() { release(); }
    void release() noexcept;
  };
  // The job handed to the spawner, until its Started is taken.
  struct Starting {
    uint64_t ticket = 0;
    bool cancelled = false;  // then stopped when taken
  };

  // Reads only what construction set: runs on the spawner thread too.
  [[nodiscard]] Running start(uint64_t ticket, const Job& job) const;
  [[nodiscard]] Started start_aside(Queued& job) const noexcept;  // the spawner's work
  void take_started();  // a started worker becomes running_
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
  static constexpr std::chrono::microseconds kLookEvery{500};
  std::chrono::steady_clock::time_point next_look_{};
  static constexpr int kBlockedFactor = 4;
  static constexpr int kStarvedFactor = 16;
  void start_next();

  Settings settings_;
  std::string program_;
  std::vector<std::string> environment_;  // the workers': VARIABLE=value
  std::deque<Queued> queued_;
  std::optional<Starting> starting_;  // at most one: one worker at a time
  std::optional<Running> running_;
  std::vector<std::pair<uint64_t, Outcome>> failed_to_start_;
  // Made at the first start; none (no thread to be had): started here.
  // Last: stopped before what its work reads, and what it started and
  // nobody took is stopped with it.
  std::unique_ptr<JobThread<Queued, Started>> spawner_;
};

}  // namespace threechains
