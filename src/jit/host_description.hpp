// Internal: this host described to LLVM, as every compile for it here uses
// it: the JIT, the background compiler (tier 1) and the compile worker
// (confined code). One description, so each produces the same code.
#pragma once

#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/Support/Error.h>

namespace threechains {

// This host's triple, CPU name and features, with `codegen_level` (0 none,
// 1 less, 2 default, 3 aggressive), position-independent code and the small
// code model (what LLJIT chooses for JITLink on ELF anyway). Initialises
// LLVM's target for this library's architecture on first use.
[[nodiscard]] llvm::Expected<llvm::orc::JITTargetMachineBuilder> describe_host(int codegen_level);

}  // namespace threechains
