// The code generator's half of the x86-64 window shape (pass.hpp,
// shape_for_window). The shape masks each access's pointer to its low 32
// bits, which the x86 back end emits as a 32-bit register write (`leal`,
// `movl`) before a `%gs:(%reg)` access: on a pointer chase that write sits
// on the chain of dependent loads, one cycle on an L1 hit of about four.
// The address-size prefix (0x67) does the same mask inside the access,
// `%gs:disp(%base32,%index32,scale)`, the sum taken modulo 2^32 (as
// Segue, ASPLOS 2025, addresses WebAssembly's memory), but LLVM emits it
// only for targets whose pointers are 32 bits wide.
//
// This pass, late in the code generator (registers allocated, blocks
// placed; -O1 and above), rewrites a mask into the 32-bit addressing of
// the accesses that use it, and drops the mask, where: its result only
// feeds `%gs:(%reg)` accesses (no displacement, no index) in its block and
// is written again or dead before the block ends, and its base and index
// registers keep their values until its last use. It is outside the
// trusted base: the verifier (verify_x86.hpp) accepts a `%gs` access with
// 32-bit addressing whatever its registers hold, and checks the masked
// form as before, so a pass that folded wrongly could only compute the
// sender's own result wrongly.
//
// The accesses it writes name 32-bit registers where LLVM's machine
// instructions expect 64-bit ones: the machine-code emitter takes them
// (it writes the prefix because of them), but LLVM's machine verifier
// would not (run with -verify-machineinstrs, it reports them). Hence the
// pass runs this late: after it only the pre-emission passes, which read
// these accesses without checking their register classes (a release LLVM,
// as Debian ships; the window tests run that code).
#pragma once

namespace threechains::confined {

// Marks a function the window shape produced; the pass leaves every other
// function alone (the library's own JIT'd code, trusted ifuncs).
inline constexpr const char* kWindowShapedAttribute = "threechains-window-shaped";

// Adds the pass to every x86-64 code generator this process builds from
// now on. Call once, before any code generator is built on another thread
// (LLVM's list of such additions has no lock): describe_host does, where
// it initialises LLVM's native target.
void fold_window_masks_into_accesses();

}  // namespace threechains::confined
