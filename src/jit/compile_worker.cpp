// What compile_worker.hpp says; the worker itself is compile_worker_main.cpp.
#include "jit/compile_worker.hpp"

#include "helper_cpus.hpp"
#include "helper_program.hpp"
#include "jit/compile_worker_protocol.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

extern char** environ;

namespace threechains {
namespace {

namespace worker = compile_worker;

// A memfd numbered above every descriptor the worker's are moved to (0-5):
// were one of this process's standard descriptors closed, a memfd could
// take its number, and posix_spawn's dup2s would overwrite it.
int new_memfd(const char* name) {
  const int made = memfd_create(name, MFD_CLOEXEC);
  if (made < 0) throw Error(errc::jit_failed, std::string("memfd_create: ") + std::strerror(errno));
  const int fd = fcntl(made, F_DUPFD_CLOEXEC, 16);
  close(made);
  if (fd < 0) throw Error(errc::jit_failed, std::string("fcntl: ") + std::strerror(errno));
  return fd;
}

// Signals the worker through its pidfd where there is one: its pid may
// have gone to another process if something else reaped it.
void kill_worker(pid_t pid, int pidfd) noexcept {
  if (pidfd >= 0) {
    (void)syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0);
  } else if (pid > 0) {
    (void)kill(pid, SIGKILL);
  }
}

void write_exactly(int fd, const void* data, std::size_t bytes) {
  const auto* at = static_cast<const char*>(data);
  while (bytes != 0) {
    const ssize_t wrote = write(fd, at, bytes);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0)
      throw Error(errc::jit_failed, std::string("writing a compile job: ") + std::strerror(errno));
    at += wrote;
    bytes -= static_cast<std::size_t>(wrote);
  }
}

// All of a memfd the worker wrote, at most `limit` bytes of it.
std::vector<std::byte> contents(int fd, std::size_t limit) {
  struct stat info {};
  if (fd < 0 || fstat(fd, &info) != 0) return {};
  std::vector<std::byte> bytes(std::min(static_cast<std::size_t>(info.st_size), limit));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got =
        pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    done += static_cast<std::size_t>(got);
  }
  bytes.resize(done);
  return bytes;
}

// What LLVM said as it died: the last lines of its stderr, printable.
std::string last_words(int fd) {
  const std::vector<std::byte> bytes = contents(fd, std::size_t{1} << 20);
  std::string text;
  for (const std::byte byte : bytes) {
    const auto c = static_cast<char>(byte);
    text += (c == '\n' || (c >= ' ' && c <= '~')) ? c : '?';
  }
  if (const std::size_t fatal = text.rfind("LLVM ERROR"); fatal != std::string::npos)
    text.erase(0, fatal);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  constexpr std::size_t kKept = 400;
  if (text.size() > kKept) text = "..." + text.substr(text.size() - kKept);
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

std::string milliseconds(std::chrono::nanoseconds span) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(span).count());
}

// What a worker's refusal may say: the errors a load of bitcode throws.
errc refusal_code(int value) {
  for (const errc known : {errc::bad_container, errc::import_refused, errc::limit_exceeded,
                           errc::jit_failed, errc::code_refused}) {
    if (static_cast<int>(known) == value) return known;
  }
  return errc::jit_failed;
}

}  // namespace

