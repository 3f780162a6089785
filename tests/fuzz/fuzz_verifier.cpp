// libFuzzer target: the window verifier for x86-64 (confine/verify_x86.hpp).
// The input is machine code, placed in a real window and read by the
// verifier. What it refuses is done with; what it accepts is run, in a child
// process, against canaries outside the window: a heap block and a stack
// array whose addresses the code is handed, and the host state it must not
// change (MXCSR, the x87 control word, the direction flag, the %fs and %gs
// bases). The child reports a canary touched, or dies of a fault that no
// trap took, and the fuzzer stops on it: the verifier accepted code that
// escaped. An endless loop is no finding (time is not the verifier's to
// bound): the child is stopped after a while.
#include "confine/verify_x86.hpp"
#include "confine/window.hpp"
#include "confine/window_traps.hpp"

#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>

#include <immintrin.h>
#include <unistd.h>
#include <optional>

#include <array>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>

namespace tc = threechains::confined;

namespace {

constexpr std::size_t kCodeBytes = 64 * 1024;
constexpr uint8_t kCanary = 0x5a;
constexpr int kEscaped = 3;  // the child's exit status for a canary touched

struct Sandbox {
  tc::Window window;
  std::span<std::byte> code = window.allocate(kCodeBytes, true);
  std::span<std::byte> data = window.allocate(64 * 1024, true);
};

struct Call {
  tc::WindowCode code;
  uint64_t arguments[3];
};

// The fuzzed code sees pointers at the canaries and into its window, as
// the host calls window code: through call_window_code.
void call_code(void* argument) {
  const auto* call = static_cast<const Call*>(argument);
  (void)tc::call_window_code(call->code, call->arguments[0], call->arguments[1],
                             call->arguments[2]);
}

struct HostState {
  uint32_t mxcsr = 0;
  uint16_t x87_control = 0;
  uint64_t flags = 0;
  uint64_t fs_base = 0;
  bool operator==(const HostState&) const = default;
};

HostState host_state() {
  HostState state;
  state.mxcsr = _mm_getcsr() & ~0x3fU;  // its controls; the status flags are the code's to set
  asm volatile("fnstcw %0" : "=m"(state.x87_control));
  asm volatile("pushfq; popq %0" : "=r"(state.flags));
  state.flags &= 1U << 10;  // the direction flag; the arithmetic flags are the code's
  asm volatile("movq %%fs:0, %0" : "=r"(state.fs_base));  // the thread block points at itself
  return state;
}

[[noreturn]] void run_in_child(const Sandbox& sandbox, uint64_t entry, uint64_t stack_bytes) {
  // An endless loop is no finding: stopped after 100 ms, by the default
  // action (libFuzzer's own SIGALRM handler, inherited, would let it run).
  (void)signal(SIGALRM, SIG_DFL);
  const itimerval stop_after{{0, 0}, {0, 100'000}};
  setitimer(ITIMER_REAL, &stop_after, nullptr);
  std::array<uint8_t, 256> stack_canary{};
  stack_canary.fill(kCanary);
  auto* heap_canary = static_cast<uint8_t*>(std::malloc(256));
  std::memset(heap_canary, kCanary, 256);
  const auto window_data = reinterpret_cast<uint64_t>(sandbox.data.data());
  Call call{{reinterpret_cast<const void*>(entry), stack_bytes},
            {reinterpret_cast<uint64_t>(heap_canary), reinterpret_cast<uint64_t>(&stack_canary),
             window_data}};
  const HostState before = host_state();
  // A trap is fine, unless it was a page fault past the window's guards:
  // the verifier accepted an access there, which, where something is
  // mapped, reads or writes it without a fault (helper-27's moffs form
  // faulted 8 GiB out, which this oracle took for a plain trap before
  // WindowFault::outside).
  const std::optional<tc::WindowTrap> trap = tc::run_in_window(sandbox.window, call_code, &call);
  const HostState after = host_state();
  bool touched = !(before == after) || (trap && trap->fault == tc::WindowFault::outside);
  for (std::size_t i = 0; i < 256; ++i)
    touched = touched || stack_canary[i] != kCanary || heap_canary[i] != kCanary;
  _exit(touched ? kEscaped : 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static Sandbox sandbox;
  if (size == 0 || size > kCodeBytes) return 0;
  std::byte* const code = sandbox.code.data();
  if (mprotect(code, kCodeBytes, PROT_READ | PROT_WRITE) != 0) std::abort();
  std::memcpy(code, data, size);
  if (mprotect(code, kCodeBytes, PROT_READ | PROT_EXEC) != 0) std::abort();
  const auto entry = reinterpret_cast<uint64_t>(code);
  const tc::CodeRange range{entry, {code, size}};
  const tc::Verdict verdict = tc::verify_window_code_x86_64(
      {{&range, 1}, {&entry, 1}, reinterpret_cast<uint64_t>(sandbox.window.base())});
  if (!verdict.accepted) return 0;

  const pid_t child = fork();
  if (child < 0) std::abort();
  if (child == 0) run_in_child(sandbox, entry, verdict.stack_bytes);
  int status = 0;
  if (waitpid(child, &status, 0) != child) std::abort();
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) return 0;
  // Accepted, and it escaped: a canary or host state changed, or a fault
  // no trap took ended the child. (abort, which libFuzzer reports with the
  // input; UCX's handler would take a SIGILL of __builtin_trap first.)
  std::fprintf(stderr, "fuzz_verifier: accepted code escaped (child %s %d)\n",
               WIFEXITED(status) ? "exited with" : "died of signal",
               WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  std::abort();
}
