// Bitcode checks: the verifier, and no path to the kernel around the allowlist.
#include "jit/bitcode_checks.hpp"

#include <threechains/error.hpp>

#include <llvm/IR/Function.h>
#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <array>

namespace threechains {

namespace {

// Target intrinsics that compute on registers: SIMD, bit manipulation, crypto
// and CRC instructions. Everything else a target offers (xsave, wrpkru,
// fs/gs base writes, system registers, ...) is refused.
constexpr std::array<llvm::StringLiteral, 14> kComputeIntrinsicPrefixes = {
    "llvm.x86.sse",       "llvm.x86.avx",      "llvm.x86.fma",     "llvm.x86.bmi",
    "llvm.x86.pclmulqdq", "llvm.x86.aesni",    "llvm.x86.sha",     "llvm.x86.vcvtph2ps",
    "llvm.x86.vcvtps2ph", "llvm.aarch64.neon", "llvm.aarch64.sve", "llvm.aarch64.crypto",
    "llvm.aarch64.crc32", "llvm.x86.ssse3"};

// Target-independent intrinsics that read or write machine registers by name.
bool is_register_access(llvm::Intrinsic::ID id) {
  return id == llvm::Intrinsic::read_register || id == llvm::Intrinsic::write_register ||
         id == llvm::Intrinsic::read_volatile_register;
}

bool is_compute_intrinsic(llvm::StringRef name) {
  for (const llvm::StringLiteral prefix : kComputeIntrinsicPrefixes)
    if (name.starts_with(prefix)) return true;
  return false;
}

[[noreturn]] void refuse(const std::string& ifunc, const std::string& what) {
  throw Error(errc::import_refused,
              "ifunc '" + ifunc + "': " + what +
                  ": bitcode reaches the kernel only through imports this target allows");
}

}  // namespace

void check_bitcode(const llvm::Module& module, const std::string& ifunc,
                   const ImportPolicy& policy) {
  std::string problems;
  llvm::raw_string_ostream out(problems);
  if (llvm::verifyModule(module, &out)) {
    throw Error(errc::bad_container,
                "ifunc '" + ifunc + "': bitcode fails the IR verifier: " + problems.substr(0, 400));
  }
  if (policy.is_unrestricted()) return;
  if (!module.getModuleInlineAsm().empty()) refuse(ifunc, "module-level inline assembly");
  for (const llvm::Function& function : module) {
    if (function.isIntrinsic()) {
      const llvm::Intrinsic::ID id = function.getIntrinsicID();
      if (is_register_access(id))
        refuse(ifunc, "register access intrinsic " + function.getName().str());
      if (function.isTargetIntrinsic() && !is_compute_intrinsic(function.getName()))
        refuse(ifunc, "target intrinsic " + function.getName().str());
      continue;
    }
    for (const llvm::BasicBlock& block : function) {
      for (const llvm::Instruction& instruction : block) {
        const auto* call = llvm::dyn_cast<llvm::CallBase>(&instruction);
        if (call != nullptr && call->isInlineAsm())
          refuse(ifunc, "inline assembly in function '" + function.getName().str() + "'");
      }
    }
  }
}

}  // namespace threechains
