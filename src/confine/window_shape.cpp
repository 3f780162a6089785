// The window shape (pass.hpp, shape_for_window): each access's pointer
// becomes `inttoptr (ptrtoint p & 0xffffffff) to ptr addrspace(256)`. The
// x86 back end addresses address space 256 through %gs, and it cannot fold
// anything outside the mask into the address, so what it emits is a 32-bit
// register write (`leal`, `movl`) and then `%gs:(%reg)`: the shape the
// verifier of issue 33 is to check, one instruction at a time.
//
// Everything that reaches memory some other way is refused: what the code
// generator turns into a copy or a call through an unmasked pointer
// (by-value arguments, atomics it cannot do inline, exception handling),
// and what puts machine code or a call the module did not write into the
// object (inline assembly, prologue data, constructors, personalities).
#include "confine/confiner.hpp"
#include "confine/pass.hpp"

#include <threechains/error.hpp>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/Module.h>

#include <vector>

namespace threechains {

namespace {

// x86's address space for %gs-relative accesses (X86AS::GS).
constexpr unsigned kGsAddressSpace = 256;
// The widest access: far inside the guard past the window's end.
constexpr uint64_t kWidestAccess = 4096;

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

// The bytes an access touches and, if it is atomic, its alignment (0 if not).
std::pair<uint64_t, uint64_t> width_of(const llvm::Instruction& i, const llvm::DataLayout& layout) {
  const auto bytes = [&](llvm::Type* t) {
    const llvm::TypeSize size = layout.getTypeStoreSize(t);
    return size.isScalable() ? ~uint64_t{0} : size.getFixedValue();
  };
  if (const auto* load = llvm::dyn_cast<llvm::LoadInst>(&i))
    return {bytes(load->getType()), load->isAtomic() ? load->getAlign().value() : 0};
  if (const auto* store = llvm::dyn_cast<llvm::StoreInst>(&i))
    return {bytes(store->getValueOperand()->getType()),
            store->isAtomic() ? store->getAlign().value() : 0};
  if (const auto* rmw = llvm::dyn_cast<llvm::AtomicRMWInst>(&i))
    return {bytes(rmw->getValOperand()->getType()), rmw->getAlign().value()};
  if (const auto* cas = llvm::dyn_cast<llvm::AtomicCmpXchgInst>(&i))
    return {bytes(cas->getCompareOperand()->getType()), cas->getAlign().value()};
  return {0, 0};
}

bool copies_an_argument(const llvm::AttributeSet& attributes) {
  return attributes.hasAttribute(llvm::Attribute::ByVal) ||
         attributes.hasAttribute(llvm::Attribute::InAlloca) ||
         attributes.hasAttribute(llvm::Attribute::Preallocated);
}

// What the shape cannot take about a call, or empty.
std::string unshaped_call(const llvm::CallBase& call) {
  if (call.isInlineAsm()) return "inline assembly";
  for (unsigned a = 0; a < call.arg_size(); ++a)
    if (copies_an_argument(call.getAttributes().getParamAttrs(a)))
      return "an argument passed by value (the code generator copies it unmasked)";
  const llvm::Function* callee = call.getCalledFunction();
  if (callee == nullptr) {
    // getCalledFunction() is null too for a direct call whose type is not
    // its callee's.
    if (llvm::isa<llvm::Function>(call.getCalledOperand()->stripPointerCasts()))
      return "a call in another calling convention than C's, or unlike its callee";
    return "an indirect call";
  }
  if (!callee->isIntrinsic()) {
    // An available_externally body is never emitted: the call would bind
    // to the process's function of that name.
    if (callee->isDeclarationForLinker()) return "a call of the import " + callee->getName().str();
    // A convention that pops its own stack arguments (tailcc), or a call
    // that disagrees with its callee, leaves the stack pointer where the
    // code chose.
    if (!confine_pass::Confiner::c_or_fast(call.getCallingConv()) ||
        !confine_pass::Confiner::agrees_with_callee(call))
      return "a call in another calling convention than C's, or unlike its callee";
    return {};
  }
  switch (callee->getIntrinsicID()) {
    // The thread's own stack and frames: addresses outside any window, and
    // (stackrestore) a stack pointer the code chose.
    case llvm::Intrinsic::stacksave:
    case llvm::Intrinsic::stackrestore:
    case llvm::Intrinsic::returnaddress:
    case llvm::Intrinsic::frameaddress:
      return "the intrinsic " + callee->getName().str();
    default:
      break;
  }
  // Memory no pointer names (llvm.experimental.noalias.scope.decl,
  // llvm.assume: the optimiser's bookkeeping) is none the code reaches.
  if (!confine_pass::Confiner::intrinsic_allowed(callee->getIntrinsicID()) ||
      (call.mayReadOrWriteMemory() && !call.onlyAccessesInaccessibleMemory()))
    return "the intrinsic " + callee->getName().str();
  return {};
}

// What the shape cannot take about an instruction, or empty. Each of these
// would reach memory by a pointer it does not mask, or run code the module
// does not show.
// What the code generator would make a library call of (the window's code
// links against nothing, so the load would fail; the checked tier binds
// these): a floating-point remainder (fmod), division and conversions of
// integers wider than 64 bits (__divti3, __fixdfti), and arithmetic in
// the 80- and 128-bit float formats (x87, which the verifier refuses, or
// __addtf3). Empty if none (confine_stress found fmod, 2026-11-28).
std::string library_call_of(const llvm::Instruction& i) {
  const auto wide_integer = [](const llvm::Type* t) {
    const llvm::Type* scalar = t->getScalarType();
    return scalar->isIntegerTy() && scalar->getIntegerBitWidth() > 64;
  };
  const auto wide_float = [](const llvm::Type* t) {
    const llvm::Type* scalar = t->getScalarType();
    return scalar->isX86_FP80Ty() || scalar->isFP128Ty() || scalar->isPPC_FP128Ty();
  };
  if (i.getOpcode() == llvm::Instruction::FRem) return "a floating-point remainder (fmod)";
  switch (i.getOpcode()) {
    case llvm::Instruction::UDiv:
    case llvm::Instruction::SDiv:
    case llvm::Instruction::URem:
    case llvm::Instruction::SRem:
    case llvm::Instruction::FPToSI:
    case llvm::Instruction::FPToUI:
    case llvm::Instruction::SIToFP:
    case llvm::Instruction::UIToFP:
      if (wide_integer(i.getType()) || wide_integer(i.getOperand(0)->getType()))
        return std::string("a ") + i.getOpcodeName() + " of an integer wider than 64 bits";
      break;
    default:
      break;
  }
  if (wide_float(i.getType())) return "an 80- or 128-bit float";
  for (const llvm::Value* operand : i.operands())
    if (wide_float(operand->getType())) return "an 80- or 128-bit float";
  return {};
}

std::string unshaped(const llvm::Instruction& i, const llvm::DataLayout& layout) {
  if (llvm::isa<llvm::AllocaInst>(i))
    return "a local variable (the data stack is not in the window)";
  if (llvm::isa<llvm::InvokeInst>(i) || llvm::isa<llvm::CallBrInst>(i) ||
      llvm::isa<llvm::ResumeInst>(i) || i.isEHPad() || llvm::isa<llvm::CatchReturnInst>(i) ||
      llvm::isa<llvm::CleanupReturnInst>(i))
    return "exception handling";
  if (llvm::isa<llvm::VAArgInst>(i)) return "va_arg";
  if (llvm::isa<llvm::IndirectBrInst>(i)) return "a computed goto (indirectbr)";
  if (const auto* call = llvm::dyn_cast<llvm::CallBase>(&i)) return unshaped_call(*call);
  if (const std::string what = library_call_of(i); !what.empty()) return what;
  // A vector element at a variable index: the code generator stores the
  // vector to a stack slot and indexes it (%rsp plus a register, which the
  // verifier cannot bound; confine_stress found it, 2026-11-28).
  if (const auto* extract = llvm::dyn_cast<llvm::ExtractElementInst>(&i);
      extract != nullptr && !llvm::isa<llvm::ConstantInt>(extract->getIndexOperand()))
    return "a vector element at a variable index";
  if (const auto* insert = llvm::dyn_cast<llvm::InsertElementInst>(&i);
      insert != nullptr && !llvm::isa<llvm::ConstantInt>(insert->getOperand(2)))
    return "a vector element at a variable index";
  if (pointer_operand(i) < 0) {
    if (i.mayReadOrWriteMemory()) return std::string("the instruction ") + i.getOpcodeName();
    return {};
  }
  const auto [bytes, atomic_align] = width_of(i, layout);
  if (bytes > kWidestAccess) return "an access of more than 4096 bytes";
  // An atomic the CPU cannot do in one instruction becomes a library call
  // on the unmasked address.
  if (i.isAtomic() && (atomic_align < bytes ||
                       (bytes != 1 && bytes != 2 && bytes != 4 && bytes != 8 && bytes != 16)))
    return "an atomic access that is not naturally aligned, or not 1 to 16 bytes";
  return {};
}

// What the module as a whole brings that the shape cannot take, or empty.
std::string unshaped_module(const llvm::Module& module) {
  if (!module.getModuleInlineAsm().empty()) return "module-level inline assembly";
  for (const char* name : {"llvm.global_ctors", "llvm.global_dtors"})
    if (module.getNamedValue(name) != nullptr) return std::string("constructors (") + name + ")";
  for (const llvm::GlobalVariable& global : module.globals())
    if (global.isDeclarationForLinker() && !global.getName().starts_with("llvm."))
      return "the imported variable " + global.getName().str();
  if (!module.aliases().empty() || !module.ifuncs().empty()) return "an alias or an ifunc";
  for (const llvm::Function& f : module)
    if (f.hasPersonalityFn()) return "exception handling in " + f.getName().str();
  for (const llvm::Function& f : module) {
    // An import is only ever called: its address as a value would be the
    // process's, a jump target for any indirect branch.
    if (f.isDeclarationForLinker() && !f.isIntrinsic()) {
      for (const llvm::Use& use : f.uses()) {
        const auto* call = llvm::dyn_cast<llvm::CallBase>(use.getUser());
        if (call == nullptr || !call->isCallee(&use))
          return "the address of the import " + f.getName().str();
      }
    }
    if (!f.isDeclaration() && !confine_pass::Confiner::c_or_fast(f.getCallingConv()))
      return "another calling convention than C's in " + f.getName().str();
    if (f.hasFnAttribute(llvm::Attribute::Naked)) return "a naked function " + f.getName().str();
    for (const llvm::BasicBlock& block : f)
      if (block.hasAddressTaken())
        return "a block's address (blockaddress) in " + f.getName().str();
    if (f.hasPrefixData() || f.hasPrologueData())
      return "prefix or prologue data in " + f.getName().str();
    for (const llvm::Argument& argument : f.args())
      if (copies_an_argument(f.getAttributes().getParamAttrs(argument.getArgNo())))
        return "a parameter passed by value in " + f.getName().str();
  }
  return {};
}

}  // namespace

void shape_for_window(llvm::Module& module, const std::string& ifunc) {
  if (const std::string what = unshaped_module(module); !what.empty()) refuse_shape(ifunc, what);
  llvm::LLVMContext& context = module.getContext();
  const llvm::DataLayout& layout = module.getDataLayout();
  llvm::Type* const i64 = llvm::Type::getInt64Ty(context);
  llvm::PointerType* const gs = llvm::PointerType::get(context, kGsAddressSpace);
  std::vector<std::pair<llvm::Instruction*, unsigned>> accesses;
  for (llvm::Function& f : module) {
    for (llvm::BasicBlock& block : f) {
      for (llvm::Instruction& i : block) {
        if (const std::string what = unshaped(i, layout); !what.empty())
          refuse_shape(ifunc, what + " in " + f.getName().str());
        const int operand = pointer_operand(i);
        if (operand < 0) continue;
        if (i.getOperand(operand)->getType()->getPointerAddressSpace() != 0)
          refuse_shape(ifunc, "an access in another address space in " + f.getName().str());
        accesses.emplace_back(&i, static_cast<unsigned>(operand));
      }
    }
  }
  // `unreachable` is a claim the code generator acts on: a switch whose
  // default is unreachable becomes a jump through its table with no bounds
  // check, indexed by whatever the code computed. A trap before it makes
  // the block real again (the check comes back) and stops code that does
  // reach it.
  std::vector<llvm::UnreachableInst*> claims;
  for (llvm::Function& f : module)
    for (llvm::BasicBlock& block : f)
      if (auto* end = llvm::dyn_cast<llvm::UnreachableInst>(block.getTerminator()))
        claims.push_back(end);
  for (llvm::UnreachableInst* end : claims)
    llvm::IRBuilder<>(end).CreateIntrinsic(llvm::Intrinsic::trap, {});
  // String attributes name functions the code generator calls
  // ("probe-stack"), choose CPU features and stack realignment: not the
  // sender's to choose.
  for (llvm::Function& f : module) {
    confine_pass::Confiner::drop_string_attributes(f);
    // Code the verifier (confine/verify_x86.hpp) can accept: no jump table
    // (an indirect jump), nothing kept below %rsp (the red zone: outside
    // any frame), %rsp never copied from %rbp.
    f.addFnAttr("no-jump-tables", "true");
    f.addFnAttr(llvm::Attribute::NoRedZone);
    f.addFnAttr("frame-pointer", "none");
    for (llvm::BasicBlock& block : f)
      for (llvm::Instruction& i : block)
        if (auto* call = llvm::dyn_cast<llvm::CallBase>(&i))
          confine_pass::Confiner::drop_string_attributes(*call);
  }
  for (const auto& [access, operand] : accesses) {
    // An alignment claim makes an aligned vector move, which faults on a
    // misaligned pointer with a general-protection fault that names no
    // address (a trap cannot tell it from the host's own). Atomics keep
    // theirs: the shape refused those that are not naturally aligned.
    if (auto* load = llvm::dyn_cast<llvm::LoadInst>(access); load != nullptr && !load->isAtomic())
      load->setAlignment(llvm::Align(1));
    if (auto* store = llvm::dyn_cast<llvm::StoreInst>(access);
        store != nullptr && !store->isAtomic())
      store->setAlignment(llvm::Align(1));
    llvm::IRBuilder<> b(access);
    llvm::Value* offset = b.CreateAnd(b.CreatePtrToInt(access->getOperand(operand), i64),
                                      llvm::ConstantInt::get(i64, 0xffffffffULL), "window.offset");
    access->setOperand(operand, b.CreateIntToPtr(offset, gs, "window.address"));
  }
}

}  // namespace threechains
