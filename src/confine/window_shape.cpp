// The window shape (pass.hpp, shape_for_window): on x86-64 each access's
// pointer becomes `inttoptr (ptrtoint p & 0xffffffff) to ptr
// addrspace(256)`. The x86 back end addresses address space 256 through
// %gs, and it cannot fold anything outside the mask into the address, so
// what it emits is a 32-bit register write (`leal`, `movl`) and then
// `%gs:(%reg)`: the shape verify_x86.hpp checks. On aarch64 the pointer is
// `getelementptr i8, x21, (ptrtoint p & 0xffffffff)`, x21 read with
// llvm.read_register: the back end folds the mask into the access as
// `[x21, wN, uxtw]`, the shape verify_aarch64.hpp checks.
//
// Local variables become globals of the module (the window holds those),
// and memcpy, memmove and memset loops of loads and stores, before the
// accesses are masked. Everything that reaches memory some other way is
// refused: what the code
// generator turns into a copy or a call through an unmasked pointer
// (by-value arguments, atomics it cannot do inline, exception handling),
// and what puts machine code or a call the module did not write into the
// object (inline assembly, prologue data, constructors, personalities).
#include "confine/confiner.hpp"
#include "confine/pass.hpp"
#include "confine/window_mask_folding.hpp"

#include <threechains/error.hpp>

#include <llvm/Analysis/TargetTransformInfo.h>
#include <llvm/Analysis/TargetTransformInfoImpl.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/Module.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/Triple.h>
#include <llvm/Transforms/Utils/BasicBlockUtils.h>
#include <llvm/Transforms/Utils/Local.h>
#include <llvm/Transforms/Utils/LowerMemIntrinsics.h>

#include <unordered_map>
#include <vector>

