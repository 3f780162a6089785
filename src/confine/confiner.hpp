// The confinement pass's rewriter, shared by the files that implement it:
//   pass.cpp           the two entry points and the rules the pass enforces;
//   screen.cpp         what is refused or dropped before the optimiser and before
//                      the checks go in (types, intrinsics, conventions, claims);
//   memory_checks.cpp  one check per load, store and memory intrinsic;
//   fuel.cpp           fuel at function entries and loop headers, the data stack;
//   instrument.cpp     the per-function rewrite, indirect calls, the tables the
//                      runtime reads, hidden symbols.
// Private to src/confine/.
#pragma once

#include "confine/runtime.hpp"

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
// Hidden: the pass's own, never part of the library's ABI.
#pragma GCC visibility push(hidden)
namespace confine_pass {

using namespace llvm;

// Throws errc::import_refused: `ifunc` cannot run confined, because of `what`.
[[noreturn]] void refuse(const std::string& ifunc, const std::string& what);

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

  void run();

  // Before the optimiser: what could crash the optimiser or the code
  // generator, or let the code choose how it is compiled, is refused or
  // removed here, so no pass ever sees it.
  void screen_before_optimiser();

  // Intrinsics confined code may call, by name: those the pass checks or
  // removes, and generic ones that compute on registers and cannot fault
  // (an allowlist: memory effects are not enough, llvm.returnaddress(3)
  // loads through the frame chain and llvm.sdiv.fix divides by zero).
  // Target intrinsics are refused: they can need features this host lacks.
  // The window shape (window_shape.cpp) takes the same list.
  static bool intrinsic_allowed(Intrinsic::ID id);

  // After the optimiser: C, or fastcc, which it gives internal functions
  // whose every call it sees (caller and callee change together).
  static bool c_or_fast(CallingConv::ID cc);

  // A direct call must agree with its callee on type and convention: where
  // they differ, the callee reads arguments that were never passed (the
  // thread's stack) or writes a returned aggregate through a pointer the
  // caller never meant for it. (Calls through pointers are checked at run time.)
  static bool agrees_with_callee(const CallBase& call);

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
  // (The three above: the window shape holds code to them too.)

 private:
  static constexpr uint64_t kMaxFrame = uint64_t{1} << 30;
  static constexpr uint64_t kMaxByValue = 4096;

  FunctionType* entry_type();

  bool small_by_value(Type* t) const;

  // One value for a check and for the use it guards. `freeze` gives that,
  // except of a constant undef or poison: the code generator materialises
  // those anew in each block, so the check and the access could each see a
  // different value. Those become zero.
  static bool has_undef(const Constant* c);
  static Value* freeze(IRBuilder<>& b, Value* v);

  static bool frame_depth_zero(const CallBase& call);

  // A first line against types the code generator lowers slowly or not at
  // all: integers millions of bits wide end the process in LLVM (`LLVM
  // ERROR: unsupported library call` for a saturating conversion, a crash
  // for ctpop) or compile for minutes (a multiplication), and so do vectors
  // of millions of lanes. No honest kernel needs them; C's widest integer is
  // __int128. Empty if `t` (and everything in it) is fine.
  static constexpr unsigned kMaxIntegerBits = 128;
  static constexpr unsigned kMaxVectorLanes = 256;
  static constexpr uint64_t kMaxVectorBits = 16384;
  static std::string too_wide(Type* t);
  // The same for a value an instruction computes or uses: in addition, no
  // aggregate (array or struct) over 4 KiB travels as one value (selection
  // lowers a load of [1000000 x i32] lane by lane, for as long as it takes).
  std::string too_wide_value(Type* t) const;

  static bool scalable(Type* t);

  // What cannot be confined is refused; imports are renamed to their
  // confined versions (checked wrappers, or pointer-free functions).
  void screen();

  void screen_block(Function& f, BasicBlock& block);

  // Claims the code generator would act on without checking them, all of
  // them the sender's to write: that memory is dereferenceable (a load may
  // then be hoisted above its check), aligned (an aligned vector move
  // faults), in a range (a jump table loses its bounds check), and
  // assumptions. Dropped before the checks go in; accesses become align 1
  // (as fast as aligned on the CPUs we target), atomics keep theirs and are
  // checked. (Operand bundles that carry such claims live on llvm.assume only.)
  void strip_claims(Function& f);

