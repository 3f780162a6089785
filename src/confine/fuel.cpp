// The confinement pass: what an invocation may spend. Fuel at every function
// entry and loop header, priced by the longest path to the next fuel point;
// space on the runtime's data stack, checked as it grows.
#include "confine/confiner.hpp"

namespace threechains::confine_pass {

std::map<const BasicBlock*, uint64_t> Confiner::costs_between_fuel_points(
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

uint64_t Confiner::block_cost(const BasicBlock& block) {
  uint64_t cost = block.size();
  for (const Instruction& i : block) {
    const auto* call = dyn_cast<CallBase>(&i);
    const Function* callee = call == nullptr ? nullptr : call->getCalledFunction();
    if (callee != nullptr && callee->isDeclaration() && !callee->isIntrinsic())
      cost += kImportCallCost - 1;
  }
  return cost;
}

void Confiner::spend_fuel(Instruction* at, uint64_t cost) {
  IRBuilder<> b(at);
  Value* left = b.CreateSub(field(b, confined::kFuel, "fuel"), b.getInt64(cost));
  store_field(b, confined::kFuel, left);
  Instruction* then =
      SplitBlockAndInsertIfThen(b.CreateICmpSLT(left, b.getInt64(0)), at->getIterator(), false,
                                MDBuilder(ctx_).createUnlikelyBranchWeights());
  IRBuilder<>(then).CreateCall(tick_, {state_});
}

Value* Confiner::push_data_stack(IRBuilder<>& b, Value* bytes, uint64_t align, Instruction* at,
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

}  // namespace threechains::confine_pass
