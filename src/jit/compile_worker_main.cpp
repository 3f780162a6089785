// threechains-compile-worker: compiles one confined ifunc's bitcode, then
// exits (compile_worker_protocol.hpp says why and how). Before it reads a
// byte of the bitcode it has everything it needs from the system (LLVM's
// description of this host, its TargetMachines), caps its own address
// space, CPU time and output, and (built with libseccomp) confines itself
// to the system calls compiling needs: no files, no sockets, no processes,
// no executable memory. What the bitcode then makes LLVM do ends here.
#include "jit/compile_worker_protocol.hpp"
#include "jit/confined_compile.hpp"

#include <threechains/error.hpp>

#include <llvm/Support/ErrorHandling.h>

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef THREECHAINS_HAVE_SECCOMP
#include <seccomp.h>
#endif

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

namespace worker = threechains::compile_worker;
using threechains::errc;
using threechains::Error;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
// A sanitizer reserves terabytes of shadow address space, and its leak check
// at exit runs a tracer: no address-space cap, no leak check, in such builds.
constexpr bool kSanitized = true;
extern "C" const char* __asan_default_options() {
  return "detect_leaks=0";
}
#else
constexpr bool kSanitized = false;
#endif

namespace {

void write_all(int fd, const void* data, std::size_t bytes) {
  const auto* at = static_cast<const char*>(data);
  while (bytes != 0) {
    const ssize_t wrote = write(fd, at, bytes);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) std::_Exit(worker::kExitFatal);
    at += wrote;
    bytes -= static_cast<std::size_t>(wrote);
  }
}

[[noreturn]] void refuse(errc code, std::string_view message) {
  const std::string text = std::to_string(static_cast<int>(code)) + "\n" + std::string(message);
  write_all(worker::kRefusalFd, text.data(), text.size());
  std::_Exit(worker::kExitRefused);
}

// LLVM's fatal errors end this process, with their text where the parent
// reads it; no abort(), no core, no signal to self.
void fatal(void*, const char* reason, bool) {
  const std::string text = std::string("LLVM ERROR: ") + reason + "\n";
  write_all(STDERR_FILENO, text.data(), text.size());
  std::_Exit(worker::kExitFatal);
}

void limit(int resource, uint64_t value) {
  const rlimit bound{value, value};
  if (setrlimit(resource, &bound) != 0)
    refuse(errc::jit_failed, std::string("compile worker: setrlimit: ") + std::strerror(errno));
}

