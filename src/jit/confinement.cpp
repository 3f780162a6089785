// The confinement pass: explicit bounds checks, not guard regions.
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
#include "jit/confinement.hpp"

#include "jit/confined_runtime.hpp"

#include <threechains/confinement.hpp>
#include <threechains/error.hpp>

#include <llvm/Analysis/CFG.h>
#include <llvm/Analysis/ValueTracking.h>
#include <llvm/IR/AttributeMask.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/DataLayout.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Transforms/Utils/BasicBlockUtils.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

namespace threechains {
namespace {

using namespace llvm;

[[noreturn]] void refuse(const std::string& ifunc, const std::string& what) {
  throw Error(errc::import_refused, "ifunc '" + ifunc + "' cannot run confined: " + what +
                                        " (sign it with a key the target marks fully trusted, "
                                        "Trust::allow_native_code_signer, to run it unconfined)");
}

// One memory access to check: the instruction, which operand is its address,
// how many bytes from there it touches.
struct Access {
  Instruction* at;
  unsigned operand;
  Value* bytes;  // i64
  bool write;
  uint64_t atomic_size;  // nonzero: must be aligned to it
  bool per_lane;         // operand is a vector of addresses (gather/scatter)
  Value* mask;           // per lane: which lanes are live
};

class Confiner {
 public:
  Confiner(Module& module, const std::string& ifunc)
      : m_(module),
        dl_(module.getDataLayout()),
        ctx_(module.getContext()),
        ifunc_(ifunc),
        i64_(Type::getInt64Ty(ctx_)),
        i1_(Type::getInt1Ty(ctx_)),
        ptr_(PointerType::get(ctx_, 0)) {}

  void run() {
    screen();
    // Typed larger than the fields read, so nothing reads past what it declares.
    state_ = new GlobalVariable(m_, ArrayType::get(i64_, 16), false, GlobalValue::ExternalLinkage,
                                nullptr, confined::kStateSymbol);
    check_ = m_.getOrInsertFunction(confined::kCheckSymbol, Type::getVoidTy(ctx_), ptr_, i64_, i64_,
                                    i64_, ptr_);
    // Each checked access gets a slot in this table (sized at the end).
    sites_placeholder_ =
        new GlobalVariable(m_, ArrayType::get(site_type(), 0), false, GlobalValue::InternalLinkage,
                           nullptr, "__threechains_confined_sites_placeholder");
    trap_ = m_.getOrInsertFunction(confined::kTrapSymbol, Type::getVoidTy(ctx_), ptr_, i64_, i64_);
    tick_ = m_.getOrInsertFunction(confined::kTickSymbol, Type::getVoidTy(ctx_), ptr_);
    if (auto* f = dyn_cast<Function>(trap_.getCallee())) {
      f->setDoesNotReturn();
      f->setDoesNotThrow();
    }
    std::vector<Function*> defined;
    for (Function& f : m_)
      if (!f.isDeclaration() && !f.getName().starts_with(confined::kReservedPrefix))
        defined.push_back(&f);
    note_address_taken();
    for (Function* f : defined) {
      strip_claims(*f);
      instrument(*f);
    }
    lower_large_bulk();
    emit_globals_table();
    emit_sites();
    hide_symbols();
    std::string problems;
    raw_string_ostream out(problems);
    if (verifyModule(m_, &out)) {
      throw Error(errc::jit_failed, "ifunc '" + ifunc_ +
                                        "': the confinement pass produced invalid IR (a bug): " +
                                        problems.substr(0, 400));
    }
  }

