// Internal: the window verifier for x86-64 (issue 33), the part of guard-
// region confinement the target trusts instead of LLVM. The optimiser and
// the code generator that compiled window-shaped code (shape_for_window,
// confine/pass.hpp) may be buggy or compromised; this reads the machine code
// as it will run, relocations applied, in the window it will run from, and
// accepts it only if every instruction stays inside the window by
// construction. One linear decode (Zydis, a decoder with no part in
// compiling the code), then one pass over each function's paths. The rules
// (docs/security.md, "The verifier", says why each is enough):
//
//  - Every byte decodes, and only instructions from an allowlist of plain
//    computation appear: integer, SSE/AVX/AVX-512 arithmetic and moves,
//    atomics, direct near branches and calls, near `ret`, `ud2`. No system
//    call, privileged, segment, string, x87/MMX, control-register or
//    flag-state instruction (std, popf, ldmxcsr, fxrstor: state the host
//    would inherit; stmxcsr: sticky flags others' code left); no far
//    return; no 0x66 prefix on a branch, call, return, push or pop (a CPU
//    may honour what Zydis ignores).
//  - A memory access is one of: %gs with 32-bit addressing (any operands,
//    the sum wraps inside the window); %gs plus one 64-bit register whose
//    upper half is known zero on every path to it (written as a 32-bit
//    register since, by an instruction that always writes it: not bsf,
//    bsr, tzcnt, lzcnt) and a displacement that keeps the whole access
//    inside the upper guard; %rip plus a displacement whose whole access
//    lies in the window or its guards (the code lies in the window); or
//    %rsp plus a displacement inside the function's own frame, below its
//    return address.
//  - %rsp changes only by push, pop, call, ret and add/sub/lea of a
//    constant, so its height in each function is known at every instruction
//    and the same on every path; `ret` only at height 0. So no function
//    writes a return address, its own or its caller's.
//  - Branches and calls are direct, to the start of an instruction in the
//    code; no path runs off the end of the code; calls never recurse, so
//    the stack the code can use has a bound, which is returned.
//
// Not the verifier's job: what the code computes, how long it runs (fuel or
// a watchdog), faults that are not memory accesses (a division by zero,
// the shape's own ud2), which the caller's trap handling answers, and the
// C calling convention: the code may return with any register changed, so
// the host calls it only through call_window_code (window_traps.hpp),
// which also checks the thread has the returned stack bound free.
#pragma once

#include "confine/verifier.hpp"

namespace threechains::confined {

[[nodiscard]] Verdict verify_window_code_x86_64(const VerifierInput& input);

}  // namespace threechains::confined
