// The confinement pass: its two entry points (pass.hpp), and the rules it
// enforces. The rewriter is confiner.hpp's, in the files that header names.
//
// Explicit bounds checks, not guard regions.
//
// Why checks: confined code must reach the frame's payload (in a ring slot of
// a shared mapping), its own globals (where JITLink put them), its data stack
// and regions the application exposes (anywhere in the process). Guard-region
// masking (Wasm, LFI) needs all of that inside one reserved window, which
// would mean copying every payload in and every result out. A check against
// the payload and the data stack is a subtraction and two compares on values
// loaded once per function; anything else takes a call that searches sorted
// tables. docs/security.md, "Confined ifuncs", has the whole argument.
//
// The rules, each enforced on the IR that goes to code generation (after the
// optimiser: nothing later can reason a check away from UB it saw first):
//  - every load, store, atomic, memory intrinsic, masked or gathered access
//    is checked on a frozen address, the same one it then uses;
//  - local variables move to a data stack the runtime owns, so return
//    addresses (on the thread's own stack) lie in no region; the thread's
//    stack depth is checked at each function entry;
//  - indirect calls go only to the module's own address-taken functions and
//    its confined imports; computed gotos, exceptions and setjmp are refused;
//  - fuel is spent at every function entry and loop header;
//  - integer division checks its divisor; `unreachable` traps.
#include "confine/pass.hpp"
#include "confine/confiner.hpp"

#include <threechains/error.hpp>

namespace threechains {

namespace confine_pass {

[[noreturn]] void refuse(const std::string& ifunc, const std::string& what) {
  throw Error(errc::import_refused, "ifunc '" + ifunc + "' cannot run confined: " + what +
                                        " (sign it with a key the target marks fully trusted, "
                                        "Trust::allow_native_code_signer, to run it unconfined)");
}

}  // namespace confine_pass

using confine_pass::Confiner;
using confine_pass::refuse;
using llvm::DataLayout;
using llvm::GlobalVariable;

void screen_for_confinement(llvm::Module& module, const std::string& ifunc,
                            std::size_t max_global_bytes) {
  Confiner(module, ifunc).screen_before_optimiser();
  // What linking will commit for its globals, zero-initialised ones too.
  const DataLayout& layout = module.getDataLayout();
  uint64_t bytes = 0;
  for (const GlobalVariable& global : module.globals()) {
    if (global.isDeclaration() || !global.getValueType()->isSized()) continue;
    const uint64_t size = layout.getTypeAllocSize(global.getValueType()).getFixedValue();
    bytes = size > ~bytes ? ~uint64_t{0} : bytes + size;
  }
  if (bytes > max_global_bytes) {
    throw Error(errc::limit_exceeded,
                "ifunc '" + ifunc + "' defines " + std::to_string(bytes) +
                    " bytes of globals, over the " + std::to_string(max_global_bytes) +
                    " a confined ifunc may have here (ConfinementOptions::max_global_bytes)");
  }
}

void confine_module(llvm::Module& module, const std::string& ifunc) {
  if (module.getFunction(ifunc + "_main") == nullptr ||
      module.getFunction(ifunc + "_main")->isDeclaration())
    refuse(ifunc, "it does not define " + ifunc + "_main");
  Confiner(module, ifunc).run();
}

}  // namespace threechains