// The address space this process maps now (/proc/self/statm: its size in pages).
uint64_t mapped_bytes() {
  std::FILE* statm = std::fopen("/proc/self/statm", "r");
  unsigned long long pages = 0;
  if (statm == nullptr || std::fscanf(statm, "%llu", &pages) != 1)
    refuse(errc::jit_failed, "compile worker: cannot read /proc/self/statm");
  std::fclose(statm);
  return pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

#ifdef THREECHAINS_HAVE_SECCOMP
// Memory, the descriptors it holds, time, and its own end. Anything else
// kills the process (SIGSYS): the parent reports it as a crash.
void confine_system_calls() {
  scmp_filter_ctx filter = seccomp_init(SCMP_ACT_KILL_PROCESS);
  if (filter == nullptr) refuse(errc::jit_failed, "compile worker: seccomp_init failed");
  int failed = 0;
  const auto allow = [&](int call) { failed |= seccomp_rule_add(filter, SCMP_ACT_ALLOW, call, 0); };
  for (const int call : {SCMP_SYS(read),           SCMP_SYS(write),
                         SCMP_SYS(pread64),        SCMP_SYS(pwrite64),
                         SCMP_SYS(lseek),          SCMP_SYS(fstat),
                         SCMP_SYS(close),          SCMP_SYS(brk),
                         SCMP_SYS(munmap),         SCMP_SYS(mremap),
                         SCMP_SYS(madvise),        SCMP_SYS(futex),
                         SCMP_SYS(getpid),         SCMP_SYS(gettid),
                         SCMP_SYS(sched_yield),    SCMP_SYS(sched_getaffinity),
                         SCMP_SYS(clock_gettime),  SCMP_SYS(gettimeofday),
                         SCMP_SYS(getrandom),      SCMP_SYS(rt_sigreturn),
                         SCMP_SYS(rt_sigprocmask), SCMP_SYS(rt_sigaction),
                         SCMP_SYS(sigaltstack),    SCMP_SYS(exit),
                         SCMP_SYS(exit_group),     SCMP_SYS(getrusage),
                         SCMP_SYS(sysinfo)})  // glibc's qsort asks how much memory there is
    allow(call);
  // Memory, never executable: this process writes an object, it runs none.
  for (const int call : {SCMP_SYS(mmap), SCMP_SYS(mprotect)}) {
    failed |= seccomp_rule_add(filter, SCMP_ACT_ALLOW, call, 1,
                               SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
  }
  // Its own limits only, read (getrlimit), never set: another process's
  // (the target's, same user) would need no privilege.
  failed |= seccomp_rule_add(filter, SCMP_ACT_ALLOW, SCMP_SYS(prlimit64), 2,
                             SCMP_A0(SCMP_CMP_EQ, 0), SCMP_A2(SCMP_CMP_EQ, 0));
  // abort() signals this process only.
  failed |= seccomp_rule_add(filter, SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1,
                             SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(getpid())));
  if (failed != 0 || seccomp_load(filter) != 0) {
    seccomp_release(filter);
    refuse(errc::jit_failed, "compile worker: cannot load its seccomp filter");
  }
  seccomp_release(filter);
}
#endif

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || std::string_view(argv[1]) != "--job") {
    std::fprintf(stderr,
                 "threechains-compile-worker is started by a JitCache to compile confined code\n"
                 "(ConfinementOptions::compile_time_limit; docs/security.md)\n");
    return worker::kExitUsage;
  }
  // Nothing of the parent's but the job's descriptors (posix_spawn closed
  // the rest already; this holds if someone else started it).
  close_range(worker::kRefusalFd + 1, ~0U, 0);
  struct stat job_stat {};
  if (fstat(worker::kJobFd, &job_stat) != 0 ||
      static_cast<std::size_t>(job_stat.st_size) < sizeof(worker::JobHeader))
    refuse(errc::jit_failed, "compile worker: no job on descriptor 3");
  const std::size_t job_bytes = static_cast<std::size_t>(job_stat.st_size);
  void* job = mmap(nullptr, job_bytes, PROT_READ, MAP_PRIVATE, worker::kJobFd, 0);
  if (job == MAP_FAILED) refuse(errc::jit_failed, "compile worker: cannot map its job");
  close(worker::kJobFd);
  worker::JobHeader header;
  std::memcpy(&header, job, sizeof(header));
  const std::size_t payload = job_bytes - sizeof(header);
  if (header.magic != worker::kMagic || header.name_bytes > payload ||
      header.bitcode_bytes != payload - header.name_bytes)
    refuse(errc::jit_failed, "compile worker: a malformed job");
  const char* name_at = static_cast<const char*>(job) + sizeof(header);
  const std::string name(name_at, header.name_bytes);
  const std::span<const std::byte> bitcode(
      reinterpret_cast<const std::byte*>(name_at + header.name_bytes), header.bitcode_bytes);

  llvm::install_fatal_error_handler(fatal, nullptr);
  llvm::install_bad_alloc_error_handler(fatal, nullptr);
  try {
    threechains::ConfinedCompiler compiler({header.optimisation_level, header.codegen_level,
                                            static_cast<std::size_t>(header.max_global_bytes),
                                            header.window_shape != 0});
    // From here on, the bitcode drives: limits first.
    limit(RLIMIT_CORE, 0);
    if (header.cpu_seconds != 0) limit(RLIMIT_CPU, header.cpu_seconds);
    if (header.output_limit != 0) limit(RLIMIT_FSIZE, header.output_limit);
    // Beyond what it has mapped now (LLVM's libraries, its TargetMachines):
    // what compiling this bitcode may add.
    if (header.memory_limit != 0 && !kSanitized)
      limit(RLIMIT_AS, mapped_bytes() + header.memory_limit);
#ifdef THREECHAINS_HAVE_SECCOMP
    confine_system_calls();
#endif
    const std::vector<std::byte> object = compiler.compile(bitcode, name);
    write_all(worker::kObjectFd, object.data(), object.size());
    std::_Exit(worker::kExitCompiled);  // LLVM's static destructors are no business of this job
  } catch (const Error& error) {
    refuse(error.code().category() == threechains::threechains_category()
               ? static_cast<errc>(error.code().value())
               : errc::jit_failed,
           error.context());
  } catch (const std::bad_alloc&) {
    const char text[] = "out of memory\n";
    write_all(STDERR_FILENO, text, sizeof(text) - 1);
    std::_Exit(worker::kExitFatal);
  } catch (const std::exception& error) {
    refuse(errc::jit_failed, error.what());
  }
}
