// The window shape (pass.hpp, shape_for_window): each access's pointer
// becomes `inttoptr (ptrtoint p & 0xffffffff) to ptr addrspace(256)`. The
// x86 back end addresses address space 256 through %gs, and it cannot fold
// anything outside the mask into the address, so what it emits is a 32-bit
// register write (`leal`, `movl`) and then `%gs:(%reg)`: the shape the
// verifier of issue 33 is to check, one instruction at a time.
#include "confine/pass.hpp"

#include <threechains/error.hpp>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/Module.h>

#include <vector>

namespace threechains {

namespace {

// x86's address space for %gs-relative accesses (X86AS::GS).
constexpr unsigned kGsAddressSpace = 256;

[[noreturn]] void refuse_shape(const std::string& ifunc, const std::string& what) {
  throw Error(errc::import_refused,
              "ifunc '" + ifunc + "' cannot take the window shape yet: " + what);
}

// The pointer operand of an access the shape handles, or -1.
int pointer_operand(const llvm::Instruction& i) {
  if (const auto* load = llvm::dyn_cast<llvm::LoadInst>(&i))
    return static_cast<int>(load->getPointerOperandIndex());
  if (const auto* store = llvm::dyn_cast<llvm::StoreInst>(&i))
    return static_cast<int>(store->getPointerOperandIndex());
  if (const auto* rmw = llvm::dyn_cast<llvm::AtomicRMWInst>(&i))
    return static_cast<int>(rmw->getPointerOperandIndex());
  if (const auto* cas = llvm::dyn_cast<llvm::AtomicCmpXchgInst>(&i))
    return static_cast<int>(cas->getPointerOperandIndex());
  return -1;
}

// What the shape cannot take yet, or empty. Each of these would reach
// memory by a pointer it does not mask, or memory outside the window.
std::string unshaped(const llvm::Instruction& i) {
  if (llvm::isa<llvm::AllocaInst>(i))
    return "a local variable (the data stack is not in the window)";
  if (const auto* call = llvm::dyn_cast<llvm::CallBase>(&i)) {
    const llvm::Function* callee = call->getCalledFunction();
    if (callee == nullptr) return "an indirect call";
    if (callee->isIntrinsic()) {
      // Memory no pointer names (llvm.experimental.noalias.scope.decl,
      // llvm.assume: the optimiser's bookkeeping) is none the code reaches.
      if (call->mayReadOrWriteMemory() && !call->onlyAccessesInaccessibleMemory())
        return "the intrinsic " + callee->getName().str();
      return {};
    }
    if (callee->isDeclaration()) return "a call of the import " + callee->getName().str();
    return {};
  }
  for (const llvm::Use& operand : i.operands())
    if (llvm::isa<llvm::GlobalVariable>(operand.get()))
      return "a global variable (globals are not placed in the window)";
  if (pointer_operand(i) < 0 && i.mayReadOrWriteMemory())
    return std::string("the instruction ") + i.getOpcodeName();
  return {};
}

}  // namespace

void shape_for_window(llvm::Module& module, const std::string& ifunc) {
  llvm::LLVMContext& context = module.getContext();
  llvm::Type* const i64 = llvm::Type::getInt64Ty(context);
  llvm::PointerType* const gs = llvm::PointerType::get(context, kGsAddressSpace);
  std::vector<std::pair<llvm::Instruction*, unsigned>> accesses;
  for (llvm::Function& f : module) {
    for (llvm::BasicBlock& block : f) {
      for (llvm::Instruction& i : block) {
        if (const std::string what = unshaped(i); !what.empty())
          refuse_shape(ifunc, what + " in " + f.getName().str());
        const int operand = pointer_operand(i);
        if (operand < 0) continue;
        if (i.getOperand(operand)->getType()->getPointerAddressSpace() != 0)
          refuse_shape(ifunc, "an access in another address space in " + f.getName().str());
        accesses.emplace_back(&i, static_cast<unsigned>(operand));
      }
    }
  }
  for (const auto& [access, operand] : accesses) {
    llvm::IRBuilder<> b(access);
    llvm::Value* offset = b.CreateAnd(b.CreatePtrToInt(access->getOperand(operand), i64),
                                      llvm::ConstantInt::get(i64, 0xffffffffULL), "window.offset");
    access->setOperand(operand, b.CreateIntToPtr(offset, gs, "window.address"));
  }
}

}  // namespace threechains
