// Confinement: how a target runs bitcode from a signer it does not fully
// trust (Trust::allow_code_signer, Trust::allow_unsigned_code). Such code is
// rewritten before code generation so that every memory access, indirect
// call and loop is checked; what breaks a rule ends that one invocation
// (errc::code_trapped, reported to the source), never the target.
//
// What confined code may touch: its frame's payload, its own globals (read
// only where they are constant), its own stack (kept apart from return
// addresses), and the regions the target application exposes by name
// (ReceiverOptions::exposed; target_args when target_args_bytes says how
// large it is). docs/security.md, "Confined ifuncs", says how and why.
//
// ConfinementOptions::window_tier (on by default) adds a second way for
// code that needs no import and does not recurse: no checks in the code, a
// 4 GiB window of its own instead, and a verifier of its machine code.
// Such code reaches its payload (a copy) and memory from
// JitCache::allocate_exposed, nothing exposed by address; see window_tier.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace threechains {

struct ConfinementOptions {
  // Time one invocation may run before it traps. Fuel counts the
  // instructions between loop headers and function entries and the bytes
  // checked imports work through; the clock is read each time a chunk of
  // fuel (at most an eighth of this budget's worth) is spent, so an
  // invocation ends within 1.25x the budget whatever it does (taking an
  // instruction to cost at most 100 ns; docs/security.md, "What one frame
  // can cost"). Code of the window tier: within about 1.5x (window_tier).
  std::chrono::microseconds time_budget{10'000};
  // The data stack confined code's local variables live on (one per
  // Receiver; return addresses stay on the thread's own stack).
  std::size_t stack_bytes = std::size_t{1} << 20;
  // How deep confined code may take the thread's own stack (its calls).
  std::size_t native_stack_bytes = std::size_t{256} << 10;
  // The globals of one confined ifunc, together (zero-initialised ones
  // included: linking commits them). Larger is refused before compiling,
  // with the figure (errc::limit_exceeded).
  std::size_t max_global_bytes = std::size_t{64} << 20;
  // Confined bitcode compiles in a process of its own, started fresh for
  // each compile (threechains-compile-worker): LLVM failing on it (a fatal
  // error, a crash, a compile without end, memory without bound) ends that
  // process, and the load is refused (errc::code_refused) naming the cause.
  // The worker is stopped past this much CPU time, or 4x it on the clock
  // with its CPU time standing still (blocked: refused too). One a busy
  // machine starves is given up at 16x it on the clock, with errc::timeout
  // and no refusal: that is not the code's fault...
  std::chrono::milliseconds compile_time_limit{2000};
  // ...and may map at most this much address space beyond what it holds
  // when it starts compiling (LLVM's libraries). Not applied in sanitizer
  // builds (their shadow memory needs terabytes of address space).
  std::size_t compile_memory_limit = std::size_t{2} << 30;
  // The window tier (docs/security.md, "The window tier"): confined
  // bitcode that needs no import, does not recurse and keeps its locals to
  // sizes known before it runs (1 MiB in all) is compiled to address only
  // a window of its own, and runs once a verifier of its machine code (not
  // the compiler) accepted it. Its computation runs near native speed
  // (saxpy about 1x, where the checked tier takes 3x), and a Receiver runs
  // a peer's frames of it several to one way into the window
  // (docs/performance.md). On by default where this build has a verifier
  // (x86-64 with Zydis, aarch64); elsewhere, or set false, all confined
  // code takes the checked tier. Which tier a code gets is decided when it
  // loads (JitCache::in_window says):
  //  - the checked tier while any region is exposed by address outside
  //    JitCache::allocate_exposed memory (ReceiverOptions::exposed, a
  //    target_args the application allocated elsewhere): window code could
  //    not reach it. To have both, allocate what code uses there
  //    (receiver.cache().allocate_exposed, then set_target_args);
  //  - the checked tier for code the shape or the verifier refuses, and
  //    while no window is to be had (all max_windows held by loaded codes,
  //    or no address space for another).
  // What differs for code in a window:
  //  - it reaches only its payload and memory from allocate_exposed, and
  //    target_args only if it lies there (any other is passed as null);
  //  - its payload is a copy: what it writes there is not kept;
  //  - its time is held by a watchdog thread: stopped after at least
  //    time_budget and at most about 1.5x it plus scheduling, on the clock
  //    (a call preempted for longer is stopped too). The watchdog signals
  //    with SIGRTMAX-2, which the application must leave alone and not
  //    block on threads that run ifuncs (blocked, it stops nothing), and
  //    wakes every quarter budget while window code runs;
  //  - a store to read-only memory traps as out_of_bounds (not read_only).
  bool window_tier = true;
  // Windows one JitCache (one Receiver) holds at most: one per code loaded
  // in the window tier, each 8 GiB of address space on x86-64 and 40 GiB
  // on aarch64 (reserved, committed only as used; fewer where a kernel
  // gives processes less, such as 39-bit address spaces). A code that
  // loads while all are held takes the checked tier.
  std::size_t max_windows = 1024;
};

// A region of the target process that confined code may use, by name.
struct ExposedRegion {
  std::string name;
  std::span<std::byte> bytes;
  bool writable = false;
};

// Why a confined invocation ended early.
enum class TrapReason : uint32_t {
  out_of_bounds = 1,  // a load, store or memory call outside every region it may use
  read_only,          // a store into a constant global or a read-only region
  bad_call,           // an indirect call to something that is not its own function or import
  out_of_time,        // over ConfinementOptions::time_budget
  stack_exhausted,    // recursion or local variables beyond the stacks it has
  division,           // an integer division by zero, or INT_MIN / -1
  unreachable,        // control reached code the compiler marked unreachable
  misaligned_atomic,  // an atomic access that is not naturally aligned
  bad_argument,       // a runtime call (threechains_send_self, ...) given a wild pointer
  gpu_failed,         // a GPU ifunc's kernel faulted, timed out or could not run (gpu.hpp)
};

[[nodiscard]] std::string_view to_string(TrapReason reason) noexcept;

// Why a confined invocation ended early, and where.
struct ConfinedTrap {
  TrapReason reason;
  // The address it reached for, where there is one; for code of the window
  // tier, an offset in its window (of the access, or of the instruction
  // stopped), never an address of the target's.
  uintptr_t address;
};

}  // namespace threechains
