// The confinement pass: what is refused or dropped, before the optimiser
// (what could crash it or the code generator, or choose how the code is
// compiled) and before the checks go in (imports renamed, claims dropped).
#include "confine/confiner.hpp"

namespace threechains::confine_pass {

void Confiner::screen_before_optimiser() {
  if (!m_.getModuleInlineAsm().empty()) refuse(ifunc_, "module-level inline assembly");
  if (!m_.ifunc_empty()) refuse(ifunc_, "an IFUNC resolver (it would run at link time)");
  if (!m_.alias_empty()) refuse(ifunc_, "a global alias");
  for (GlobalVariable& global : m_.globals()) {
    if (!global.getName().starts_with("llvm.")) continue;
    if (global.getName() != "llvm.used" && global.getName() != "llvm.compiler.used")
      refuse(ifunc_, "the special global '" + global.getName().str() + "'");
  }
  for (GlobalValue& value : m_.global_values()) {
    if (value.getName().starts_with(confined::kReservedPrefix))
      refuse(ifunc_, "a symbol named '" + value.getName().str() + "' (reserved)");
    if (scalable(value.getValueType())) refuse(ifunc_, "a scalable vector type");
    if (const std::string why = too_wide(value.getValueType()); !why.empty())
      refuse(ifunc_, why + " ('" + value.getName().str() + "')");
  }
  const std::string entry = ifunc_ + "_main";
  for (Function& f : m_) {
    const std::string where = " ('" + f.getName().str() + "')";
    if (f.isIntrinsic()) {
      if (!intrinsic_allowed(f.getIntrinsicID()))
        refuse(ifunc_, "intrinsic " + f.getName().str() + ", which confined code may not call");
      continue;
    }
    if (f.getCallingConv() != CallingConv::C) refuse(ifunc_, "another calling convention" + where);
    if (f.hasFnAttribute(Attribute::Naked)) refuse(ifunc_, "a naked function" + where);
    drop_string_attributes(f);
    if (f.getName() == entry) {
      if (f.getFunctionType() != entry_type() || f.isVarArg())
        refuse(ifunc_, entry + " is not void(void*, size_t, void*)");
      // The runtime calls it as plain C: no attribute may change how its
      // arguments arrive (byval, sret, inreg...) or claim more of them.
      for (unsigned a = 0; a < f.arg_size(); ++a)
        f.removeParamAttrs(a, AttributeMask(f.getAttributes().getParamAttrs(a)));
      f.removeRetAttrs(AttributeMask(f.getAttributes().getRetAttrs()));
    }
    for (unsigned a = 0; a < f.arg_size(); ++a) {
      if (Type* t = f.getParamByValType(a); t != nullptr && !small_by_value(t))
        refuse(ifunc_, "an argument passed by value larger than 4 KiB" + where);
    }
    for (BasicBlock& block : f) {
      for (Instruction& i : block) {
        if (scalable(i.getType())) refuse(ifunc_, "a scalable vector type" + where);
        if (const std::string why = too_wide_value(i.getType()); !why.empty())
          refuse(ifunc_, why + where);
        for (const Use& operand : i.operands()) {
          if (scalable(operand->getType())) refuse(ifunc_, "a scalable vector type" + where);
          if (const std::string why = too_wide_value(operand->getType()); !why.empty())
            refuse(ifunc_, why + where);
        }
        if (auto* alloca = dyn_cast<AllocaInst>(&i)) {
          if (scalable(alloca->getAllocatedType()))
            refuse(ifunc_, "a scalable vector type" + where);
          if (const std::string why = too_wide(alloca->getAllocatedType()); !why.empty())
            refuse(ifunc_, why + where);
          if (alloca->isStaticAlloca()) {
            const std::optional<TypeSize> size = alloca->getAllocationSize(m_.getDataLayout());
            if (!size || size->getFixedValue() > kMaxFrame)
              refuse(ifunc_, "a local variable larger than 1 GiB" + where);
          }
        }
        if (auto* gep = dyn_cast<GetElementPtrInst>(&i);
            gep != nullptr && scalable(gep->getSourceElementType()))
          refuse(ifunc_, "a scalable vector type" + where);
        auto* call = dyn_cast<CallBase>(&i);
        if (call == nullptr) continue;
        drop_string_attributes(*call);
        if (!frame_depth_zero(*call))
          refuse(ifunc_, "a frame or return address deeper than its own" + where);
        if (call->getCallingConv() != CallingConv::C)
          refuse(ifunc_, "a call in another calling convention" + where);
        if (!agrees_with_callee(*call))
          refuse(ifunc_, "a call whose type or convention is not its callee's" + where);
        for (unsigned a = 0; a < call->arg_size(); ++a) {
          if (Type* t = call->getParamByValType(a); t != nullptr && !small_by_value(t))
            refuse(ifunc_, "an argument passed by value larger than 4 KiB" + where);
        }
      }
    }
  }
}

bool Confiner::small_by_value(Type* t) const {
  return t->isSized() && !scalable(t) && dl_.getTypeAllocSize(t).getFixedValue() <= kMaxByValue;
}

bool Confiner::c_or_fast(CallingConv::ID cc) {
  return cc == CallingConv::C || cc == CallingConv::Fast;
}

bool Confiner::agrees_with_callee(const CallBase& call) {
  const auto* callee = dyn_cast<Function>(call.getCalledOperand());
  return callee == nullptr || (callee->getFunctionType() == call.getFunctionType() &&
                               callee->getCallingConv() == call.getCallingConv());
}

bool Confiner::frame_depth_zero(const CallBase& call) {
  const Intrinsic::ID id = call.getIntrinsicID();
  if (id != Intrinsic::returnaddress && id != Intrinsic::frameaddress) return true;
  const auto* depth = dyn_cast<ConstantInt>(call.getArgOperand(0));
  return depth != nullptr && depth->isZero();
}

std::string Confiner::too_wide(Type* t) {
  if (t == nullptr) return {};
  if (auto* integer = dyn_cast<IntegerType>(t);
      integer != nullptr && integer->getBitWidth() > kMaxIntegerBits)
    return "an integer type of " + std::to_string(integer->getBitWidth()) + " bits (at most " +
           std::to_string(kMaxIntegerBits) + ")";
  if (auto* vector = dyn_cast<FixedVectorType>(t)) {
    const uint64_t lanes = vector->getNumElements();
    const uint64_t bits = lanes * vector->getScalarSizeInBits();
    if (lanes > kMaxVectorLanes || bits > kMaxVectorBits)
      return "a vector of " + std::to_string(lanes) + " lanes (" + std::to_string(bits) +
             " bits; at most " + std::to_string(kMaxVectorLanes) + " lanes and " +
             std::to_string(kMaxVectorBits) + " bits)";
  }
  for (Type* inner : t->subtypes())
    if (std::string why = too_wide(inner); !why.empty()) return why;
  return {};
}

std::string Confiner::too_wide_value(Type* t) const {
  if (std::string why = too_wide(t); !why.empty()) return why;
  if ((t->isArrayTy() || t->isStructTy()) && t->isSized() && !scalable(t) &&
      dl_.getTypeAllocSize(t).getFixedValue() > kMaxByValue)
    return "an aggregate value of " + std::to_string(dl_.getTypeAllocSize(t).getFixedValue()) +
           " bytes (at most " + std::to_string(kMaxByValue) + " as one value)";
  return {};
}

bool Confiner::scalable(Type* t) {
  if (t == nullptr) return false;
  if (isa<ScalableVectorType>(t)) return true;
  if (t->isTargetExtTy()) return true;  // opaque target types: nothing to check them by
  for (Type* inner : t->subtypes())
    if (scalable(inner)) return true;
  return false;
}

void Confiner::screen() {
  if (!m_.getModuleInlineAsm().empty()) refuse(ifunc_, "module-level inline assembly");
  if (!m_.ifunc_empty()) refuse(ifunc_, "an IFUNC resolver (it would run at link time)");
  if (!m_.alias_empty()) refuse(ifunc_, "a global alias");
  for (const char* name : {"llvm.global_ctors", "llvm.global_dtors"}) {
    if (m_.getNamedGlobal(name) != nullptr)
      refuse(ifunc_, "constructors or destructors (they would run outside any invocation)");
  }
  for (GlobalValue& value : m_.global_values()) {
    if (value.getName().starts_with(confined::kReservedPrefix))
      refuse(ifunc_, "a symbol named '" + value.getName().str() + "' (reserved)");
  }
  for (GlobalVariable& global : m_.globals()) {
    if (global.getName() == "llvm.used" || global.getName() == "llvm.compiler.used") continue;
    if (global.getName().starts_with("llvm."))
      refuse(ifunc_, "the special global '" + global.getName().str() + "'");
    if (global.isDeclaration())
      refuse(ifunc_, "it imports data ('" + global.getName().str() + "')");
    if (global.isThreadLocal())
      refuse(ifunc_, "a thread-local variable ('" + global.getName().str() + "')");
    if (global.getAddressSpace() != 0)
      refuse(ifunc_, "a global in address space " + std::to_string(global.getAddressSpace()));
    globals_.push_back(&global);
  }
  for (Function& f : m_) {
    if (f.isIntrinsic()) continue;
    if (f.isDeclaration()) {
      const std::string name = f.getName().str();
      if (!confined::is_confined_import(name)) {
        refuse(ifunc_, "it imports '" + name +
                           "' (confined code may import memory and string functions, libm "
                           "and <threechains/runtime.h>)");
      }
      f.setName(confined::kImportPrefix + name);
      continue;
    }
    if (f.isVarArg()) refuse(ifunc_, "a variadic function ('" + f.getName().str() + "')");
    if (!c_or_fast(f.getCallingConv()) || f.hasFnAttribute(Attribute::Naked))
      refuse(ifunc_, "another calling convention ('" + f.getName().str() + "')");
    if (f.hasPersonalityFn()) refuse(ifunc_, "exception handling in '" + f.getName().str() + "'");
    if (f.hasPrefixData() || f.hasPrologueData())
      refuse(ifunc_, "prefix or prologue data in '" + f.getName().str() + "'");
    for (Argument& argument : f.args()) {
      if (argument.hasInAllocaAttr() || argument.hasPreallocatedAttr())
        refuse(ifunc_, "an inalloca or preallocated argument");
    }
    for (BasicBlock& block : f) screen_block(f, block);
  }
}

void Confiner::screen_block(Function& f, BasicBlock& block) {
  const std::string where = " in '" + f.getName().str() + "'";
  for (Instruction& i : block) {
    if (isa<IndirectBrInst>(i) || isa<CallBrInst>(i)) refuse(ifunc_, "a computed jump" + where);
    if (isa<VAArgInst>(i)) refuse(ifunc_, "va_arg" + where);
    if (i.isEHPad() || isa<ResumeInst>(i)) refuse(ifunc_, "exception handling" + where);
    for (const Use& operand : i.operands()) {
      if (isa<BlockAddress>(operand.get())) refuse(ifunc_, "a block address" + where);
      if (operand->getType()->isPointerTy() && operand->getType()->getPointerAddressSpace() != 0)
        refuse(ifunc_, "a pointer in another address space" + where);
    }
    auto* call = dyn_cast<CallBase>(&i);
    if (call == nullptr) continue;
    if (call->isInlineAsm()) refuse(ifunc_, "inline assembly" + where);
    if (call->hasFnAttr(Attribute::ReturnsTwice)) refuse(ifunc_, "setjmp" + where);
    for (unsigned a = 0; a < call->arg_size(); ++a) {
      if (call->paramHasAttr(a, Attribute::InAlloca) ||
          call->paramHasAttr(a, Attribute::Preallocated))
        refuse(ifunc_, "an inalloca or preallocated argument" + where);
    }
    if (!c_or_fast(call->getCallingConv()))
      refuse(ifunc_, "a call in another calling convention" + where);
    if (!agrees_with_callee(*call))
      refuse(ifunc_, "a call whose type or convention is not its callee's" + where);
    const Function* callee = call->getCalledFunction();
    if (callee == nullptr || !callee->isIntrinsic()) continue;
    if (!frame_depth_zero(*call))
      refuse(ifunc_, "a frame or return address deeper than its own" + where);
    if (!intrinsic_allowed(callee->getIntrinsicID()))
      refuse(ifunc_,
             "intrinsic " + callee->getName().str() + ", which confined code may not call" + where);
  }
}

bool Confiner::intrinsic_allowed(Intrinsic::ID id) {
  switch (id) {
    // checked or rewritten by the pass
    case Intrinsic::memcpy:
    case Intrinsic::memcpy_inline:
    case Intrinsic::memmove:
    case Intrinsic::memset:
    case Intrinsic::memset_inline:
    case Intrinsic::masked_load:
    case Intrinsic::masked_store:
    case Intrinsic::masked_gather:
    case Intrinsic::masked_scatter:
    case Intrinsic::lifetime_start:
    case Intrinsic::lifetime_end:
    case Intrinsic::stacksave:
    case Intrinsic::stackrestore:
    case Intrinsic::trap:
    case Intrinsic::debugtrap:
    case Intrinsic::ubsantrap:
    case Intrinsic::assume:
    // its own frame only (call sites are held to depth 0: deeper ones load
    // through the frame chain)
    case Intrinsic::returnaddress:
    case Intrinsic::frameaddress:
    // hints
    case Intrinsic::prefetch:
    case Intrinsic::expect:
    case Intrinsic::expect_with_probability:
    case Intrinsic::is_constant:
    case Intrinsic::experimental_noalias_scope_decl:
    case Intrinsic::donothing:
    case Intrinsic::sideeffect:
    case Intrinsic::pseudoprobe:
    case Intrinsic::ptrmask:
    case Intrinsic::launder_invariant_group:
    case Intrinsic::strip_invariant_group:
    // integer arithmetic
    case Intrinsic::abs:
    case Intrinsic::smax:
    case Intrinsic::smin:
    case Intrinsic::umax:
    case Intrinsic::umin:
    case Intrinsic::scmp:
    case Intrinsic::ucmp:
    case Intrinsic::ctpop:
    case Intrinsic::ctlz:
    case Intrinsic::cttz:
    case Intrinsic::bswap:
    case Intrinsic::bitreverse:
    case Intrinsic::fshl:
    case Intrinsic::fshr:
    case Intrinsic::sadd_with_overflow:
    case Intrinsic::uadd_with_overflow:
    case Intrinsic::ssub_with_overflow:
    case Intrinsic::usub_with_overflow:
    case Intrinsic::smul_with_overflow:
    case Intrinsic::umul_with_overflow:
    case Intrinsic::sadd_sat:
    case Intrinsic::uadd_sat:
    case Intrinsic::ssub_sat:
    case Intrinsic::usub_sat:
    case Intrinsic::sshl_sat:
    case Intrinsic::ushl_sat:
    // floating point
    case Intrinsic::fabs:
    case Intrinsic::fma:
    case Intrinsic::fmuladd:
    case Intrinsic::sqrt:
    case Intrinsic::sin:
    case Intrinsic::cos:
    case Intrinsic::tan:
    case Intrinsic::pow:
    case Intrinsic::powi:
    case Intrinsic::exp:
    case Intrinsic::exp2:
    case Intrinsic::exp10:
    case Intrinsic::log:
    case Intrinsic::log2:
    case Intrinsic::log10:
    case Intrinsic::floor:
    case Intrinsic::ceil:
    case Intrinsic::trunc:
    case Intrinsic::rint:
    case Intrinsic::nearbyint:
    case Intrinsic::round:
    case Intrinsic::roundeven:
    case Intrinsic::copysign:
    case Intrinsic::minnum:
    case Intrinsic::maxnum:
    case Intrinsic::minimum:
    case Intrinsic::maximum:
    case Intrinsic::lround:
    case Intrinsic::llround:
    case Intrinsic::lrint:
    case Intrinsic::llrint:
    case Intrinsic::ldexp:
    case Intrinsic::frexp:
    case Intrinsic::is_fpclass:
    case Intrinsic::canonicalize:
    case Intrinsic::fptosi_sat:
    case Intrinsic::fptoui_sat:
    // vectors
    case Intrinsic::vector_reduce_add:
    case Intrinsic::vector_reduce_mul:
    case Intrinsic::vector_reduce_and:
    case Intrinsic::vector_reduce_or:
    case Intrinsic::vector_reduce_xor:
    case Intrinsic::vector_reduce_smax:
    case Intrinsic::vector_reduce_smin:
    case Intrinsic::vector_reduce_umax:
    case Intrinsic::vector_reduce_umin:
    case Intrinsic::vector_reduce_fadd:
    case Intrinsic::vector_reduce_fmul:
    case Intrinsic::vector_reduce_fmax:
    case Intrinsic::vector_reduce_fmin:
    case Intrinsic::vector_reduce_fmaximum:
    case Intrinsic::vector_reduce_fminimum:
    case Intrinsic::vector_reverse:
    case Intrinsic::vector_interleave2:
    case Intrinsic::vector_deinterleave2:
      return true;
    default:
      return false;
  }
}

void Confiner::strip_claims(Function& f) {
  // A frame larger than a page is probed page by page as it is made, so
  // it meets the guard page below the thread's stack instead of stepping
  // over it into other memory before the entry check runs.
  f.addFnAttr("probe-stack", "inline-asm");
  static constexpr Attribute::AttrKind kClaims[] = {
      Attribute::Alignment,   Attribute::Dereferenceable, Attribute::DereferenceableOrNull,
      Attribute::NonNull,     Attribute::NoUndef,         Attribute::Range,
      Attribute::NoAlias,     Attribute::Returned,        Attribute::Writable,
      Attribute::Initializes, Attribute::DeadOnUnwind,    Attribute::DeadOnReturn};
  static constexpr unsigned kClaimMetadata[] = {LLVMContext::MD_invariant_load,
                                                LLVMContext::MD_dereferenceable,
                                                LLVMContext::MD_dereferenceable_or_null,
                                                LLVMContext::MD_align,
                                                LLVMContext::MD_nonnull,
                                                LLVMContext::MD_range,
                                                LLVMContext::MD_noundef,
                                                LLVMContext::MD_invariant_group};
  AttributeMask mask;
  AttributeMask by_value_mask;  // a by-value argument's alignment says where the caller puts it
  for (const Attribute::AttrKind kind : kClaims) {
    mask.addAttribute(kind);
    if (kind != Attribute::Alignment) by_value_mask.addAttribute(kind);
  }
  f.removeRetAttrs(mask);
  for (unsigned a = 0; a < f.arg_size(); ++a)
    f.removeParamAttrs(a, f.hasParamAttribute(a, Attribute::ByVal) ? by_value_mask : mask);
  std::vector<IntrinsicInst*> assumptions;
  for (BasicBlock& block : f) {
    for (Instruction& i : block) {
      for (const unsigned kind : kClaimMetadata) i.setMetadata(kind, nullptr);
      if (auto* load = dyn_cast<LoadInst>(&i); load != nullptr && !load->isAtomic())
        load->setAlignment(Align(1));
      if (auto* store = dyn_cast<StoreInst>(&i); store != nullptr && !store->isAtomic())
        store->setAlignment(Align(1));
      auto* call = dyn_cast<CallBase>(&i);
      if (call == nullptr) continue;
      if (call->getIntrinsicID() == Intrinsic::assume) {
        assumptions.push_back(cast<IntrinsicInst>(call));
        continue;
      }
      call->removeRetAttrs(mask);
      for (unsigned a = 0; a < call->arg_size(); ++a)
        call->removeParamAttrs(a, call->paramHasAttr(a, Attribute::ByVal) ? by_value_mask : mask);
    }
  }
  for (IntrinsicInst* assumption : assumptions) assumption->eraseFromParent();
}

}  // namespace threechains::confine_pass
