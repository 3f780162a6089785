// Internal: what bitcode off the network must pass before ORC sees it.
#pragma once

#include <threechains/import_policy.hpp>

#include <string>

namespace llvm {
class Module;
}

namespace threechains {

// The IR verifier (errc::bad_container), then — unless the policy is
// unrestricted — no way to reach the kernel except calls that the import
// allowlist checks: no inline assembly (module-level or in a call), no
// register-access intrinsics, no target intrinsics beyond the vector and
// arithmetic families (errc::import_refused, naming what was found).
void check_bitcode(const llvm::Module& module, const std::string& ifunc,
                   const ImportPolicy& policy);

}  // namespace threechains
