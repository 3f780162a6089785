// Internal: the confinement pass, run on bitcode from signers a target does
// not fully trust, after the host optimiser and before code generation.
#pragma once

#include <cstddef>
#include <string>

namespace llvm {
class Module;
}

namespace threechains {

// Before the host optimiser: refuses what cannot be confined or could crash
// the optimiser or the code generator (scalable vectors, other calling
// conventions, naked functions, aliases, large by-value arguments, intrinsics
// outside the allowlist, an entry point that is not void(void*, size_t,
// void*), integers over 128 bits, huge vectors and aggregates as values),
// and drops string attributes (CPU features, instrumentation), so the
// host's CPU applies. Throws errc::import_refused; errc::limit_exceeded for
// globals of more than `max_global_bytes` together (linking commits them).
void screen_for_confinement(llvm::Module& module, const std::string& ifunc,
                            std::size_t max_global_bytes);

// Rewrites `module` so that, once compiled, it touches only what the runtime
// (confine/runtime.hpp) lets one invocation touch, calls only its own
// functions and the confined imports, and stops when its fuel runs out;
// what breaks a rule calls the runtime's trap. Every symbol but
// `<ifunc>_main` is made internal. Throws errc::import_refused, naming what
// the module does that cannot be confined (an import outside the confined
// set, data imports, thread-locals, variadic functions, exceptions, computed
// gotos, constructors, memory intrinsics it cannot check, other address
// spaces).
void confine_module(llvm::Module& module, const std::string& ifunc);

// The window shape (issue 33; confine/window.hpp): every load, store and
// atomic of `module` addresses the window's base plus the low 32 bits of
// its pointer, so the code reaches its window and nothing else, whatever
// pointer it forms; the guard pages make a bounds check needless. The base
// is the thread's %gs base on x86-64 and x21 on aarch64 (the module's
// triple says which), where the code generator must keep x21 to itself:
// compile with kAarch64WindowFeatures among the target features.
// Run after the optimiser (the vectorised loops keep their shape), by the
// compile worker for a JitCache with ConfinementOptions::window_tier
// (confine/window_tier.hpp). The module's globals reach their own memory only
// when it is linked into the window (jit/window_memory.hpp); linked
// elsewhere, their accesses land in the window at their addresses' low 32
// bits (confined still, but not what the code meant). Local variables of
// a size known before the code runs become globals (1 MiB in all), and
// memcpy, memmove and memset loops of loads and stores, which are masked
// like the rest. Refused, with errc::import_refused naming them, is
// everything that reaches memory or runs code another way: other local
// variables, recursion (the verifier bounds the stack), masked and
// gathered accesses and every
// intrinsic outside the confinement pass's allowlist, the thread's stack
// and frame intrinsics, imports, indirect calls, inline assembly,
// arguments passed by value, atomics the CPU cannot do in one instruction,
// accesses wider than 4 KiB, exception handling, va_arg, constructors and
// prefix or prologue data.
void shape_for_window(llvm::Module& module, const std::string& ifunc);
// x21 kept for the base; no SVE or SME, whose loads and stores the verifier
// does not accept (an A64FX runs window code on NEON).
inline constexpr const char* kAarch64WindowFeatures = "+reserve-x21,-sve,-sve2,-sme";

}  // namespace threechains
