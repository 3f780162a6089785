// The confinement pass: the rewrite itself. Each function's accesses, locals
// and calls instrumented; indirect calls limited to the address-taken
// functions of their type; the tables the runtime reads; symbols hidden.
#include "confine/confiner.hpp"

namespace threechains::confine_pass {

void Confiner::run() {
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

FunctionType* Confiner::entry_type() {
  return FunctionType::get(Type::getVoidTy(ctx_), {ptr_, i64_, ptr_}, false);
}

void Confiner::instrument(Function& f) {
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
        SplitBlockAndInsertIfThen(b.CreateICmpSLT(left, b.getInt64(0)), call->getIterator(), false,
                                  MDBuilder(ctx_).createUnlikelyBranchWeights());
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

void Confiner::note_address_taken() {
  for (Function& f : m_) {
    const bool runtime = f.getName().starts_with(confined::kReservedPrefix) &&
                         !f.getName().starts_with(confined::kImportPrefix);
    if (f.isIntrinsic() || runtime) continue;
    if (f.hasAddressTaken()) address_taken_.push_back(&f);
  }
}

Function* Confiner::callee_check(FunctionType* type, CallingConv::ID cc) {
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

void Confiner::emit_globals_table() {
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

void Confiner::emit_sites() {
  auto* type = ArrayType::get(site_type(), site_count_);
  auto* sites = new GlobalVariable(m_, type, false, GlobalValue::ExternalLinkage,
                                   ConstantAggregateZero::get(type), confined::kSitesSymbol);
  sites_placeholder_->replaceAllUsesWith(sites);
  sites_placeholder_->eraseFromParent();
  // The count, for the runtime that clears them.
  new GlobalVariable(m_, i64_, true, GlobalValue::ExternalLinkage,
                     ConstantInt::get(i64_, site_count_), confined::kSiteCountSymbol);
}

void Confiner::lower_large_bulk() {
  if (large_bulk_.empty()) return;
  const FunctionCallee move = m_.getOrInsertFunction(
      std::string(confined::kImportPrefix) + "memmove", ptr_, ptr_, ptr_, i64_);
  const FunctionCallee fill = m_.getOrInsertFunction(
      std::string(confined::kImportPrefix) + "memset", ptr_, ptr_, Type::getInt32Ty(ctx_), i64_);
  for (Instruction* call : large_bulk_) {
    auto* intrinsic = cast<IntrinsicInst>(call);
    IRBuilder<> b(intrinsic);
    Value* length = b.CreateZExtOrTrunc(intrinsic->getArgOperand(2), i64_);
    const Intrinsic::ID id = intrinsic->getIntrinsicID();
    if (id == Intrinsic::memset || id == Intrinsic::memset_inline) {
      b.CreateCall(fill,
                   {intrinsic->getArgOperand(0),
                    b.CreateZExt(intrinsic->getArgOperand(1), Type::getInt32Ty(ctx_)), length});
    } else {
      b.CreateCall(move, {intrinsic->getArgOperand(0), intrinsic->getArgOperand(1), length});
    }
    intrinsic->eraseFromParent();
  }
  large_bulk_.clear();
}

void Confiner::hide_symbols() {
  const std::string entry = ifunc_ + "_main";
  for (GlobalValue& value : m_.global_values()) {
    if (value.isDeclaration() || value.getName() == entry ||
        value.getName() == confined::kGlobalsSymbol || value.getName() == confined::kSitesSymbol ||
        value.getName() == confined::kSiteCountSymbol || value.getName().starts_with("llvm."))
      continue;
    if (!value.hasLocalLinkage()) value.setLinkage(GlobalValue::InternalLinkage);
    value.setVisibility(GlobalValue::DefaultVisibility);
    if (value.hasName() && !value.getName().starts_with(confined::kReservedPrefix))
      value.setName("confined." + value.getName());
  }
}

}  // namespace threechains::confine_pass
