// Internal: a fault inside a confinement window, answered as a trap. Window-
// shaped code (confine/window.hpp) never checks an address: a page its window
// has not handed out, a guard, or a write to a read-only page faults, and the
// fault is how the code is stopped. run_in_window runs a function so that
// such a fault returns from it, as a trap naming where in the window it
// struck, and the thread goes on; any other fault is left to whatever
// handled it before (the fault reporter, the application, the default).
//
// The trap gives an offset from the window's base, never an address, so a
// report sent back to a peer tells it nothing about where this process keeps
// its memory (issue 32: reports carry offsets inside the peer's own regions).
#pragma once

#include "confine/window.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace threechains::confined {

// What stopped the code. Only `access` is about data: the others name the
// faulting instruction, which lies in the window (code linked there,
// jit/window_memory.hpp), and their offset is that instruction's.
enum class WindowFault : uint8_t {
  access,      // a load or store reached a page the window does not allow
  illegal,     // SIGILL or SIGTRAP: the shape's own trap (ud2; brk on aarch64) or an
               // instruction the CPU lacks
  arithmetic,  // SIGFPE: an integer division by zero or overflow
  general,     // SIGSEGV/SIGBUS with no window address: a misaligned aligned
               // access, a non-canonical address (#GP names no address)
  stack,       // the thread had less stack left than the code's verified need
               // and a signal frame: call_window_code ran nothing
  time,        // it ran past its budget (run_window_code, window_watchdog.hpp);
               // the offset is the instruction it was stopped at
  outside,     // a page fault past the window's guards by the window's code:
               // an access the verifier should have refused (a flaw in the
               // trusted base, as the moffs form was), trapped all the same;
               // the offset is the instruction's. Where something is mapped
               // there, the same access would not have faulted.
};

struct WindowTrap {
  int64_t offset = 0;  // from the window's base; negative in the lower guard
  bool write = false;  // a store (or an atomic) faulted, not a load
  WindowFault fault = WindowFault::access;
  bool operator==(const WindowTrap&) const = default;
};

// Puts the trap handler on top of the SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGTRAP
// handlers installed now (and the watchdog's signal's, window_watchdog.hpp),
// passing what is not a window's fault to them: a
// fault is the window's when its address lies in the active window or its
// guards, or when the instruction that faulted lies in the window (only the
// window's own code runs there). run_in_window does it
// once per process. A handler installed later must pass on what it does not
// handle (the fault reporter, UCX and sanitizers do); one that restores the
// handler it found (as a test framework does around each test case) removes
// this one, and then this must be called again, before windows are used.
void install_window_traps() noexcept;

// Runs `function(argument)` on this thread (a host function that calls
// window code through call_window_code), with the thread's %gs base at
// `window` (x86-64); nullopt if it returned, the trap
// if it faulted inside `window` or its guards. The function must be one
// whose state a fault may abandon at any instruction: window-shaped code,
// which holds no lock and owns nothing outside its window. Not reentrant on
// one thread (a nested call is refused with the trap of offset INT64_MIN).
// A function of the window's code as the verifier accepted it
// (confine/verify_x86.hpp): where it starts, and the most stack it and its
// calls can use (Verdict::stack_bytes).
struct WindowCode {
  const void* entry = nullptr;
  uint64_t stack_bytes = 0;
};

// Calls window code with up to three integer arguments, inside
// run_in_window (std::abort otherwise); returns what it left in %rax. Host
// code calls window code only through this. It
//  - keeps the host's callee-saved registers (%rbx, %rbp, %r12-%r15): the
//    verifier holds the code to its own frames, not to the C calling
//    convention (fuzz_verifier found code that returned with %rbp changed,
//    which the host then followed);
//  - hands the code no host value in a general register, and zeroes the
//    stack the code can reach ([entry %rsp - stack_bytes, entry %rsp)),
//    where host frames left their data (an attacker read a key and host
//    pointers there);
//  - first checks that the thread has stack_bytes and room for a signal
//    frame left, and if not ends the run with a WindowFault::stack trap:
//    the code's frames are not touched page by page, so on a short stack
//    they would skip the guard page (an attacker review, 2026-11-28);
//  - clears the vector registers (SSE, AVX, AVX-512 and its mask
//    registers, as the CPU has them): the host's last values, another
//    peer's payload among them, would be readable otherwise.
// x86-64; elsewhere a plain call.
[[nodiscard]] uint64_t call_window_code(const WindowCode& code, uint64_t a0 = 0, uint64_t a1 = 0,
                                        uint64_t a2 = 0) noexcept;

// The fast way in (x86-64): runs window code itself with up to three
// integer arguments, as call_window_code does (the host's registers kept,
// nothing of the host's handed over, the thread's stack checked), with the
// %gs base at `window`; nullopt and its %rax in `result` if it returned,
// the trap if it faulted. A trap resumes the trampoline's return through
// the signal's own return, so the kernel puts back the signal mask and the
// floating-point state, and no host frame is abandoned: no setjmp.
// With a `budget`, the watchdog (window_watchdog.hpp) stops the code with a
// WindowFault::time trap after at least `budget` and at most about 1.5
// times it; none (zero) lets it run until it returns or faults.
[[nodiscard]] std::optional<WindowTrap> run_window_code(
    const Window& window, const WindowCode& code, uint64_t& result, uint64_t a0 = 0,
    uint64_t a1 = 0, uint64_t a2 = 0, std::chrono::nanoseconds budget = {}) noexcept;

// One call of a run of calls (run_window_calls): its arguments, and what it
// left in %rax (x0 on aarch64) when it returned. The trampoline reads and
// writes these in the order laid out here.
// No default member values: run_each's array of them is filled, not zeroed
// first (a 1 KiB `rep stos` a run).
struct WindowCall {
  uint64_t a0;
  uint64_t a1;
  uint64_t a2;
  uint64_t result;
};

// Runs `code` once for each of `calls`, in order, with one way in: the
// host's registers kept, and its values cleared once, before the first, as
// run_window_code does for one. Between two calls only the trampoline's
// own registers are cleared: what one call left in the others the next may
// read, so every call of one run must be for the same caller (the caller
// guarantees it: WindowedCode::run_each, after serve(), with one peer's
// frames). The reachable stack is zeroed before every call (a signal that
// arrived between two would have left host addresses there). Each call
// runs under its own `budget` (a fresh invocation for the watchdog).
// Returns nullopt when all returned (`returned` == calls.size()); else the
// trap that ended the run with `returned` calls made: of calls[returned],
// or, when `returned` is 0, possibly a refusal before any call (too little
// stack: WindowFault::stack; a run already active: offset INT64_MIN).
// None after calls[returned] ran.
[[nodiscard]] std::optional<WindowTrap> run_window_calls(
    const Window& window, const WindowCode& code, std::span<WindowCall> calls,
    std::size_t& returned, std::chrono::nanoseconds budget = {}) noexcept;

[[nodiscard]] std::optional<WindowTrap> run_in_window(const Window& window, void (*function)(void*),
                                                      void* argument) noexcept;

}  // namespace threechains::confined
