// What host_description.hpp says.
#include "jit/host_description.hpp"

#include "confine/window_mask_folding.hpp"

#include <llvm/Support/TargetSelect.h>

#include <mutex>

namespace threechains {
namespace {

llvm::CodeGenOptLevel codegen_opt_level(int level) {
  switch (level) {
    case 0:
      return llvm::CodeGenOptLevel::None;
    case 1:
      return llvm::CodeGenOptLevel::Less;
    case 3:
      return llvm::CodeGenOptLevel::Aggressive;
    default:
      return llvm::CodeGenOptLevel::Default;
  }
}

// The target this library was compiled for. LLVM's InitializeNativeTarget
// names the target of the machine whose headers we compiled against, which a
// cross build (x86_64 headers, aarch64 libLLVM) gets wrong; the compiler's
// own macros do not.
#if defined(__aarch64__)
extern "C" void LLVMInitializeAArch64TargetInfo();
extern "C" void LLVMInitializeAArch64Target();
extern "C" void LLVMInitializeAArch64TargetMC();
extern "C" void LLVMInitializeAArch64AsmPrinter();
extern "C" void LLVMInitializeAArch64AsmParser();
void initialise_this_target() {
  LLVMInitializeAArch64TargetInfo();
  LLVMInitializeAArch64Target();
  LLVMInitializeAArch64TargetMC();
  LLVMInitializeAArch64AsmPrinter();
  LLVMInitializeAArch64AsmParser();
}
#else
void initialise_this_target() {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  llvm::InitializeNativeTargetAsmParser();
  confined::fold_window_masks_into_accesses();
}
#endif

void initialise_native_target_once() {
  static std::once_flag once;
  std::call_once(once, initialise_this_target);
}

}  // namespace

llvm::Expected<llvm::orc::JITTargetMachineBuilder> describe_host(int codegen_level) {
  initialise_native_target_once();
  auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!builder) return builder.takeError();
  builder->setCodeGenOptLevel(codegen_opt_level(codegen_level));
  builder->setRelocationModel(llvm::Reloc::PIC_);
  builder->setCodeModel(llvm::CodeModel::Small);
  return builder;
}

}  // namespace threechains
