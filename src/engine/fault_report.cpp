// The fault reporter: async-signal-safe formatting, chained handlers.
#include "engine/fault_report.hpp"

#include "engine/engine.hpp"
#include "signal_chain.hpp"

#include <pthread.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace threechains::detail {
namespace {

constexpr std::array<int, 4> kSignals = {SIGSEGV, SIGBUS, SIGILL, SIGFPE};

// Targets are few; a fixed table the handler can walk without a lock.
constexpr std::size_t kSlots = 256;
std::array<std::atomic<const Target*>, kSlots> watched{};
std::array<struct sigaction, kSignals.size()> previous{};

// Appends to a fixed buffer, nothing that allocates or locks.
struct Line {
  char text[512];
  std::size_t length = 0;
  void add(const char* s) {
    while (s != nullptr && *s != '\0' && length + 1 < sizeof(text)) text[length++] = *s++;
  }
  void hex(uint64_t value) {
    char digits[19] = "0x";
    int n = 2;
    for (int shift = 60; shift >= 0; shift -= 4) {
      const unsigned d = (value >> shift) & 15;
      if (n == 2 && d == 0 && shift != 0) continue;
      digits[n++] = "0123456789abcdef"[d];
    }
    digits[n] = '\0';
    add(digits);
  }
};

const char* signal_name(int signal) {
  switch (signal) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGILL:
      return "SIGILL";
    case SIGFPE:
      return "SIGFPE";
    default:
      return "a signal";
  }
}

uint64_t instruction_of(const void* context) {
  const auto* uc = static_cast<const ucontext_t*>(context);
  if (uc == nullptr) return 0;
#if defined(__x86_64__)
  return static_cast<uint64_t>(uc->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
  return uc->uc_mcontext.pc;
#else
  return 0;
#endif
}

// The Target running an ifunc on this thread, or nullptr.
const Target* running_here() {
  const pthread_t self = pthread_self();
  for (const std::atomic<const Target*>& slot : watched) {
    const Target* t = slot.load(std::memory_order_acquire);
    if (t != nullptr && t->running.code_id != 0 && pthread_equal(t->serving_thread, self)) return t;
  }
  return nullptr;
}

void report(int signal, const siginfo_t* info, const void* context) {
  const Target* t = running_here();
  if (t == nullptr) return;
  Line line;
  line.add("threechains: ");
  line.add(signal_name(signal));
  line.add(" in ifunc '");
  // Read-only lookups of maps only this (faulting) thread writes, and not
  // while it runs an ifunc: nothing here allocates or takes a lock.
  const auto name = t->names.find(t->running.code_id);
  line.add(name == t->names.end() ? "?" : name->second.c_str());
  line.add("' (code ");
  line.hex(t->running.code_id);
  line.add(") from ");
  line.add(t->running.peer != nullptr ? t->running.peer : "?");
  line.add(": address ");
  line.hex(reinterpret_cast<uintptr_t>(info != nullptr ? info->si_addr : nullptr));
  line.add(", instruction ");
  const uint64_t instruction = instruction_of(context);
  line.hex(instruction);
  // The frame it faulted in, when that is JIT'd code (it may be libc's,
  // called from the ifunc: then the address is all there is).
  std::uintptr_t offset = 0;
  if (const std::string* function =
          t->cache.function_at(reinterpret_cast<const void*>(instruction), offset)) {
    line.add(" (");
    line.add(function->c_str());
    line.add("+");
    line.hex(offset);
    line.add(")");
  }
  line.add("\n");
  const ssize_t ignored = write(STDERR_FILENO, line.text, line.length);
  (void)ignored;
}

void on_fault(int signal, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  report(signal, info, context);
  errno = saved_errno;
  // Then what was there before us.
  std::size_t k = 0;
  while (k < kSignals.size() && kSignals[k] != signal) ++k;
  pass_to_previous(previous[k], signal, info, context);
}

void install() {
  const char* setting = std::getenv("THREECHAINS_FAULT_REPORT");
  if (setting != nullptr && std::strcmp(setting, "0") == 0) return;
  for (std::size_t k = 0; k < kSignals.size(); ++k) {
    struct sigaction ours {};
    ours.sa_sigaction = &on_fault;
    // Not SA_NODEFER: a fault inside the report itself ends the process.
    ours.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&ours.sa_mask);
    sigaction(kSignals[k], &ours, &previous[k]);
  }
}

}  // namespace

void watch_faults(const Target* target) noexcept {
  static const bool installed = (install(), true);
  (void)installed;
  for (std::atomic<const Target*>& slot : watched) {
    const Target* empty = nullptr;
    if (slot.compare_exchange_strong(empty, target, std::memory_order_acq_rel)) return;
  }
  // More Targets than slots: the rest fault without a name.
}

void report_faults_then_default() noexcept {
  for (std::size_t k = 0; k < kSignals.size(); ++k) {
    struct sigaction ours {};
    ours.sa_sigaction = &on_fault;
    ours.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&ours.sa_mask);
    sigaction(kSignals[k], &ours, nullptr);
    previous[k] = {};
    previous[k].sa_handler = SIG_DFL;
  }
}

void unwatch_faults(const Target* target) noexcept {
  for (std::atomic<const Target*>& slot : watched) {
    const Target* expected = target;
    if (slot.compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel)) return;
  }
}

}  // namespace threechains::detail