  // Before the optimiser: what could crash the optimiser or the code
  // generator, or let the code choose how it is compiled, is refused or
  // removed here, so no pass ever sees it.
  void screen_before_optimiser() {
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
      if (f.getCallingConv() != CallingConv::C)
        refuse(ifunc_, "another calling convention" + where);
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

 private:
  static constexpr uint64_t kMaxFrame = uint64_t{1} << 30;
  static constexpr uint64_t kMaxByValue = 4096;

  FunctionType* entry_type() {
    return FunctionType::get(Type::getVoidTy(ctx_), {ptr_, i64_, ptr_}, false);
  }

  bool small_by_value(Type* t) const {
    return t->isSized() && !scalable(t) && dl_.getTypeAllocSize(t).getFixedValue() <= kMaxByValue;
  }

  // After the optimiser: C, or fastcc, which it gives internal functions
  // whose every call it sees (caller and callee change together).
  static bool c_or_fast(CallingConv::ID cc) {
    return cc == CallingConv::C || cc == CallingConv::Fast;
  }

  // One value for a check and for the use it guards. `freeze` gives that,
  // except of a constant undef or poison: the code generator materialises
  // those anew in each block, so the check and the access could each see a
  // different value. Those become zero.
  static bool has_undef(const Constant* c) {
    if (isa<UndefValue>(c)) return true;
    for (const Use& operand : c->operands())
      if (const auto* inner = dyn_cast<Constant>(operand.get());
          inner != nullptr && has_undef(inner))
        return true;
    return false;
  }
  static Value* freeze(IRBuilder<>& b, Value* v) {
    if (auto* c = dyn_cast<Constant>(v)) {
      if (isa<GlobalValue>(c)) return c;
      return has_undef(c) ? Constant::getNullValue(c->getType()) : c;
    }
    return b.CreateFreeze(v);
  }

  // A direct call must agree with its callee on type and convention: where
  // they differ, the callee reads arguments that were never passed (the
  // thread's stack) or writes a returned aggregate through a pointer the
  // caller never meant for it. (Calls through pointers are checked at run time.)
  static bool agrees_with_callee(const CallBase& call) {
    const auto* callee = dyn_cast<Function>(call.getCalledOperand());
    return callee == nullptr || (callee->getFunctionType() == call.getFunctionType() &&
                                 callee->getCallingConv() == call.getCallingConv());
  }

  static bool frame_depth_zero(const CallBase& call) {
    const Intrinsic::ID id = call.getIntrinsicID();
    if (id != Intrinsic::returnaddress && id != Intrinsic::frameaddress) return true;
    const auto* depth = dyn_cast<ConstantInt>(call.getArgOperand(0));
    return depth != nullptr && depth->isZero();
  }

  // A first line against types the code generator lowers slowly or not at
  // all: integers millions of bits wide end the process in LLVM (`LLVM
  // ERROR: unsupported library call` for a saturating conversion, a crash
  // for ctpop) or compile for minutes (a multiplication), and so do vectors
  // of millions of lanes. No honest kernel needs them; C's widest integer is
  // __int128. Empty if `t` (and everything in it) is fine.
  static constexpr unsigned kMaxIntegerBits = 128;
  static constexpr unsigned kMaxVectorLanes = 256;
  static constexpr uint64_t kMaxVectorBits = 16384;
  static std::string too_wide(Type* t) {
    if (t == nullptr) return {};
    if (auto* integer = dyn_cast<IntegerType>(t); integer != nullptr &&
                                                  integer->getBitWidth() > kMaxIntegerBits)
      return "an integer type of " + std::to_string(integer->getBitWidth()) +
             " bits (at most " + std::to_string(kMaxIntegerBits) + ")";
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
  // The same for a value an instruction computes or uses: in addition, no
  // aggregate (array or struct) over 4 KiB travels as one value (selection
  // lowers a load of [1000000 x i32] lane by lane, for as long as it takes).
  std::string too_wide_value(Type* t) const {
    if (std::string why = too_wide(t); !why.empty()) return why;
    if ((t->isArrayTy() || t->isStructTy()) && t->isSized() && !scalable(t) &&
        dl_.getTypeAllocSize(t).getFixedValue() > kMaxByValue)
      return "an aggregate value of " + std::to_string(dl_.getTypeAllocSize(t).getFixedValue()) +
             " bytes (at most " + std::to_string(kMaxByValue) + " as one value)";
    return {};
  }

  static bool scalable(Type* t) {
    if (t == nullptr) return false;
    if (isa<ScalableVectorType>(t)) return true;
    if (t->isTargetExtTy()) return true;  // opaque target types: nothing to check them by
    for (Type* inner : t->subtypes())
      if (scalable(inner)) return true;
    return false;
  }

  // String attributes choose CPU features (code this host cannot run),
  // instrumentation calls to any named function, split stacks, stack
  // realignment...: none is the sender's to choose. The host's CPU applies.
  template <class T>
  static void drop_string_attributes(T& holder) {
    AttributeList list = holder.getAttributes();
    std::vector<std::string> names;
    for (const Attribute& attribute : list.getFnAttrs())
      if (attribute.isStringAttribute()) names.push_back(attribute.getKindAsString().str());
    for (const std::string& name : names) holder.removeFnAttr(name);
  }

  // What cannot be confined is refused; imports are renamed to their
  // confined versions (checked wrappers, or pointer-free functions).
  void screen() {
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

  void screen_block(Function& f, BasicBlock& block) {
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
        refuse(ifunc_, "intrinsic " + callee->getName().str() +
                           ", which confined code may not call" + where);
    }
  }

  // Intrinsics confined code may call, by name: those the pass checks or
  // removes, and generic ones that compute on registers and cannot fault
  // (an allowlist: memory effects are not enough, llvm.returnaddress(3)
  // loads through the frame chain and llvm.sdiv.fix divides by zero).
  // Target intrinsics are refused: they can need features this host lacks.
  static bool intrinsic_allowed(Intrinsic::ID id) {
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

  // Claims the code generator would act on without checking them, all of
  // them the sender's to write: that memory is dereferenceable (a load may
  // then be hoisted above its check), aligned (an aligned vector move
  // faults), in a range (a jump table loses its bounds check), and
  // assumptions. Dropped before the checks go in; accesses become align 1
  // (as fast as aligned on the CPUs we target), atomics keep theirs and are
  // checked. (Operand bundles that carry such claims live on llvm.assume only.)
  void strip_claims(Function& f) {
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

  // --- emitting checks ---

  // `if (condition) trap(reason, address)`, before `at`.
  void trap_if(Value* condition, TrapReason reason, Value* address, Instruction* at) {
    Instruction* then = SplitBlockAndInsertIfThen(condition, at->getIterator(), true,
                                                  MDBuilder(ctx_).createUnlikelyBranchWeights());
    IRBuilder<> b(then);
    CallInst* call = b.CreateCall(
        trap_, {state_, ConstantInt::get(i64_, static_cast<uint64_t>(reason)), address});
    call->setDoesNotReturn();
  }

  // `[address, address + bytes)` lies in [begin, begin + size).
  Value* inside(IRBuilder<>& b, Value* address, Value* bytes, Value* begin, Value* size) {
    Value* offset = b.CreateSub(address, begin);
    return b.CreateAnd(b.CreateICmpULT(offset, size),
                       b.CreateICmpULE(bytes, b.CreateSub(size, offset)));
  }

  // Bounds every function loads once, in its prologue.
  struct Bounds {
    Value* payload_begin;
    Value* payload_size;
    Value* stack_begin;
    Value* stack_size;
  };

  Value* field(IRBuilder<>& b, uint64_t offset, const char* name) {
    return b.CreateLoad(i64_, b.CreateConstGEP1_64(b.getInt8Ty(), state_, offset), name);
  }
  void store_field(IRBuilder<>& b, uint64_t offset, Value* value) {
    b.CreateStore(value, b.CreateConstGEP1_64(b.getInt8Ty(), state_, offset));
  }

  // A site's cache: the region (begin, size) the runtime last found this
  // access in, if that was a global or an exposed region (never the payload
  // or the stack, which change between invocations). The runtime clears
  // every site when the exposed regions change. Confined code cannot
  // address the table: it is in no region.
  Type* site_type() { return ArrayType::get(i64_, 2); }

  // Checks one address before `at`: inline against the payload, the data
  // stack, the region this access site found last, and (where the address
  // is visibly based on one) a global of this module; the runtime's table
  // search otherwise, which traps or fills the site's cache.
  void check_address(Value* address, Value* bytes, bool write, Value* base, Instruction* at,
                     const Bounds& bounds) {
    // A chain of tests, most likely first, each branching to the access as
    // soon as one holds: an access to the payload costs one range test, one
    // to the region its site found last two.
    BasicBlock* head = at->getParent();
    BasicBlock* access = head->splitBasicBlock(at->getIterator(), "checked");
    head->getTerminator()->eraseFromParent();
    Function* f = head->getParent();
    MDNode* likely = MDBuilder(ctx_).createLikelyBranchWeights();
    IRBuilder<> b(head);
    const auto otherwise = [&](Value* holds, const char* name) {
      BasicBlock* next = BasicBlock::Create(ctx_, name, f, access);
      b.CreateCondBr(holds, access, next, likely);
      b.SetInsertPoint(next);
    };
    otherwise(inside(b, address, bytes, bounds.payload_begin, bounds.payload_size), "site");
    const uint64_t site_index = site_count_++;
    Value* site =
        b.CreateConstGEP2_64(ArrayType::get(site_type(), 0), sites_placeholder_, 0, site_index);
    Value* site_begin = b.CreateLoad(i64_, site);
    Value* site_size = b.CreateLoad(i64_, b.CreateConstGEP1_64(i64_, site, 1));
    otherwise(inside(b, address, bytes, site_begin, site_size), "stack");
    otherwise(inside(b, address, bytes, bounds.stack_begin, bounds.stack_size), "global");
    if (auto* global = dyn_cast_or_null<GlobalVariable>(base);
        global != nullptr && global->getName() != confined::kStateSymbol &&
        (!write || !global->isConstant())) {
      const uint64_t size = dl_.getTypeAllocSize(global->getValueType());
      otherwise(
          inside(b, address, bytes, b.CreatePtrToInt(global, i64_), ConstantInt::get(i64_, size)),
          "slow");
    }
    b.CreateCall(check_, {state_, address, bytes, ConstantInt::get(i64_, write ? 1 : 0), site});
    b.CreateBr(access);
  }

  void check_access(const Access& access, const Bounds& bounds) {
    Instruction* at = access.at;
    IRBuilder<> b(at);
    Value* original = at->getOperand(access.operand);
    Value* frozen = freeze(b, original);
    at->setOperand(access.operand, frozen);
    if (!access.per_lane) {
      Value* address = b.CreatePtrToInt(frozen, i64_);
      if (access.atomic_size > 1) {
        trap_if(b.CreateICmpNE(b.CreateAnd(address, access.atomic_size - 1), b.getInt64(0)),
                TrapReason::misaligned_atomic, address, at);
      }
      check_address(address, access.bytes, access.write, getUnderlyingObject(original), at, bounds);
      return;
    }
    // A vector of addresses: each live lane is checked.
    const auto* vector = cast<FixedVectorType>(frozen->getType());
    for (unsigned lane = 0; lane < vector->getNumElements(); ++lane) {
      IRBuilder<> lb(at);
      Value* address = lb.CreatePtrToInt(lb.CreateExtractElement(frozen, lane), i64_);
      Value* live = lb.CreateExtractElement(access.mask, lane);
      Instruction* then = SplitBlockAndInsertIfThen(live, at->getIterator(), false);
      check_address(address, access.bytes, access.write, nullptr, then, bounds);
    }
  }

  // Whether an access is visibly inside a local variable or a global of this
  // module (a constant offset from it, in bounds): no check needed.
  bool visibly_safe(Value* pointer, uint64_t bytes, bool write) const {
    APInt offset(64, 0);
    const Value* base = pointer->stripAndAccumulateConstantOffsets(dl_, offset, true);
    if (offset.isNegative()) return false;
    uint64_t size = 0;
    if (const auto* alloca = dyn_cast<AllocaInst>(base)) {
      if (!alloca->isStaticAlloca()) return false;
      const std::optional<TypeSize> allocated = alloca->getAllocationSize(dl_);
      if (!allocated || allocated->isScalable()) return false;
      size = allocated->getFixedValue();
    } else if (const auto* global = dyn_cast<GlobalVariable>(base)) {
      if (global->getName() == confined::kStateSymbol || global->isDeclaration()) return false;
      if (write && global->isConstant()) return false;
      size = dl_.getTypeAllocSize(global->getValueType());
    } else {
      return false;
    }
    return offset.getZExtValue() <= size && bytes <= size - offset.getZExtValue();
  }

  uint64_t store_size(Type* type) const {
    const TypeSize size = dl_.getTypeStoreSize(type);
    if (size.isScalable()) refuse(ifunc_, "a scalable vector access");
    return size.getFixedValue();
  }

  // The accesses of one function, with what their checks need.
  void collect_access(Instruction& i, std::vector<Access>& accesses) {
    auto add = [&](unsigned operand, uint64_t bytes, bool write, uint64_t atomic = 0) {
      if (atomic == 0 && visibly_safe(i.getOperand(operand), bytes, write)) return;
      accesses.push_back(
          {&i, operand, ConstantInt::get(i64_, bytes), write, atomic, false, nullptr});
    };
    if (auto* load = dyn_cast<LoadInst>(&i)) {
      const uint64_t bytes = store_size(load->getType());
      add(load->getPointerOperandIndex(), bytes, false, load->isAtomic() ? bytes : 0);
    } else if (auto* store = dyn_cast<StoreInst>(&i)) {
      const uint64_t bytes = store_size(store->getValueOperand()->getType());
      add(store->getPointerOperandIndex(), bytes, true, store->isAtomic() ? bytes : 0);
    } else if (auto* rmw = dyn_cast<AtomicRMWInst>(&i)) {
      const uint64_t bytes = store_size(rmw->getValOperand()->getType());
      add(rmw->getPointerOperandIndex(), bytes, true, bytes);
    } else if (auto* cas = dyn_cast<AtomicCmpXchgInst>(&i)) {
      const uint64_t bytes = store_size(cas->getCompareOperand()->getType());
      add(cas->getPointerOperandIndex(), bytes, true, bytes);
    } else if (auto* call = dyn_cast<CallBase>(&i)) {
      collect_call_access(*call, accesses);
    }
  }

  void collect_call_access(CallBase& call, std::vector<Access>& accesses) {
    IRBuilder<> b(&call);
    // Lengths and masks are frozen and written back: the check and the call
    // must see one value, not two readings of a poison one.
    auto frozen = [&](unsigned operand) {
      Value* value = call.getArgOperand(operand);
      if (isa<ConstantInt>(value)) return value;  // memcpy.inline's length must stay one
      value = freeze(b, value);
      call.setArgOperand(operand, value);
      return value;
    };
    auto length = [&](unsigned operand) { return b.CreateZExtOrTrunc(frozen(operand), i64_); };
    switch (call.getIntrinsicID()) {
      case Intrinsic::memcpy:
      case Intrinsic::memcpy_inline:
      case Intrinsic::memmove: {
        Value* n = length(2);
        bulk_.push_back({&call, n});
        accesses.push_back({&call, 0, n, true, 0, false, nullptr});
        accesses.push_back({&call, 1, n, false, 0, false, nullptr});
        return;
      }
      case Intrinsic::memset:
      case Intrinsic::memset_inline: {
        Value* n = length(2);
        bulk_.push_back({&call, n});
        accesses.push_back({&call, 0, n, true, 0, false, nullptr});
      }
        return;
      case Intrinsic::masked_load:
        accesses.push_back(
            {&call, 0, b.getInt64(store_size(call.getType())), false, 0, false, nullptr});
        return;
      case Intrinsic::masked_store:
        accesses.push_back({&call, 1, b.getInt64(store_size(call.getArgOperand(0)->getType())),
                            true, 0, false, nullptr});
        return;
      case Intrinsic::masked_gather: {
        const auto* type = cast<VectorType>(call.getType());
        accesses.push_back(
            {&call, 0, b.getInt64(store_size(type->getElementType())), false, 0, true, frozen(1)});
        return;
      }
      case Intrinsic::masked_scatter: {
        const auto* type = cast<VectorType>(call.getArgOperand(0)->getType());
        accesses.push_back(
            {&call, 1, b.getInt64(store_size(type->getElementType())), true, 0, true, frozen(2)});
        return;
      }
      default:
        break;
    }
    // A struct passed by value is read by the call itself.
    for (unsigned a = 0; a < call.arg_size(); ++a) {
      if (Type* type = call.getParamByValType(a)) {
        const uint64_t bytes = dl_.getTypeAllocSize(type);
        if (!visibly_safe(call.getArgOperand(a), bytes, false))
          accesses.push_back({&call, a, b.getInt64(bytes), false, 0, false, nullptr});
      }
    }
  }

  // What a fuel point (the entry, a loop header) pays: the most
  // instructions any path from it runs before the next fuel point. Every
  // cycle passes a loop header (the target of a back edge), so such a path
  // follows forward edges only and runs each block at most once: the
  // longest path in that acyclic graph bounds it. A call counts as one; its
  // callee pays at its own entry, and imports charge by the work they do.
  // So one unit of fuel is at most one instruction's time, whatever the
  // code does between two looks at the clock (docs/security.md, "Time").
  static std::map<const BasicBlock*, uint64_t> costs_between_fuel_points(
      Function& f, const std::set<BasicBlock*>& loop_heads) {
    const auto forward = [&](const BasicBlock* from, const BasicBlock* to) {
      return !loop_heads.contains(const_cast<BasicBlock*>(to)) && to != &f.getEntryBlock() &&
             from != to;
    };
    // Those edges form an acyclic graph (every cycle has a back edge, whose
    // target is cut): a topological order (Kahn's), then the longest path
    // from each block, successors first. Linear in blocks and edges.
    std::map<const BasicBlock*, uint64_t> indegree;
    for (const BasicBlock& block : f) {
      indegree.try_emplace(&block, 0);
      if (const Instruction* terminator = block.getTerminator()) {
        for (unsigned k = 0; k < terminator->getNumSuccessors(); ++k)
          if (forward(&block, terminator->getSuccessor(k))) ++indegree[terminator->getSuccessor(k)];
      }
    }
    std::vector<const BasicBlock*> order;
    for (const auto& [block, count] : indegree)
      if (count == 0) order.push_back(block);
    for (std::size_t k = 0; k < order.size(); ++k) {
      const Instruction* terminator = order[k]->getTerminator();
      if (terminator == nullptr) continue;
      for (unsigned n = 0; n < terminator->getNumSuccessors(); ++n) {
        const BasicBlock* to = terminator->getSuccessor(n);
        if (forward(order[k], to) && --indegree[to] == 0) order.push_back(to);
      }
    }
    std::map<const BasicBlock*, uint64_t> longest;  // from a block to the next fuel point
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      uint64_t after = 0;
      if (const Instruction* terminator = (*it)->getTerminator()) {
        for (unsigned n = 0; n < terminator->getNumSuccessors(); ++n) {
          const BasicBlock* to = terminator->getSuccessor(n);
          if (forward(*it, to)) after = std::max(after, longest[to]);
        }
      }
      longest[*it] = block_cost(**it) + after;
    }
    std::map<const BasicBlock*, uint64_t> costs;
    costs[&f.getEntryBlock()] = std::max<uint64_t>(longest[&f.getEntryBlock()], 1);
    for (BasicBlock* head : loop_heads) costs[head] = std::max<uint64_t>(longest[head], 1);
    return costs;
  }

  // A block's instructions, and a call of an import (libm, the runtime) at
  // kImportCallCost: 3.2 us at 100 ns a unit, where the slowest libm call
  // measured (threechains-bench-libm-worst: tgamma of a negative argument)
  // takes about 100 ns. The checked imports also pay by their work.
  static constexpr uint64_t kImportCallCost = 32;
  static uint64_t block_cost(const BasicBlock& block) {
    uint64_t cost = block.size();
    for (const Instruction& i : block) {
      const auto* call = dyn_cast<CallBase>(&i);
      const Function* callee = call == nullptr ? nullptr : call->getCalledFunction();
      if (callee != nullptr && callee->isDeclaration() && !callee->isIntrinsic())
        cost += kImportCallCost - 1;
    }
    return cost;
  }

  // Spends `cost` units of fuel before `at`; the runtime looks at the clock
  // when a chunk is used up (and traps past the budget).
  void spend_fuel(Instruction* at, uint64_t cost) {
    IRBuilder<> b(at);
    Value* left = b.CreateSub(field(b, confined::kFuel, "fuel"), b.getInt64(cost));
    store_field(b, confined::kFuel, left);
    Instruction* then =
        SplitBlockAndInsertIfThen(b.CreateICmpSLT(left, b.getInt64(0)), at->getIterator(), false,
                                  MDBuilder(ctx_).createUnlikelyBranchWeights());
    IRBuilder<>(then).CreateCall(tick_, {state_});
  }

  // Whether `[address, ...)` from the data stack pointer may grow by `bytes`
  // with `align`: the new stack pointer, after trapping if it may not.
  Value* push_data_stack(IRBuilder<>& b, Value* bytes, uint64_t align, Instruction* at,
                         Value* stack_begin) {
    Value* sp = field(b, confined::kStackPointer, "dsp");
    Value* room = b.CreateSub(sp, stack_begin);
    Value* need = b.CreateAdd(bytes, b.getInt64(align));
    Value* short_of_room = b.CreateOr(b.CreateICmpULT(need, bytes), b.CreateICmpUGT(need, room));
    trap_if(short_of_room, TrapReason::stack_exhausted, bytes, at);
    IRBuilder<> after(at);
    Value* top = after.CreateAnd(after.CreateSub(sp, bytes), after.getInt64(~(align - 1)));
    store_field(after, confined::kStackPointer, top);
    return top;
  }

  void instrument(Function& f) {
    // What to rewrite, gathered before anything changes.
    std::vector<Access> accesses;
    std::vector<AllocaInst*> static_allocas;
    std::vector<AllocaInst*> dynamic_allocas;
    std::vector<IntrinsicInst*> stack_saves;
    std::vector<IntrinsicInst*> stack_restores;
    std::vector<Instruction*> removed;  // lifetime markers
    std::vector<BinaryOperator*> divisions;
    std::vector<Instruction*> traps;  // unreachable, llvm.trap
    std::vector<CallBase*> indirect_calls;
    std::vector<ReturnInst*> returns;
    std::vector<CallInst*> musttail_calls;
    SmallVector<std::pair<const BasicBlock*, const BasicBlock*>, 8> backedges;
    FindFunctionBackedges(f, backedges);
    std::set<BasicBlock*> loop_heads;
    for (const auto& edge : backedges) loop_heads.insert(const_cast<BasicBlock*>(edge.second));
    // What each fuel point costs, counted on the code as sent (before the
    // checks this pass adds, which are at most a constant factor more).
    const std::map<const BasicBlock*, uint64_t> fuel_cost = costs_between_fuel_points(f, loop_heads);

    for (BasicBlock& block : f) {
      for (Instruction& i : block) {
        collect_access(i, accesses);
        if (auto* alloca = dyn_cast<AllocaInst>(&i)) {
          (alloca->isStaticAlloca() ? static_allocas : dynamic_allocas).push_back(alloca);
        } else if (auto* op = dyn_cast<BinaryOperator>(&i)) {
          const auto code = op->getOpcode();
          if (code == Instruction::SDiv || code == Instruction::UDiv || code == Instruction::SRem ||
              code == Instruction::URem)
            divisions.push_back(op);
        } else if (isa<UnreachableInst>(i)) {
          traps.push_back(&i);
        } else if (auto* ret = dyn_cast<ReturnInst>(&i)) {
          returns.push_back(ret);
        } else if (auto* call = dyn_cast<CallBase>(&i)) {
          if (auto* ci = dyn_cast<CallInst>(call); ci != nullptr && ci->isMustTailCall())
            musttail_calls.push_back(ci);
          // Not a Function: a pointer, or a constant expression (an
          // address inside one, an integer made a pointer). Checked alike.
          if (!call->isInlineAsm() && !isa<Function>(call->getCalledOperand()))
            indirect_calls.push_back(call);
          switch (call->getIntrinsicID()) {
            case Intrinsic::lifetime_start:
            case Intrinsic::lifetime_end:
              removed.push_back(call);
              break;
            case Intrinsic::stacksave:
              stack_saves.push_back(cast<IntrinsicInst>(call));
              break;
            case Intrinsic::stackrestore:
              stack_restores.push_back(cast<IntrinsicInst>(call));
              break;
            case Intrinsic::trap:
            case Intrinsic::debugtrap:
            case Intrinsic::ubsantrap:
              traps.push_back(call);
              break;
            default:
              break;
          }
        }
      }
    }
    for (Instruction* i : removed) i->eraseFromParent();

    // Prologue, in a block of its own before the old entry.
    BasicBlock* old_entry = &f.getEntryBlock();
    BasicBlock* entry = BasicBlock::Create(ctx_, "confined.entry", &f, old_entry);
    Instruction* jump = BranchInst::Create(old_entry, entry);
    {
      IRBuilder<> b(jump);
      Value* sp = b.CreatePtrToInt(b.CreateIntrinsic(Intrinsic::stacksave, {ptr_}, {}), i64_);
      trap_if(b.CreateICmpULT(sp, field(b, confined::kNativeLimit, "native_limit")),
              TrapReason::stack_exhausted, sp, jump);
    }
    spend_fuel(jump, fuel_cost.at(old_entry));
    IRBuilder<> b(jump);
    Bounds bounds{field(b, confined::kPayloadBegin, "payload_begin"),
                  field(b, confined::kPayloadSize, "payload_size"),
                  field(b, confined::kStackBegin, "stack_begin"),
                  field(b, confined::kStackSize, "stack_size")};
    const bool uses_data_stack =
        !static_allocas.empty() || !dynamic_allocas.empty() || !stack_saves.empty() ||
        std::any_of(f.arg_begin(), f.arg_end(), [](const Argument& a) { return a.hasByValAttr(); });
    Value* frame_sp = nullptr;
    if (uses_data_stack) frame_sp = field(b, confined::kStackPointer, "frame_sp");

    // Static locals, and copies of what the caller passed by value (which
    // it left on the thread's stack): one frame on the data stack.
    std::vector<Argument*> by_value;
    for (Argument& argument : f.args())
      if (argument.hasByValAttr()) by_value.push_back(&argument);
    if (!static_allocas.empty() || !by_value.empty()) {
      if (frame_sp == nullptr) frame_sp = field(b, confined::kStackPointer, "frame_sp");
      uint64_t size = 0;
      uint64_t align = 16;
      std::vector<uint64_t> offsets;
      auto place = [&](uint64_t bytes, uint64_t a) {
        align = std::max(align, a);
        size = (size + a - 1) & ~(a - 1);
        offsets.push_back(size);
        size += bytes;
      };
      for (AllocaInst* alloca : static_allocas)
        place(alloca->getAllocationSize(dl_)->getFixedValue(), alloca->getAlign().value());
      for (Argument* argument : by_value)
        place(dl_.getTypeAllocSize(argument->getParamByValType()),
              argument->getParamAlign().valueOrOne().value());
      size = (size + 15) & ~uint64_t{15};
      Value* top = push_data_stack(b, b.getInt64(size), align, jump, bounds.stack_begin);
      IRBuilder<> at(jump);
      Value* frame = at.CreateIntToPtr(top, ptr_, "frame");
      for (std::size_t k = 0; k < static_allocas.size(); ++k) {
        Value* slot = at.CreateConstGEP1_64(at.getInt8Ty(), frame, offsets[k]);
        static_allocas[k]->replaceAllUsesWith(slot);
        static_allocas[k]->eraseFromParent();
      }
      for (std::size_t k = 0; k < by_value.size(); ++k) {
        Argument* argument = by_value[k];
        Value* slot =
            at.CreateConstGEP1_64(at.getInt8Ty(), frame, offsets[static_allocas.size() + k]);
        argument->replaceAllUsesWith(slot);
        at.CreateMemCpy(slot, Align(1), argument, Align(1),
                        dl_.getTypeAllocSize(argument->getParamByValType()));
      }
    }
    for (AllocaInst* alloca : dynamic_allocas) {
      IRBuilder<> at(alloca);
      Value* count = at.CreateZExtOrTrunc(freeze(at, alloca->getArraySize()), i64_);
      const uint64_t element = dl_.getTypeAllocSize(alloca->getAllocatedType());
      Value* bytes = at.CreateMul(count, at.getInt64(element));
      // A count so large the product wraps is as out of room as any.
      Value* wrapped =
          at.CreateICmpUGT(count, at.getInt64(UINT64_MAX / std::max<uint64_t>(element, 1)));
      trap_if(wrapped, TrapReason::stack_exhausted, count, alloca);
      IRBuilder<> then(alloca);
      const uint64_t align = std::max<uint64_t>(16, alloca->getAlign().value());
      Value* top = push_data_stack(then, bytes, align, alloca, bounds.stack_begin);
      IRBuilder<> last(alloca);
      alloca->replaceAllUsesWith(last.CreateIntToPtr(top, ptr_));
      alloca->eraseFromParent();
    }
    for (IntrinsicInst* save : stack_saves) {
      IRBuilder<> at(save);
      save->replaceAllUsesWith(at.CreateIntToPtr(field(at, confined::kStackPointer, "dsp"), ptr_));
      save->eraseFromParent();
    }
    for (IntrinsicInst* restore : stack_restores) {
      IRBuilder<> at(restore);
      Value* to = at.CreatePtrToInt(freeze(at, restore->getArgOperand(0)), i64_);
      trap_if(at.CreateICmpUGT(at.CreateSub(to, bounds.stack_begin), bounds.stack_size),
              TrapReason::stack_exhausted, to, restore);
      IRBuilder<> then(restore);
      store_field(then, confined::kStackPointer, to);
      restore->eraseFromParent();
    }
    // Each return, and each call that must be the last thing before one,
    // gives the frame back.
    if (uses_data_stack) {
      for (ReturnInst* ret : returns) {
        IRBuilder<> at(ret);
        store_field(at, confined::kStackPointer, frame_sp);
      }
      for (CallInst* call : musttail_calls) {
        IRBuilder<> at(call);
        store_field(at, confined::kStackPointer, frame_sp);
      }
    }

    for (BasicBlock* head : loop_heads) spend_fuel(&*head->getFirstInsertionPt(), fuel_cost.at(head));
    // A memcpy costs fuel by its length (a unit per 64 bytes), so a loop of
    // large copies runs out as a loop of small steps would.
    for (const auto& [call, bytes] : bulk_) {
      IRBuilder<> b(call);
      Value* left = b.CreateSub(field(b, confined::kFuel, "fuel"),
                                b.CreateAdd(b.CreateLShr(bytes, 6), b.getInt64(1)));
      store_field(b, confined::kFuel, left);
      Instruction* then =
          SplitBlockAndInsertIfThen(b.CreateICmpSLT(left, b.getInt64(0)), call->getIterator(),
                                    false, MDBuilder(ctx_).createUnlikelyBranchWeights());
      IRBuilder<>(then).CreateCall(tick_, {state_});
    }
    // A large copy or fill runs in the runtime's checked import, which does
    // it in pieces and looks at the clock between them: a memcpy of a
    // 256 MiB global would otherwise run to its end past any budget.
    for (const auto& [call, bytes] : bulk_) {
      const auto* constant = dyn_cast<ConstantInt>(call->getOperand(2));
      if (constant != nullptr && constant->getZExtValue() <= kLargestUnpieced) continue;
      large_bulk_.push_back(call);
    }
    bulk_.clear();
    for (const Access& access : accesses) check_access(access, bounds);
    for (BinaryOperator* division : divisions) check_division(*division);
    for (CallBase* call : indirect_calls) {
      IRBuilder<> at(call);
      Value* callee = freeze(at, call->getCalledOperand());
      call->setCalledOperand(callee);
      trap_if(at.CreateNot(at.CreateCall(
                  callee_check(call->getFunctionType(), call->getCallingConv()), {callee})),
              TrapReason::bad_call, at.CreatePtrToInt(callee, i64_), call);
    }
    for (Instruction* t : traps) {
      IRBuilder<> at(t);
      at.CreateCall(trap_, {state_, at.getInt64(static_cast<uint64_t>(TrapReason::unreachable)),
                            at.getInt64(0)})
          ->setDoesNotReturn();
      if (!isa<UnreachableInst>(t)) t->eraseFromParent();  // llvm.trap and kin
    }
  }

  void check_division(BinaryOperator& division) {
    Value* divisor = division.getOperand(1);
    const bool is_signed =
        division.getOpcode() == Instruction::SDiv || division.getOpcode() == Instruction::SRem;
    if (const auto* constant = dyn_cast<ConstantInt>(divisor);
        constant != nullptr && !constant->isZero() && !(is_signed && constant->isMinusOne()))
      return;
    IRBuilder<> b(&division);
    Value* d = freeze(b, divisor);
    Value* n = freeze(b, division.getOperand(0));
    division.setOperand(0, n);
    division.setOperand(1, d);
    Type* type = d->getType();
    Value* bad = b.CreateICmpEQ(d, Constant::getNullValue(type));
    if (is_signed) {
      const unsigned bits = type->getScalarSizeInBits();
      Value* min = ConstantInt::get(type, APInt::getSignedMinValue(bits));
      bad = b.CreateOr(bad, b.CreateAnd(b.CreateICmpEQ(n, min),
                                        b.CreateICmpEQ(d, Constant::getAllOnesValue(type))));
    }
    if (bad->getType()->isVectorTy()) bad = b.CreateOrReduce(bad);
    trap_if(bad, TrapReason::division, b.getInt64(0), &division);
  }

  // The functions an indirect call may reach: the module's own and its
  // imports, where their address is taken (before the pass adds uses).
  void note_address_taken() {
    for (Function& f : m_) {
      const bool runtime = f.getName().starts_with(confined::kReservedPrefix) &&
                           !f.getName().starts_with(confined::kImportPrefix);
      if (f.isIntrinsic() || runtime) continue;
      if (f.hasAddressTaken()) address_taken_.push_back(&f);
    }
  }

  // `bool callee_ok(ptr)` for calls of type `type`: whether an address is one
  // of the address-taken functions of exactly that type (a call of another
  // type would disagree with its callee about registers, stack and where a
  // returned aggregate goes).
  Function* callee_check(FunctionType* type, CallingConv::ID cc) {
    if (const auto it = callee_checks_.find({type, cc}); it != callee_checks_.end())
      return it->second;
    auto* check_type = FunctionType::get(i1_, {ptr_}, false);
    Function* check = Function::Create(check_type, GlobalValue::InternalLinkage,
                                       "__threechains_confined_callee_ok", m_);
    IRBuilder<> b(BasicBlock::Create(ctx_, "entry", check));
    Value* wanted = check->getArg(0);
    Value* found = b.getFalse();
    for (Function* f : address_taken_)
      if (f->getFunctionType() == type && f->getCallingConv() == cc)
        found = b.CreateOr(found, b.CreateICmpEQ(wanted, f));
    b.CreateRet(found);
    callee_checks_.emplace(std::pair{type, cc}, check);
    return check;
  }

  // `__threechains_confined_globals`: where this module's globals are, for
  // the runtime's table (the inline checks know only the one at hand).
  void emit_globals_table() {
    auto* entry = StructType::get(ptr_, i64_, i64_);
    std::vector<Constant*> entries;
    for (GlobalVariable* global : globals_) {
      const uint64_t size = dl_.getTypeAllocSize(global->getValueType());
      if (size == 0) continue;
      entries.push_back(
          ConstantStruct::get(entry, {global, ConstantInt::get(i64_, size),
                                      ConstantInt::get(i64_, global->isConstant() ? 0 : 1)}));
    }
    auto* array_type = ArrayType::get(entry, entries.size());
    auto* table_type = StructType::get(i64_, array_type);
    auto* table = ConstantStruct::get(table_type, {ConstantInt::get(i64_, entries.size()),
                                                   ConstantArray::get(array_type, entries)});
    new GlobalVariable(m_, table_type, true, GlobalValue::ExternalLinkage, table,
                       confined::kGlobalsSymbol);
  }

  // `__threechains_confined_sites`: one cache per checked access.
  void emit_sites() {
    auto* type = ArrayType::get(site_type(), site_count_);
    auto* sites = new GlobalVariable(m_, type, false, GlobalValue::ExternalLinkage,
                                     ConstantAggregateZero::get(type), confined::kSitesSymbol);
    sites_placeholder_->replaceAllUsesWith(sites);
    sites_placeholder_->eraseFromParent();
    // The count, for the runtime that clears them.
    new GlobalVariable(m_, i64_, true, GlobalValue::ExternalLinkage,
                       ConstantInt::get(i64_, site_count_), confined::kSiteCountSymbol);
  }

  // Memory intrinsics whose length may exceed kLargestUnpieced become calls
  // of the checked imports (the same bounds, checked again; done in pieces
  // with the clock looked at between them).
  void lower_large_bulk() {
    if (large_bulk_.empty()) return;
    const FunctionCallee move = m_.getOrInsertFunction(std::string(confined::kImportPrefix) + "memmove",
                                                       ptr_, ptr_, ptr_, i64_);
    const FunctionCallee fill = m_.getOrInsertFunction(std::string(confined::kImportPrefix) + "memset",
                                                       ptr_, ptr_, Type::getInt32Ty(ctx_), i64_);
    for (Instruction* call : large_bulk_) {
      auto* intrinsic = cast<IntrinsicInst>(call);
      IRBuilder<> b(intrinsic);
      Value* length = b.CreateZExtOrTrunc(intrinsic->getArgOperand(2), i64_);
      const Intrinsic::ID id = intrinsic->getIntrinsicID();
      if (id == Intrinsic::memset || id == Intrinsic::memset_inline) {
        b.CreateCall(fill, {intrinsic->getArgOperand(0),
                            b.CreateZExt(intrinsic->getArgOperand(1), Type::getInt32Ty(ctx_)),
                            length});
      } else {
        b.CreateCall(move, {intrinsic->getArgOperand(0), intrinsic->getArgOperand(1), length});
      }
      intrinsic->eraseFromParent();
    }
    large_bulk_.clear();
  }

  // Only the entry point and the tables stay visible. Everything else is
  // internal and renamed, so no name of the ifunc's can stand in for a
  // symbol the code generator calls by name (memcpy, __udivti3, ...).
  void hide_symbols() {
    const std::string entry = ifunc_ + "_main";
    for (GlobalValue& value : m_.global_values()) {
      if (value.isDeclaration() || value.getName() == entry ||
          value.getName() == confined::kGlobalsSymbol ||
          value.getName() == confined::kSitesSymbol ||
          value.getName() == confined::kSiteCountSymbol || value.getName().starts_with("llvm."))
        continue;
      if (!value.hasLocalLinkage()) value.setLinkage(GlobalValue::InternalLinkage);
      value.setVisibility(GlobalValue::DefaultVisibility);
      if (value.hasName() && !value.getName().starts_with(confined::kReservedPrefix))
        value.setName("confined." + value.getName());
    }
  }

  Module& m_;
  const DataLayout& dl_;
  LLVMContext& ctx_;
  std::string ifunc_;
  Type* i64_;
  Type* i1_;
  PointerType* ptr_;
  GlobalVariable* state_ = nullptr;
  FunctionCallee check_;
  FunctionCallee trap_;
  FunctionCallee tick_;
  std::vector<Function*> address_taken_;
  std::vector<std::pair<Instruction*, Value*>> bulk_;  // memory intrinsics and their lengths
  std::vector<Instruction*> large_bulk_;  // those whose length may pass kLargestUnpieced
  // The longest copy or fill done in one piece (time: microseconds).
  static constexpr uint64_t kLargestUnpieced = uint64_t{64} << 10;
  std::map<std::pair<FunctionType*, CallingConv::ID>, Function*> callee_checks_;
  GlobalVariable* sites_placeholder_ = nullptr;
  uint64_t site_count_ = 0;
  std::vector<GlobalVariable*> globals_;
};

}  // namespace

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