CompileWorkers::CompileWorkers(const Settings& settings)
    : settings_(settings),
      program_(find_helper_program("threechains-compile-worker", "THREECHAINS_COMPILE_WORKER")) {
  // Its environment: where its libraries are, and a sanitizer's settings;
  // nothing else of this process's. Read here, on the thread that makes the
  // cache: tc-compiles must not call getenv beside a setenv elsewhere.
  for (const char* variable :
       {"LD_LIBRARY_PATH", "ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS", "LSAN_OPTIONS"}) {
    if (const char* value = std::getenv(variable))
      environment_.push_back(std::string(variable) + "=" + value);
  }
  // The worker links this library, and so UCX, which it never uses: its
  // memory hooks (code patched into libc at load) stay off there. Both
  // settings are read, under these names, by UCX 1.13 to 1.22
  // (src/ucs/config/ucm_opts.c: prefix "MEM_", MMAP_HOOK_MODE, MALLOC_HOOKS).
  environment_.emplace_back("UCX_MEM_MMAP_HOOK_MODE=none");
  environment_.emplace_back("UCX_MEM_MALLOC_HOOKS=no");
  // Last, so that nothing above can throw with it open. Without it, a
  // cancel or the end is seen within a look (20 ms).
  wake_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

CompileWorkers::~CompileWorkers() {
  // The worker under way is killed and reaped on tc-compiles, which its
  // wake-up makes see stopping_ at once; queued jobs are dropped.
  stopping_.store(true, std::memory_order_relaxed);
  wake_supervisor();
  supervisor_.reset();
  if (wake_ >= 0) close(wake_);
}

void CompileWorkers::wake_supervisor() const noexcept {
  const uint64_t one = 1;
  if (wake_ >= 0) (void)!write(wake_, &one, sizeof(one));
}

CompileWorkers::Job& CompileWorkers::Job::operator=(Job&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

CompileWorkers::Job::~Job() {
  if (fd_ >= 0) close(fd_);
}

CompileWorkers::Job CompileWorkers::prepare(const std::string& name,
                                            std::span<const std::byte> bitcode,
                                            bool checked_only) const {
  Job job(new_memfd("threechains-compile-job"));
  worker::JobHeader header;
  header.optimisation_level = settings_.optimisation_level;
  header.codegen_level = settings_.codegen_level;
  header.window_shape = settings_.window_shape && !checked_only ? 1 : 0;
  header.max_global_bytes = settings_.max_global_bytes;
  header.memory_limit = settings_.memory_limit;
  // The parent reads the worker's CPU time; this stops a worker whose
  // parent is not looking (two seconds past it, rounded down).
  header.cpu_seconds =
      static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::seconds>(settings_.time_limit).count()) +
      2;
  header.output_limit = settings_.output_limit;
  header.name_bytes = name.size();
  header.bitcode_bytes = bitcode.size();
  write_exactly(job.fd(), &header, sizeof(header));
  write_exactly(job.fd(), name.data(), name.size());
  write_exactly(job.fd(), bitcode.data(), bitcode.size());
  return job;
}

void CompileWorkers::submit(uint64_t ticket, Job job) {
  const uint64_t serial = next_serial_++;
  if (!supervisor_) {
    try {
      supervisor_ = std::make_unique<JobThread<Queued, Finished>>(
          "tc-compiles", [this](Queued& next) { return supervise(next); }, settings_.cpus);
    } catch (const std::exception& error) {  // no thread (or memory) to be had
      failed_to_start_.emplace_back(
          ticket, Outcome{{},
                          Error(errc::jit_failed,
                                std::string("starting the thread that runs compile workers: ") +
                                    error.what()),
                          {},
                          true});
      return;
    }
  }
  outstanding_.emplace(serial, Outstanding{ticket, false});  // a failed submit below erases it
  try {
    supervisor_->submit({serial, std::move(job)});
  } catch (...) {
    outstanding_.erase(serial);
    throw;
  }
}

void CompileWorkers::cancel(uint64_t ticket) noexcept {
  std::erase_if(failed_to_start_, [ticket](const auto& done) { return done.first == ticket; });
  for (auto it = outstanding_.begin(); it != outstanding_.end();) {
    if (it->second.ticket != ticket || it->second.cancelled) {
      ++it;
      continue;
    }
    const uint64_t serial = it->first;
    bool dropped = false;
    supervisor_->drop_queued([serial, &dropped](const Queued& job) {
      if (job.serial != serial) return false;
      dropped = true;
      return true;
    });
    if (dropped) {
      it = outstanding_.erase(it);
      continue;
    }
    // Under way (or just done): tc-compiles kills and reaps it, at once,
    // and poll() drops what it hands back (busy() holds until then).
    it->second.cancelled = true;
    ++it;
    try {
      const std::lock_guard lock(cancel_mutex_);
      cancelled_.insert(serial);
    } catch (...) {  // no memory for the note: stopped at its limits instead
    }
    wake_supervisor();
  }
}

std::vector<std::pair<uint64_t, CompileWorkers::Outcome>> CompileWorkers::poll() {
  std::vector<std::pair<uint64_t, Outcome>> done = std::move(failed_to_start_);
  failed_to_start_.clear();
  if (!supervisor_ || !supervisor_->has_finished()) return done;  // no system call
  for (Finished& finished : supervisor_->take_finished()) {
    const auto it = outstanding_.find(finished.serial);
    if (it == outstanding_.end()) continue;  // cannot be: each serial comes back once
    const Outstanding outstanding = it->second;
    outstanding_.erase(it);
    if (outstanding.cancelled) {  // dropped, and its note is no longer needed
      const std::lock_guard lock(cancel_mutex_);
      cancelled_.erase(finished.serial);
      continue;
    }
    done.emplace_back(outstanding.ticket, std::move(finished.outcome));
  }
  return done;
}

bool CompileWorkers::given_up(uint64_t serial) const noexcept {
  if (stopping_.load(std::memory_order_relaxed)) return true;
  const std::lock_guard lock(cancel_mutex_);
  return cancelled_.contains(serial);
}

CompileWorkers::Finished CompileWorkers::supervise(Queued& job) const noexcept {
  Finished finished;
  finished.serial = job.serial;
  std::optional<Running> worker;
  try {
    if (given_up(job.serial)) {
      finished.outcome = {{}, Error(errc::jit_failed, "cancelled before it started"), {}, true};
      return finished;
    }
    worker = start(job.job);
    finished.outcome = watch(
        *worker, [this, serial = job.serial] { return given_up(serial); }, wake_);
  } catch (const Error& error) {
    finished.outcome = {{}, error, {}, true};
  } catch (const std::exception& error) {  // out of memory: the target's failure too
    finished.outcome = {
        {},
        Error(errc::jit_failed, std::string("running a compile worker: ") + error.what()),
        {},
        true};
  }
  // What finish() did not get to close (it threw: out of memory reading a
  // 64 MiB object, say): killed if still there, reaped, closed. After
  // finish() nothing is left open, and this does nothing.
  if (worker) stop(*worker);
  return finished;
}

CompileWorkers::Outcome CompileWorkers::watch(Running& worker, const std::function<bool()>& give_up,
                                              int wake) const {
  int status = 0;
  for (;;) {
    if (give_up()) {
      stop(worker);  // kills and reaps
      return {{}, Error(errc::jit_failed, "the compile was cancelled"), {}, true};
    }
    const bool stopped = stop_if_late(worker);
    if (!stopped && worker.pidfd >= 0) {
      // Its CPU time is looked at every 20 ms meanwhile; its exit, a
      // cancel or the end of the CompileWorkers ends the wait at once.
      pollfd ready[2] = {{worker.pidfd, POLLIN, 0}, {wake, POLLIN, 0}};
      if (::poll(ready, wake >= 0 ? 2 : 1, 20) > 0 && (ready[1].revents & POLLIN) != 0) {
        uint64_t count = 0;
        (void)!read(wake, &count, sizeof(count));
      }
    }
    const pid_t reaped = waitpid(worker.pid, &status, stopped ? 0 : WNOHANG);
    if (reaped == worker.pid) break;
    if (reaped < 0 && errno != EINTR) {
      worker.pid = -1;
      stop(worker);
      return {{},
              Error(errc::jit_failed,
                    "the compile worker vanished before it was reaped (does this process ignore "
                    "SIGCHLD or reap children it did not start?)"),
              {},
              true};
    }
    if (worker.pidfd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return finish(worker, status);
}

CompileWorkers::Outcome CompileWorkers::compile(const std::string& name,
                                                std::span<const std::byte> bitcode,
                                                bool checked_only) {
  Running worker = start(prepare(name, bitcode, checked_only));
  return watch(
      worker, [] { return false; }, -1);
}

CompileWorkers::Running CompileWorkers::start(const Job& job) const {
  if (program_.empty()) {
    throw Error(errc::jit_failed,
                "confined code compiles in threechains-compile-worker, which is neither beside "
                "libthreechains nor in libexec/threechains (THREECHAINS_COMPILE_WORKER names "
                "another)");
  }
  Running worker;
  try {
    worker.object = new_memfd("threechains-compile-object");
    worker.refusal = new_memfd("threechains-compile-refusal");
    worker.messages = new_memfd("threechains-compile-messages");
  } catch (...) {
    worker.pid = -1;
    stop(worker);
    throw;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, worker.messages, 1);  // dup2 clears close-on-exec
  posix_spawn_file_actions_adddup2(&actions, worker.messages, 2);
  posix_spawn_file_actions_adddup2(&actions, job.fd(), worker::kJobFd);
  posix_spawn_file_actions_adddup2(&actions, worker.object, worker::kObjectFd);
  posix_spawn_file_actions_adddup2(&actions, worker.refusal, worker::kRefusalFd);
  posix_spawn_file_actions_addclosefrom_np(&actions, worker::kRefusalFd + 1);
  // A clean slate of signals: none blocked, none ignored (SIGXCPU and
  // SIGXFSZ must end it), whatever this process does with them.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t signals;
  sigemptyset(&signals);
  posix_spawnattr_setsigmask(&attributes, &signals);
  sigfillset(&signals);
  posix_spawnattr_setsigdefault(&attributes, &signals);
  // Never in a real-time class, whatever the serving thread's: it compiles
  // a peer's code for seconds (helper_cpus.hpp).
  const sched_param normal{};
  posix_spawnattr_setschedpolicy(&attributes, SCHED_OTHER);
  posix_spawnattr_setschedparam(&attributes, &normal);
  posix_spawnattr_setflags(
      &attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSCHEDULER);
  // Its environment: where its libraries are, and a sanitizer's settings;
  // nothing else of this process's.
  std::vector<std::string> kept = environment_;  // copied: execve takes char*
  std::vector<char*> environment;
  for (std::string& entry : kept) environment.push_back(entry.data());
  environment.push_back(nullptr);
  std::string program = program_;
  std::string job_flag = "--job";
  char* argv[] = {program.data(), job_flag.data(), nullptr};
  worker.started = std::chrono::steady_clock::now();
  worker.cpu_moved = worker.started;
  const int spawned =
      posix_spawn(&worker.pid, program_.c_str(), &actions, &attributes, argv, environment.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (spawned != 0) {
    worker.pid = -1;
    stop(worker);
    throw Error(errc::jit_failed,
                "starting the compile worker " + program_ + ": " + std::strerror(spawned));
  }
  // Below the thread that serves frames, as the tier-1 compiler is; and
  // on JitOptions::helper_cpus where they are named (it started with the
  // serving thread's CPUs: until this call it may run there, in the dynamic
  // loader; posix_spawn has no attribute for CPUs).
  (void)settings_.cpus.place(worker.pid);
  (void)setpriority(PRIO_PROCESS, static_cast<id_t>(worker.pid), 10);
  // Its exit, as something poll() can wait for (glibc 2.36's <sys/pidfd.h>
  // declares pidfd_open without C linkage; the system call it is).
  worker.pidfd = static_cast<int>(syscall(SYS_pidfd_open, worker.pid, 0));
  // Its CPU time: what compile_time_limit bounds (its wall clock only as a
  // backstop: stop_if_late).
  worker.has_cpu_clock = clock_getcpuclockid(worker.pid, &worker.cpu_clock) == 0;
  return worker;
}

CompileWorkers::Outcome CompileWorkers::finish(Running& worker, int status) const {
  Outcome outcome;
  outcome.took = std::chrono::steady_clock::now() - worker.started;
  const auto crashed = [&](const std::string& why) {
    outcome.error = Error(errc::code_refused, "compile crashed: " + why);
  };
  if (worker.stopped == Running::Stopped::cpu) {
    outcome.error =
        Error(errc::code_refused, "compile ran past " + milliseconds(settings_.time_limit) +
                                      " ms of CPU time and was stopped "
                                      "(ConfinementOptions::compile_time_limit)");
  } else if (worker.stopped == Running::Stopped::blocked) {
    outcome.error = Error(errc::code_refused, "compile stopped: its worker used no CPU time for " +
                                                  milliseconds(settings_.time_limit) + " ms, " +
                                                  milliseconds(outcome.took) +
                                                  " ms after it started (blocked)");
  } else if (worker.stopped == Running::Stopped::starved) {
    outcome.error =
        Error(errc::timeout, "the target was too busy to finish the compile in " +
                                 milliseconds(outcome.took) + " ms (its worker had " +
                                 milliseconds(worker.cpu_seen) + " of its " +
                                 milliseconds(settings_.time_limit) +
                                 " ms of CPU time); the code is not refused: send it again");
    outcome.target_failed = true;
  } else if (WIFEXITED(status) && WEXITSTATUS(status) == worker::kExitCompiled) {
    outcome.object = contents(worker.object, settings_.output_limit);
    if (outcome.object.empty()) crashed("the worker wrote no object");
  } else if (WIFEXITED(status) && WEXITSTATUS(status) == worker::kExitRefused) {
    const std::vector<std::byte> bytes = contents(worker.refusal, 8192);
    const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    const std::size_t newline = text.find('\n');
    const int code = newline == std::string::npos ? 0 : std::atoi(text.substr(0, newline).c_str());
    outcome.error =
        Error(refusal_code(code), newline == std::string::npos ? text : text.substr(newline + 1));
  } else if (WIFEXITED(status)) {
    const std::string said = last_words(worker.messages);
    crashed(said.empty() ? "exit status " + std::to_string(WEXITSTATUS(status)) : said);
  } else if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    const std::string said = last_words(worker.messages);
    const std::string tail = said.empty() ? "" : ": " + said;
    if (signal == SIGXCPU) {
      outcome.error =
          Error(errc::code_refused, "compile ran past its CPU time and was stopped" + tail);
    } else if (signal == SIGXFSZ) {
      crashed("it wrote more than " + std::to_string(settings_.output_limit) + " bytes");
    } else if (signal == SIGSYS) {
      crashed("it made a system call its seccomp filter refuses" + tail);
    } else {
      crashed(std::string(sigabbrev_np(signal) != nullptr ? "SIG" : "signal ") +
              (sigabbrev_np(signal) != nullptr ? sigabbrev_np(signal) : std::to_string(signal)) +
              tail);
    }
  }
  worker.pid = -1;  // reaped
  stop(worker);
  return outcome;
}

bool CompileWorkers::stop_if_late(Running& worker) const noexcept {
  if (worker.stopped != Running::Stopped::no) return true;
  const auto now = std::chrono::steady_clock::now();
  const auto wall = now - worker.started;
  timespec cpu{};
  if (worker.has_cpu_clock && clock_gettime(worker.cpu_clock, &cpu) == 0) {
    const auto cpu_used = std::chrono::seconds(cpu.tv_sec) + std::chrono::nanoseconds(cpu.tv_nsec);
    if (cpu_used > worker.cpu_seen) {
      worker.cpu_seen = cpu_used;
      worker.cpu_moved = now;
    }
  }
  // Without its CPU clock, a worker past kBlockedFactor is taken as blocked.
  const bool cpu_still = !worker.has_cpu_clock || now - worker.cpu_moved > settings_.time_limit;
  if (worker.cpu_seen > settings_.time_limit) {
    worker.stopped = Running::Stopped::cpu;
  } else if (wall > settings_.time_limit * kBlockedFactor && cpu_still) {
    worker.stopped = Running::Stopped::blocked;
  } else if (wall > settings_.time_limit * kStarvedFactor) {
    worker.stopped = Running::Stopped::starved;
  } else {
    return false;
  }
  kill_worker(worker.pid, worker.pidfd);
  return true;
}

void CompileWorkers::stop(Running& worker) noexcept {
  if (worker.pid > 0) {
    kill_worker(worker.pid, worker.pidfd);
    int status = 0;
    while (waitpid(worker.pid, &status, 0) < 0 && errno == EINTR) {
    }
    worker.pid = -1;
  }
  for (int* fd : {&worker.pidfd, &worker.object, &worker.refusal, &worker.messages}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

}  // namespace threechains