namespace threechains {

namespace {

// x86's address space for %gs-relative accesses (X86AS::GS).
constexpr unsigned kGsAddressSpace = 256;
// The widest access: far inside the guard past the window's end.
constexpr uint64_t kWidestAccess = 4096;
// The largest displacement the aarch64 shape leaves outside the mask: with
// the widest access, far inside the 2 GiB guards (confine/window.hpp).
constexpr uint64_t kMaxFoldedDisplacement = uint64_t{1} << 20;

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
  if (llvm::isa<llvm::AllocaInst>(i))  // frames_to_globals left none it could take
    return "a local variable made as it runs (of a size known only then, or outside the "
           "function's entry)";
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

// A function that can call itself, directly or through others, or empty.
// The verifier refuses such code (its stack would have no bound), and
// frames_to_globals needs none: a function whose frame is a global must
// never be under way twice.
std::string recursive_function(const llvm::Module& module) {
  enum class Mark { unseen, open, done };
  std::unordered_map<const llvm::Function*, Mark> marks;
  // Depth-first over direct calls, with an explicit stack: the call graph
  // is the sender's, and so is its depth.
  struct Frame {
    const llvm::Function* function;
    std::vector<const llvm::Function*> callees;
    std::size_t next = 0;
  };
  const auto callees_of = [](const llvm::Function& f) {
    std::vector<const llvm::Function*> callees;
    for (const llvm::BasicBlock& block : f)
      for (const llvm::Instruction& i : block)
        if (const auto* call = llvm::dyn_cast<llvm::CallBase>(&i))
          if (const llvm::Function* callee = call->getCalledFunction();
              callee != nullptr && !callee->isDeclaration())
            callees.push_back(callee);
    return callees;
  };
  for (const llvm::Function& root : module) {
    if (root.isDeclaration() || marks[&root] != Mark::unseen) continue;
    std::vector<Frame> stack;
    marks[&root] = Mark::open;
    stack.push_back({&root, callees_of(root)});
    while (!stack.empty()) {
      Frame& top = stack.back();
      if (top.next == top.callees.size()) {
        marks[top.function] = Mark::done;
        stack.pop_back();
        continue;
      }
      const llvm::Function* callee = top.callees[top.next++];
      Mark& mark = marks[callee];
      if (mark == Mark::open) return callee->getName().str();
      if (mark == Mark::done) continue;
      mark = Mark::open;
      stack.push_back({callee, callees_of(*callee)});
    }
  }
  return {};
}

// Each local variable of a size known before it runs becomes a global of
// its own: the data stack is not in the window, the globals are, and no
// function runs twice at once (recursive_function; one thread runs a
// window's code). The window's writable data is set back to how the code
// was loaded whenever the caller changes (window_tier.hpp), so what one
// peer's invocation left in a frame no other peer reads; the same peer's
// next invocation may, as it may read its own globals. A local of a size
// known only at run time stays, and the shape refuses it; so does code
// whose locals come to more than kMaxFrameBytes in all (the checked tier's
// default data stack, ConfinementOptions::stack_bytes: locals bigger than
// that are none the checked tier would run, and as globals they would be
// wiped whole at every change of caller).
constexpr uint64_t kMaxFrameBytes = uint64_t{1} << 20;
void frames_to_globals(llvm::Module& module, const std::string& ifunc) {
  std::vector<llvm::AllocaInst*> locals;
  for (llvm::Function& f : module)
    for (llvm::BasicBlock& block : f)
      for (llvm::Instruction& i : block)
        if (auto* local = llvm::dyn_cast<llvm::AllocaInst>(&i);
            local != nullptr && local->isStaticAlloca() && local->getAddressSpace() == 0)
          locals.push_back(local);
  uint64_t total = 0;
  for (llvm::AllocaInst* local : locals) {
    const std::optional<llvm::TypeSize> size = local->getAllocationSize(module.getDataLayout());
    if (!size || size->isScalable()) continue;
    total += size->getFixedValue() + local->getAlign().value();
    if (size->getFixedValue() > kMaxFrameBytes || total > kMaxFrameBytes)
      refuse_shape(ifunc, "local variables of more than 1 MiB in all");
    auto* const type = llvm::ArrayType::get(llvm::Type::getInt8Ty(module.getContext()),
                                            std::max<uint64_t>(size->getFixedValue(), 1));
    auto* const frame =
        new llvm::GlobalVariable(module, type, false, llvm::GlobalValue::InternalLinkage,
                                 llvm::ConstantAggregateZero::get(type),
                                 local->getFunction()->getName() + ".frame." + local->getName());
    frame->setAlignment(local->getAlign());
    // Lifetime markers are for stack slots; a global has none.
    std::vector<llvm::Instruction*> markers;
    for (llvm::User* user : local->users())
      if (auto* marker = llvm::dyn_cast<llvm::LifetimeIntrinsic>(user)) markers.push_back(marker);
    for (llvm::Instruction* marker : markers) marker->eraseFromParent();
    local->replaceAllUsesWith(frame);
    local->eraseFromParent();
  }
}

// Copies for memcpy and memmove in 8-byte words (the tail a byte at a
// time), not LLVM's default of one byte an iteration.
class WordCopies final : public llvm::TargetTransformInfoImplBase {
 public:
  explicit WordCopies(const llvm::DataLayout& layout) : TargetTransformInfoImplBase(layout) {}
  llvm::Type* getMemcpyLoopLoweringType(llvm::LLVMContext& context, llvm::Value* /*length*/,
                                        unsigned /*source_space*/, unsigned /*dest_space*/,
                                        llvm::Align /*source_align*/, llvm::Align /*dest_align*/,
                                        std::optional<uint32_t> atomic) const override {
    return llvm::Type::getIntNTy(context, atomic ? *atomic * 8 : 64);
  }
  void getMemcpyLoopResidualLoweringType(llvm::SmallVectorImpl<llvm::Type*>& out,
                                         llvm::LLVMContext& context, unsigned remaining,
                                         unsigned /*source_space*/, unsigned /*dest_space*/,
                                         llvm::Align /*source_align*/, llvm::Align /*dest_align*/,
                                         std::optional<uint32_t> atomic) const override {
    const unsigned step = atomic.value_or(1);
    for (unsigned done = 0; done < remaining; done += step)
      out.push_back(llvm::Type::getIntNTy(context, step * 8));
  }
};

// memset as a loop of 8-byte stores of the byte repeated, then single
// bytes: loads and stores the shape then masks like any other.
void expand_memset(llvm::MemSetInst& memset) {
  llvm::LLVMContext& context = memset.getContext();
  llvm::Type* const i8 = llvm::Type::getInt8Ty(context);
  llvm::Type* const i64 = llvm::Type::getInt64Ty(context);
  llvm::BasicBlock* const before = memset.getParent();
  llvm::BasicBlock* const after = llvm::SplitBlock(before, &memset);
  llvm::Function* const f = before->getParent();
  auto* const words = llvm::BasicBlock::Create(context, "memset.words", f, after);
  auto* const check = llvm::BasicBlock::Create(context, "memset.tail.check", f, after);
  auto* const bytes = llvm::BasicBlock::Create(context, "memset.bytes", f, after);
  const bool is_volatile = memset.isVolatile();

  llvm::IRBuilder<> b(before->getTerminator());
  llvm::Value* const destination = memset.getRawDest();
  llvm::Value* const length = b.CreateZExtOrTrunc(memset.getLength(), i64);
  llvm::Value* const value = memset.getValue();
  llvm::Value* const word =
      b.CreateMul(b.CreateZExt(value, i64), llvm::ConstantInt::get(i64, 0x0101010101010101ULL));
  llvm::Value* const whole = b.CreateAnd(length, llvm::ConstantInt::get(i64, ~uint64_t{7}));
  b.CreateCondBr(b.CreateICmpEQ(whole, llvm::ConstantInt::get(i64, 0)), check, words);
  before->getTerminator()->eraseFromParent();

  b.SetInsertPoint(words);
  llvm::PHINode* const at = b.CreatePHI(i64, 2);
  at->addIncoming(llvm::ConstantInt::get(i64, 0), before);
  b.CreateAlignedStore(word, b.CreateGEP(i8, destination, at), llvm::Align(1), is_volatile);
  llvm::Value* const next = b.CreateAdd(at, llvm::ConstantInt::get(i64, 8));
  at->addIncoming(next, words);
  b.CreateCondBr(b.CreateICmpULT(next, whole), words, check);

  b.SetInsertPoint(check);
  b.CreateCondBr(b.CreateICmpULT(whole, length), bytes, after);

  b.SetInsertPoint(bytes);
  llvm::PHINode* const tail = b.CreatePHI(i64, 2);
  tail->addIncoming(whole, check);
  b.CreateAlignedStore(value, b.CreateGEP(i8, destination, tail), llvm::Align(1), is_volatile);
  llvm::Value* const next_byte = b.CreateAdd(tail, llvm::ConstantInt::get(i64, 1));
  tail->addIncoming(next_byte, bytes);
  b.CreateCondBr(b.CreateICmpULT(next_byte, length), bytes, after);
  memset.eraseFromParent();
}

// A copy, move or fill of a length known before it runs, up to
// kStraightBytes, as straight-line loads and stores at constant offsets:
// no loop, so no count the code generator could fold a mask into (a loop
// of a known count over a global came out as `%gs:(%base,%count)` and
// `incq` of the masked address, which the verifier refuses). A move loads
// every piece before it stores one, so overlap is no matter.
constexpr uint64_t kStraightBytes = 256;
void expand_straight(llvm::MemIntrinsic& call, uint64_t length) {
  llvm::IRBuilder<> b(&call);
  llvm::LLVMContext& context = call.getContext();
  llvm::Type* const i8 = llvm::Type::getInt8Ty(context);
  const bool is_volatile = call.isVolatile();
  llvm::Value* const destination = call.getRawDest();
  // The pieces: 8 bytes while they fit, then 4, 2, 1.
  std::vector<std::pair<uint64_t, unsigned>> pieces;
  for (uint64_t at = 0; at < length;) {
    unsigned bytes = 8;
    while (bytes > length - at) bytes /= 2;
    pieces.emplace_back(at, bytes);
    at += bytes;
  }
  const auto piece_type = [&](unsigned bytes) { return llvm::Type::getIntNTy(context, bytes * 8); };
  const auto at_offset = [&](llvm::Value* base, uint64_t offset) {
    return b.CreateConstGEP1_64(i8, base, offset);
  };
  if (auto* set = llvm::dyn_cast<llvm::MemSetInst>(&call)) {
    llvm::Value* const value = b.CreateFreeze(set->getValue());
    for (const auto& [offset, bytes] : pieces) {
      llvm::Type* const type = piece_type(bytes);
      llvm::Value* const repeated = b.CreateMul(
          b.CreateZExt(value, type),
          llvm::ConstantInt::get(type, 0x0101010101010101ULL & (~uint64_t{0} >> (64 - 8 * bytes))));
      b.CreateAlignedStore(repeated, at_offset(destination, offset), llvm::Align(1), is_volatile);
    }
    return;
  }
  auto& transfer = llvm::cast<llvm::MemTransferInst>(call);
  llvm::Value* const source = transfer.getRawSource();
  std::vector<llvm::Value*> values;
  for (const auto& [offset, bytes] : pieces)
    values.push_back(b.CreateAlignedLoad(piece_type(bytes), at_offset(source, offset),
                                         llvm::Align(1), is_volatile));
  for (std::size_t k = 0; k < pieces.size(); ++k)
    b.CreateAlignedStore(values[k], at_offset(destination, pieces[k].first), llvm::Align(1),
                         is_volatile);
}

// memcpy, memmove and memset as plain loads and stores, which the shape
// masks: as calls, the code generator would make them library calls on
// unmasked addresses (the window links against nothing) or inline copies
// the shape never sees. Short ones of a known length are straight-line
// code (expand_straight); the rest loops over a length the code generator
// cannot see through. False if one could not be expanded.
bool expand_memory_intrinsics(llvm::Module& module) {
  const llvm::TargetTransformInfo words(std::make_unique<WordCopies>(module.getDataLayout()));
  std::vector<llvm::MemIntrinsic*> calls;
  for (llvm::Function& f : module)
    for (llvm::BasicBlock& block : f)
      for (llvm::Instruction& i : block)
        if (auto* call = llvm::dyn_cast<llvm::MemIntrinsic>(&i)) calls.push_back(call);
  for (llvm::MemIntrinsic* call : calls) {
    if (!llvm::isa<llvm::MemSetInst>(call) && !llvm::isa<llvm::MemTransferInst>(call)) return false;
    if (const auto* known = llvm::dyn_cast<llvm::ConstantInt>(call->getLength());
        known != nullptr && known->getZExtValue() <= kStraightBytes) {
      expand_straight(*call, known->getZExtValue());
      call->eraseFromParent();
      continue;
    }
    {
      llvm::IRBuilder<> b(call);
      if (llvm::isa<llvm::ConstantInt>(call->getLength())) {
        // A long one of a known length: the length read back from a
        // global of its own, so that no loop has a count the code
        // generator knows.
        // Read-only: a non-zero byte in the writable data would make it a
        // segment kept whole as a copy (window_tier.hpp).
        auto* const held = new llvm::GlobalVariable(
            module, call->getLength()->getType(), true, llvm::GlobalValue::InternalLinkage,
            llvm::cast<llvm::Constant>(call->getLength()), "window.length");
        call->setLength(b.CreateLoad(held->getValueType(), held, /*isVolatile=*/true));
      } else {
        // As a loop, a poison length would be a branch on poison, which the
        // code generator may take as license for anything, the masks
        // included (confine_stress's "memset of poison length"). Frozen, it
        // is some length, and the loop runs that many times.
        call->setLength(b.CreateFreeze(call->getLength()));
      }
      if (auto* set = llvm::dyn_cast<llvm::MemSetInst>(call))
        set->setValue(b.CreateFreeze(set->getValue()));
    }
    if (auto* copy = llvm::dyn_cast<llvm::MemCpyInst>(call)) {
      llvm::expandMemCpyAsLoop(copy, words);
      copy->eraseFromParent();
    } else if (auto* move = llvm::dyn_cast<llvm::MemMoveInst>(call)) {
      if (!llvm::expandMemMoveAsLoop(move, words)) return false;
      move->eraseFromParent();
    } else if (auto* set = llvm::dyn_cast<llvm::MemSetInst>(call)) {
      expand_memset(*set);
    }
  }
  return true;
}

}  // namespace

void shape_for_window(llvm::Module& module, const std::string& ifunc) {
  if (const std::string what = unshaped_module(module); !what.empty()) refuse_shape(ifunc, what);
  if (const std::string name = recursive_function(module); !name.empty())
    refuse_shape(ifunc, "recursion (" + name + " can call itself; the stack would have no bound)");
  frames_to_globals(module, ifunc);
  if (!expand_memory_intrinsics(module))
    refuse_shape(ifunc, "a memory intrinsic it cannot expand into loads and stores");
  llvm::LLVMContext& context = module.getContext();
  const llvm::DataLayout& layout = module.getDataLayout();
  llvm::Type* const i64 = llvm::Type::getInt64Ty(context);
  llvm::PointerType* const gs = llvm::PointerType::get(context, kGsAddressSpace);
  // A module without a triple is compiled for this process's target.
  const llvm::Triple target = module.getTargetTriple().str().empty()
                                  ? llvm::Triple(llvm::sys::getProcessTriple())
                                  : module.getTargetTriple();
  const bool aarch64 = target.isAArch64();
  if (!aarch64 && !target.isX86()) refuse_shape(ifunc, "no window shape for " + target.str());
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
    // The code generator's half of the shape (window_mask_folding.hpp)
    // works on these functions only.
    f.addFnAttr(confined::kWindowShapedAttribute);
    for (llvm::BasicBlock& block : f)
      for (llvm::Instruction& i : block)
        if (auto* call = llvm::dyn_cast<llvm::CallBase>(&i))
          confine_pass::Confiner::drop_string_attributes(*call);
  }
  // aarch64: each function reads x21 once, at its entry.
  std::unordered_map<llvm::Function*, llvm::Value*> bases;
  const auto window_base = [&](llvm::Function& f) {
    auto [it, fresh] = bases.try_emplace(&f, nullptr);
    if (fresh) {
      llvm::IRBuilder<> b(&*f.getEntryBlock().getFirstInsertionPt());
      llvm::MDNode* x21 = llvm::MDNode::get(context, llvm::MDString::get(context, "x21"));
      llvm::Value* base = b.CreateIntrinsic(llvm::Intrinsic::read_register, {i64},
                                            {llvm::MetadataAsValue::get(context, x21)});
      it->second = b.CreateIntToPtr(base, llvm::PointerType::get(context, 0), "window.base");
    }
    return it->second;
  };
  // aarch64: x21 + the low 32 bits of `pointer`, computed once per pointer
  // and function, where the pointer is defined (the code generator would
  // otherwise keep one copy per access: a dead induction variable in
  // saxpy's loop, threechains-bench-aarch64-shape).
  std::unordered_map<llvm::Value*, llvm::Value*> addresses;
  const auto window_address = [&](llvm::Function& f, llvm::Value* pointer) {
    llvm::Value* base = window_base(f);
    auto [it, fresh] = addresses.try_emplace(pointer, nullptr);
    if (!fresh && llvm::cast<llvm::Instruction>(it->second)->getFunction() == &f) return it->second;
    // Where every use of `pointer` sees it: after its definition (after a
    // block's phis for a phi), or after the base for an argument or a
    // constant. Terminators that define values (invoke, callbr) are
    // refused above.
    llvm::Instruction* after = llvm::cast<llvm::Instruction>(base)->getNextNode();
    if (auto* defined = llvm::dyn_cast<llvm::Instruction>(pointer))
      after = llvm::isa<llvm::PHINode>(defined) ? &*defined->getParent()->getFirstNonPHIIt()
                                                : defined->getNextNode();
    llvm::IRBuilder<> b(after);
    llvm::Value* offset = b.CreateAnd(b.CreatePtrToInt(pointer, i64),
                                      llvm::ConstantInt::get(i64, 0xffffffffULL), "window.offset");
    it->second = b.CreateGEP(b.getInt8Ty(), base, offset, "window.address");
    return it->second;
  };
  // aarch64: p[i], an access as wide as the element it indexes (or of
  // bytes), as x21 + low32(p) + sext(low32(i)) * size: the code generator
  // keeps the masked base out of the loop and makes the access one
  // instruction, `[xB, wI, sxtw #3]` (a pointer chase was two). The guards
  // take what that reaches (Window::kAarch64Guard). The same address as
  // masking p + i * size for every p in the window and i within 2^31
  // elements whose element lies in it; no other.
  const auto indexed_address = [&](llvm::Instruction& access, llvm::Value* pointer,
                                   llvm::IRBuilder<>& b) -> llvm::Value* {
    auto* gep = llvm::dyn_cast<llvm::GetElementPtrInst>(pointer);
    if (gep == nullptr || gep->getNumIndices() != 1) return nullptr;
    llvm::Value* index = gep->getOperand(1);
    llvm::Type* element = gep->getSourceElementType();
    if (!index->getType()->isIntegerTy() || !element->isSized()) return nullptr;
    const llvm::TypeSize size = layout.getTypeAllocSize(element);
    if (size.isScalable()) return nullptr;
    const uint64_t scale = size.getFixedValue();
    if (scale > 8 || (scale != 1 && scale != width_of(access, layout).first)) return nullptr;
    // Frozen: with only its low 32 bits used, the code generator would
    // narrow a loaded index to a 32-bit load and scale it apart (ldrsw,
    // lsl: a chase's step three instructions, not one).
    llvm::Value* narrow =
        b.CreateSExtOrTrunc(b.CreateFreeze(index), b.getInt32Ty(), "window.index");
    return b.CreateGEP(element, window_address(*access.getFunction(), gep->getPointerOperand()),
                       b.CreateSExt(narrow, i64), "window.indexed");
  };
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
    llvm::Value* pointer = access->getOperand(operand);
    if (!aarch64) {
      llvm::Value* offset =
          b.CreateAnd(b.CreatePtrToInt(pointer, i64), llvm::ConstantInt::get(i64, 0xffffffffULL),
                      "window.offset");
      access->setOperand(operand, b.CreateIntToPtr(offset, gs, "window.address"));
      continue;
    }
    // aarch64: a constant displacement from the pointer stays outside the
    // mask (x21 + low 32 bits of p + 16, not of p + 16), so the code
    // generator folds it into the access's immediate and pairs neighbours
    // into ldp/stp from one masked base; the guard beyond the window takes
    // any displacement this small. The same address for every pointer
    // into the window that stays there.
    llvm::APInt displacement(64, 0);
    llvm::Value* stripped = pointer->stripAndAccumulateConstantOffsets(layout, displacement, true);
    if (displacement.abs().ugt(kMaxFoldedDisplacement)) {
      stripped = pointer;
      displacement = 0;
    }
    llvm::Value* address = indexed_address(*access, stripped, b);
    if (address == nullptr) address = window_address(*access->getFunction(), stripped);
    if (!displacement.isZero())
      address = b.CreateGEP(b.getInt8Ty(), address, b.getInt(displacement), "window.displaced");
    access->setOperand(operand, address);
    // The pointer the displacement was stripped from may have no use
    // left; dead, it would still count as a user of the loop's induction
    // variable when the code generator strength-reduces it, which then
    // keeps one more register stepping (saxpy, threechains-bench-aarch64-shape).
    // What it is computed from is used by the new address, so only the
    // chain between them goes.
    llvm::RecursivelyDeleteTriviallyDeadInstructions(pointer);
  }
}

}  // namespace threechains
