// Internal: the confinement pass, run on bitcode from signers a target does
// not fully trust, after the host optimiser and before code generation.
#pragma once

#include <string>

namespace llvm {
class Module;
}

namespace threechains {

// Rewrites `module` so that, once compiled, it touches only what the runtime
// (jit/confined_runtime.hpp) lets one invocation touch, calls only its own
// functions and the confined imports, and stops when its fuel runs out;
// what breaks a rule calls the runtime's trap. Every symbol but
// `<ifunc>_main` is made internal. Throws errc::import_refused, naming what
// the module does that cannot be confined (an import outside the confined
// set, data imports, thread-locals, variadic functions, exceptions, computed
// gotos, constructors, memory intrinsics it cannot check, other address
// spaces).
void confine_module(llvm::Module& module, const std::string& ifunc);

}  // namespace threechains