  // --- emitting checks ---

  // `if (condition) trap(reason, address)`, before `at`.
  void trap_if(Value* condition, TrapReason reason, Value* address, Instruction* at);

  // `[address, address + bytes)` lies in [begin, begin + size).
  Value* inside(IRBuilder<>& b, Value* address, Value* bytes, Value* begin, Value* size);

  // Bounds every function loads once, in its prologue.
  struct Bounds {
    Value* payload_begin;
    Value* payload_size;
    Value* stack_begin;
    Value* stack_size;
  };

  Value* field(IRBuilder<>& b, uint64_t offset, const char* name);
  void store_field(IRBuilder<>& b, uint64_t offset, Value* value);

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
                     const Bounds& bounds);

  void check_access(const Access& access, const Bounds& bounds);

  // Whether an access is visibly inside a local variable or a global of this
  // module (a constant offset from it, in bounds): no check needed.
  bool visibly_safe(Value* pointer, uint64_t bytes, bool write) const;

  uint64_t store_size(Type* type) const;

  // The accesses of one function, with what their checks need.
  void collect_access(Instruction& i, std::vector<Access>& accesses);

  void collect_call_access(CallBase& call, std::vector<Access>& accesses);

  // What a fuel point (the entry, a loop header) pays: the most
  // instructions any path from it runs before the next fuel point. Every
  // cycle passes a loop header (the target of a back edge), so such a path
  // follows forward edges only and runs each block at most once: the
  // longest path in that acyclic graph bounds it. A call counts as one; its
  // callee pays at its own entry, and imports charge by the work they do.
  // So one unit of fuel is at most one instruction's time, whatever the
  // code does between two looks at the clock (docs/security.md, "Time").
  static std::map<const BasicBlock*, uint64_t> costs_between_fuel_points(
      Function& f, const std::set<BasicBlock*>& loop_heads);

  // A block's instructions, and a call of an import (libm, the runtime) at
  // kImportCallCost: 3.2 us at 100 ns a unit, where the slowest libm call
  // measured (threechains-bench-libm-worst: tgamma of a negative argument)
  // takes about 100 ns. The checked imports also pay by their work.
  static constexpr uint64_t kImportCallCost = 32;
  static uint64_t block_cost(const BasicBlock& block);

  // Spends `cost` units of fuel before `at`; the runtime looks at the clock
  // when a chunk is used up (and traps past the budget).
  void spend_fuel(Instruction* at, uint64_t cost);

  // Whether `[address, ...)` from the data stack pointer may grow by `bytes`
  // with `align`: the new stack pointer, after trapping if it may not.
  Value* push_data_stack(IRBuilder<>& b, Value* bytes, uint64_t align, Instruction* at,
                         Value* stack_begin);

  void instrument(Function& f);

  void check_division(BinaryOperator& division);

  // The functions an indirect call may reach: the module's own and its
  // imports, where their address is taken (before the pass adds uses).
  void note_address_taken();

  // `bool callee_ok(ptr)` for calls of type `type`: whether an address is one
  // of the address-taken functions of exactly that type (a call of another
  // type would disagree with its callee about registers, stack and where a
  // returned aggregate goes).
  Function* callee_check(FunctionType* type, CallingConv::ID cc);

  // `__threechains_confined_globals`: where this module's globals are, for
  // the runtime's table (the inline checks know only the one at hand).
  void emit_globals_table();

  // `__threechains_confined_sites`: one cache per checked access.
  void emit_sites();

  // Memory intrinsics whose length may exceed kLargestUnpieced become calls
  // of the checked imports (the same bounds, checked again; done in pieces
  // with the clock looked at between them).
  void lower_large_bulk();

  // Only the entry point and the tables stay visible. Everything else is
  // internal and renamed, so no name of the ifunc's can stand in for a
  // symbol the code generator calls by name (memcpy, __udivti3, ...).
  void hide_symbols();

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

}  // namespace confine_pass
#pragma GCC visibility pop
}  // namespace threechains
