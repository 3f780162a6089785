// Internal: the window verifier for aarch64 (issue 33), the Arm half of what
// verify_x86.hpp is for x86-64: the target trusts it, not LLVM, to say that
// window-shaped code (shape_for_window, confine/pass.hpp) stays in its
// window. It reads A64 machine code as it will run, relocations applied, at
// the address it runs from. A64 instructions are 32-bit words at 4-byte
// aligned addresses, so it needs no decoder library: each word is matched
// against the few encoding classes confined code may use (the masks are
// the Arm ARM's, "A64 instruction set encoding"), and any other word is
// refused. The scheme is LFI's (Yedidia, ASPLOS 2024): x21, reserved by the
// code generator (+reserve-x21), holds the window's base and is never
// written; an access adds a 32-bit offset to it. The rules
// (docs/security.md, "The aarch64 verifier", says why each is enough):
//
//  - Only these appear: data processing on registers and immediates,
//    scalar floating point and Advanced SIMD (no SVE, no SME), the loads
//    and stores listed below, direct branches (b, bl, b.cond, cbz, cbnz,
//    tbz, tbnz), `ret` through x30, `brk` and `udf` (traps), nop, bti and
//    barriers. No system register access (msr, mrs: FPCR, FPSR, the thread
//    pointer), no svc, no cache maintenance (dc zva writes memory), no
//    indirect branch, no pointer authentication, no memory copy (cpy*, set*).
//  - No instruction writes x21. sp changes only by add/sub of a constant
//    and by the writeback of an sp-based load or store, so its height below
//    the function's entry is known at every instruction and the same on
//    every path.
//  - A memory access is one of: x21 (or x21 plus a constant) plus a
//    register offset that is a w register zero-extended (uxtw, unscaled) or
//    an x register whose upper half is known zero; a register known to hold
//    x21 plus such an offset plus a constant, with a constant displacement,
//    such that the whole access lies in the window or its 2 GiB guards; an
//    address the verifier computes itself (adr, adrp, a literal load: the
//    code lies in the window) inside the window or its guards; or sp plus a
//    constant inside the function's own frame.
//  - The return address: x30 holds it at entry; it may be stored to a
//    frame slot and loaded back from that slot, and `ret` is allowed only
//    with x30 holding it and sp back at the entry's height. A store that
//    overlaps the slot makes the slot hold something else.
//  - Branches and calls are direct, to an instruction in the code; no path
//    runs off the end; calls never recurse, so the stack has a bound, which
//    is returned.
//
// Not its job, as for x86-64: what the code computes, how long it runs, the
// C calling convention (the host enters through a trampoline that keeps
// its registers).
#pragma once

#include "confine/verifier.hpp"

namespace threechains::confined {

// The general register that holds the window's base in aarch64 window code.
inline constexpr unsigned kAarch64WindowBaseRegister = 21;

[[nodiscard]] Verdict verify_window_code_aarch64(const VerifierInput& input);

}  // namespace threechains::confined
