// The confinement pass: a check before every memory access (inline against
// the payload, the data stack and the site's last region; the runtime's
// table search otherwise), and before every integer division.
#include "confine/confiner.hpp"

namespace threechains::confine_pass {

bool Confiner::has_undef(const Constant* c) {
  if (isa<UndefValue>(c)) return true;
  for (const Use& operand : c->operands())
    if (const auto* inner = dyn_cast<Constant>(operand.get()); inner != nullptr && has_undef(inner))
      return true;
  return false;
}

Value* Confiner::freeze(IRBuilder<>& b, Value* v) {
  if (auto* c = dyn_cast<Constant>(v)) {
    if (isa<GlobalValue>(c)) return c;
    return has_undef(c) ? Constant::getNullValue(c->getType()) : c;
  }
  return b.CreateFreeze(v);
}

void Confiner::trap_if(Value* condition, TrapReason reason, Value* address, Instruction* at) {
  Instruction* then = SplitBlockAndInsertIfThen(condition, at->getIterator(), true,
                                                MDBuilder(ctx_).createUnlikelyBranchWeights());
  IRBuilder<> b(then);
  CallInst* call =
      b.CreateCall(trap_, {state_, ConstantInt::get(i64_, static_cast<uint64_t>(reason)), address});
  call->setDoesNotReturn();
}

Value* Confiner::inside(IRBuilder<>& b, Value* address, Value* bytes, Value* begin, Value* size) {
  Value* offset = b.CreateSub(address, begin);
  return b.CreateAnd(b.CreateICmpULT(offset, size),
                     b.CreateICmpULE(bytes, b.CreateSub(size, offset)));
}

Value* Confiner::field(IRBuilder<>& b, uint64_t offset, const char* name) {
  return b.CreateLoad(i64_, b.CreateConstGEP1_64(b.getInt8Ty(), state_, offset), name);
}

void Confiner::store_field(IRBuilder<>& b, uint64_t offset, Value* value) {
  b.CreateStore(value, b.CreateConstGEP1_64(b.getInt8Ty(), state_, offset));
}

void Confiner::check_address(Value* address, Value* bytes, bool write, Value* base, Instruction* at,
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

void Confiner::check_access(const Access& access, const Bounds& bounds) {
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

bool Confiner::visibly_safe(Value* pointer, uint64_t bytes, bool write) const {
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

uint64_t Confiner::store_size(Type* type) const {
  const TypeSize size = dl_.getTypeStoreSize(type);
  if (size.isScalable()) refuse(ifunc_, "a scalable vector access");
  return size.getFixedValue();
}

void Confiner::collect_access(Instruction& i, std::vector<Access>& accesses) {
  auto add = [&](unsigned operand, uint64_t bytes, bool write, uint64_t atomic = 0) {
    if (atomic == 0 && visibly_safe(i.getOperand(operand), bytes, write)) return;
    accesses.push_back({&i, operand, ConstantInt::get(i64_, bytes), write, atomic, false, nullptr});
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

void Confiner::collect_call_access(CallBase& call, std::vector<Access>& accesses) {
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
      accesses.push_back({&call, 1, b.getInt64(store_size(call.getArgOperand(0)->getType())), true,
                          0, false, nullptr});
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

void Confiner::check_division(BinaryOperator& division) {
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

}  // namespace threechains::confine_pass
