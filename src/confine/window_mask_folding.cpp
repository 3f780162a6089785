// See window_mask_folding.hpp. LLVM installs no x86 back-end headers, so
// instructions and registers are found by their names in the target's
// tables, once per pass (one pass per code generator).
#include "confine/window_mask_folding.hpp"

#include <llvm/CodeGen/MachineFunctionPass.h>
#include <llvm/CodeGen/MachineInstr.h>
#include <llvm/CodeGen/Passes.h>
#include <llvm/CodeGen/TargetInstrInfo.h>
#include <llvm/CodeGen/TargetPassConfig.h>
#include <llvm/CodeGen/TargetRegisterInfo.h>
#include <llvm/CodeGen/TargetSubtargetInfo.h>
#include <llvm/IR/Function.h>
#include <llvm/MC/MCRegisterInfo.h>
#include <llvm/Target/RegisterTargetPassConfigCallback.h>
#include <llvm/Target/TargetMachine.h>

#include <optional>
#include <vector>

namespace threechains::confined {
namespace {

// The registers and opcodes the pass names, looked up in the function's
// target tables.
struct X86Names {
  unsigned lea64_32 = 0;  // leal with 64-bit address registers
  unsigned mov32 = 0;     // movl between registers
  llvm::MCRegister gs, rip;
  unsigned sub_32bit = 0;

  static std::optional<X86Names> of(const llvm::TargetInstrInfo& instructions,
                                    const llvm::TargetRegisterInfo& registers) {
    X86Names names;
    for (unsigned op = 0; op < instructions.getNumOpcodes(); ++op) {
      const llvm::StringRef name = instructions.getName(op);
      if (name == "LEA64_32r") names.lea64_32 = op;
      if (name == "MOV32rr") names.mov32 = op;
    }
    for (unsigned reg = 1; reg < registers.getNumRegs(); ++reg) {
      const llvm::StringRef name = registers.getName(reg);
      if (name == "GS") names.gs = reg;
      if (name == "RIP") names.rip = reg;
    }
    for (unsigned index = 1; index < registers.getNumSubRegIndices(); ++index)
      if (llvm::StringRef(registers.getSubRegIndexName(index)) == "sub_32bit")
        names.sub_32bit = index;
    if (names.lea64_32 == 0 || names.mov32 == 0 || !names.gs || !names.rip || names.sub_32bit == 0)
      return std::nullopt;
    return names;
  }
};

// The first of an instruction's five memory operands (base, scale, index,
// displacement, segment), or -1.
int memory_operand(const llvm::MachineInstr& instruction) {
  const auto operands = instruction.getDesc().operands();
  for (unsigned i = 0; i < operands.size(); ++i)
    if (operands[i].OperandType == llvm::MCOI::OPERAND_MEMORY)
      return i + 4 < operands.size() && i + 4 < instruction.getNumOperands() ? static_cast<int>(i)
                                                                             : -1;
  return -1;
}

// What a mask computes: (base + index * scale + displacement) mod 2^32, in
// 64-bit registers (no register: 0).
struct Mask {
  llvm::MCRegister destination;  // 64-bit
  llvm::MCRegister base, index;  // 64-bit, or none
  int64_t scale = 1;
  int64_t displacement = 0;
};

class Folder {
 public:
  Folder(const X86Names& names, const llvm::TargetRegisterInfo& registers)
      : names_(names), registers_(registers) {}

  bool fold(llvm::MachineBasicBlock& block) {
    bool changed = false;
    for (llvm::MachineInstr& instruction : llvm::make_early_inc_range(block))
      if (const std::optional<Mask> mask = mask_of(instruction))
        changed |= fold(instruction, *mask);
    return changed;
  }

 private:
  [[nodiscard]] llvm::MCRegister wide(llvm::MCRegister narrow) const {
    for (const llvm::MCPhysReg super : registers_.superregs(narrow))
      if (registers_.getSubReg(super, names_.sub_32bit) == narrow) return super;
    return {};
  }
  [[nodiscard]] llvm::MCRegister narrow(llvm::MCRegister wide) const {
    return wide ? registers_.getSubReg(wide, names_.sub_32bit) : llvm::MCRegister();
  }
  [[nodiscard]] bool overlaps(llvm::Register a, llvm::MCRegister b) const {
    return a.isPhysical() && b && registers_.regsOverlap(a, b);
  }

  // `leal disp(%base,%index,scale), %e..` or `movl %e.., %e..`.
  std::optional<Mask> mask_of(const llvm::MachineInstr& instruction) const {
    Mask mask;
    const unsigned opcode = instruction.getOpcode();
    if (opcode == names_.mov32) {
      const llvm::MachineOperand& from = instruction.getOperand(1);
      if (!from.isReg() || !from.getReg().isPhysical()) return std::nullopt;
      mask.base = wide(from.getReg().asMCReg());
      if (!mask.base) return std::nullopt;
    } else if (opcode == names_.lea64_32) {
      const llvm::MachineOperand& base = instruction.getOperand(1);
      const llvm::MachineOperand& scale = instruction.getOperand(2);
      const llvm::MachineOperand& index = instruction.getOperand(3);
      const llvm::MachineOperand& displacement = instruction.getOperand(4);
      const llvm::MachineOperand& segment = instruction.getOperand(5);
      if (!base.isReg() || !scale.isImm() || !index.isReg() || !displacement.isImm() ||
          !segment.isReg() || segment.getReg())
        return std::nullopt;
      if (base.getReg() == names_.rip) return std::nullopt;
      mask.base = base.getReg().asMCReg();
      mask.index = index.getReg().asMCReg();
      mask.scale = scale.getImm();
      mask.displacement = displacement.getImm();
      if ((mask.base && !narrow(mask.base)) || (mask.index && !narrow(mask.index)))
        return std::nullopt;
      // With no register the emitter would see nothing 32-bit in the
      // address and write no prefix: the displacement sign-extended, not
      // taken modulo 2^32.
      if (!mask.base && !mask.index) return std::nullopt;
    } else {
      return std::nullopt;
    }
    const llvm::MachineOperand& to = instruction.getOperand(0);
    if (!to.isReg() || !to.isDef() || !to.getReg().isPhysical()) return std::nullopt;
    mask.destination = wide(to.getReg().asMCReg());
    if (!mask.destination) return std::nullopt;
    return mask;
  }

  // Whether `instruction` reads the mask's result only as the base of one
  // `%gs:(%reg)` access with nothing else in its address.
  [[nodiscard]] bool only_gs_base(const llvm::MachineInstr& instruction,
                                  llvm::MCRegister destination) const {
    const int memory = memory_operand(instruction);
    if (memory < 0) return false;
    const llvm::MachineOperand& base = instruction.getOperand(memory);
    const llvm::MachineOperand& scale = instruction.getOperand(memory + 1);
    const llvm::MachineOperand& index = instruction.getOperand(memory + 2);
    const llvm::MachineOperand& displacement = instruction.getOperand(memory + 3);
    const llvm::MachineOperand& segment = instruction.getOperand(memory + 4);
    if (!base.isReg() || base.getReg() != destination || !scale.isImm() || scale.getImm() != 1 ||
        !index.isReg() || index.getReg() || !displacement.isImm() || displacement.getImm() != 0 ||
        !segment.isReg() || segment.getReg() != names_.gs)
      return false;
    for (unsigned i = 0; i < instruction.getNumOperands(); ++i) {
      const llvm::MachineOperand& operand = instruction.getOperand(i);
      if (static_cast<int>(i) != memory && operand.isReg() && operand.isUse() &&
          overlaps(operand.getReg(), destination))
        return false;
    }
    return true;
  }

  // Whether `instruction` leaves none of the mask's result behind: it writes
  // the whole register (a 32-bit write clears the upper half) or a call
  // clobbers it.
  [[nodiscard]] bool replaces(const llvm::MachineInstr& instruction,
                              llvm::MCRegister destination) const {
    for (const llvm::MachineOperand& operand : instruction.operands()) {
      if (operand.isRegMask() && operand.clobbersPhysReg(destination)) return true;
      if (operand.isReg() && operand.isDef() &&
          (operand.getReg() == destination || operand.getReg() == narrow(destination)))
        return true;
    }
    return false;
  }

  [[nodiscard]] bool live_out(const llvm::MachineBasicBlock& block,
                              llvm::MCRegister destination) const {
    for (const llvm::MachineBasicBlock* successor : block.successors())
      for (llvm::MCRegAliasIterator alias(destination, &registers_, true); alias.isValid(); ++alias)
        if (successor->isLiveIn(*alias)) return true;
    return false;
  }

  bool fold(llvm::MachineInstr& mask_instruction, const Mask& mask) {
    std::vector<llvm::MachineInstr*> uses;
    std::vector<llvm::MachineInstr*> debug_uses;  // may name the result
    bool moved = false;  // base or index written since the mask
    bool ends_in_block = false;
    llvm::MachineBasicBlock& block = *mask_instruction.getParent();
    for (auto it = std::next(mask_instruction.getIterator()); it != block.end(); ++it) {
      llvm::MachineInstr& next = *it;
      if (next.isDebugInstr()) {
        debug_uses.push_back(&next);
        continue;
      }
      if (next.readsRegister(mask.destination, &registers_)) {
        if (moved || !only_gs_base(next, mask.destination)) return false;
        uses.push_back(&next);
      }
      if ((mask.base && next.modifiesRegister(mask.base, &registers_)) ||
          (mask.index && next.modifiesRegister(mask.index, &registers_)))
        moved = true;
      if (next.modifiesRegister(mask.destination, &registers_)) {
        if (!replaces(next, mask.destination)) return false;
        ends_in_block = true;
        break;
      }
    }
    if (uses.empty() || (!ends_in_block && live_out(block, mask.destination))) return false;
    // Each read of base or index between the mask and its last use may
    // have been their last (a kill); they are read later now.
    for (auto it = std::next(mask_instruction.getIterator()); &*it != uses.back(); ++it)
      for (llvm::MachineOperand& operand : it->operands())
        if (operand.isReg() && operand.isUse() &&
            (overlaps(operand.getReg(), mask.base) || overlaps(operand.getReg(), mask.index)))
          operand.setIsKill(false);
    for (llvm::MachineInstr* use : uses) {
      const int memory = memory_operand(*use);
      use->getOperand(memory).setReg(narrow(mask.base));
      use->getOperand(memory).setIsKill(false);
      use->getOperand(memory + 1).setImm(mask.scale);
      use->getOperand(memory + 2).setReg(narrow(mask.index));
      use->getOperand(memory + 2).setIsKill(false);
      use->getOperand(memory + 3).setImm(mask.displacement);
    }
    // A debugger asking for the mask's result would find something else.
    for (llvm::MachineInstr* debug : debug_uses)
      if (debug->readsRegister(mask.destination, &registers_)) debug->setDebugValueUndef();
    mask_instruction.eraseFromParent();
    return true;
  }

  const X86Names& names_;
  const llvm::TargetRegisterInfo& registers_;
};

class WindowMaskFolding final : public llvm::MachineFunctionPass {
 public:
  static char ID;
  WindowMaskFolding() : llvm::MachineFunctionPass(ID) {}

  [[nodiscard]] llvm::StringRef getPassName() const override {
    return "ThreeChains window mask folding";
  }

  void getAnalysisUsage(llvm::AnalysisUsage& usage) const override {
    usage.setPreservesCFG();
    llvm::MachineFunctionPass::getAnalysisUsage(usage);
  }

  bool runOnMachineFunction(llvm::MachineFunction& function) override {
    if (!function.getFunction().hasFnAttribute(kWindowShapedAttribute)) return false;
    // After register allocation only: the pass reasons about physical
    // registers and their liveness between blocks.
    const auto& properties = function.getProperties();
    if (!properties.hasProperty(llvm::MachineFunctionProperties::Property::NoVRegs) ||
        !properties.hasProperty(llvm::MachineFunctionProperties::Property::TracksLiveness))
      return false;
    const llvm::TargetSubtargetInfo& target = function.getSubtarget();
    if (!names_) names_ = X86Names::of(*target.getInstrInfo(), *target.getRegisterInfo());
    if (!names_) return false;
    Folder folder(*names_, *target.getRegisterInfo());
    bool changed = false;
    for (llvm::MachineBasicBlock& block : function) changed |= folder.fold(block);
    return changed;
  }

 private:
  std::optional<X86Names> names_;
};

char WindowMaskFolding::ID = 0;

}  // namespace

void fold_window_masks_into_accesses() {
  // Kept for the process's life: LLVM's list holds a pointer to it.
  static llvm::RegisterTargetPassConfigCallback registration(
      [](llvm::TargetMachine& machine, llvm::PassManagerBase&, llvm::TargetPassConfig* config) {
        // Without optimisation there is no block placement to follow, and
        // the pass would never be added (nor freed).
        if (config == nullptr || machine.getTargetTriple().getArch() != llvm::Triple::x86_64 ||
            config->getOptLevel() == llvm::CodeGenOptLevel::None)
          return;
        // After block placement, the last pass that moves instructions
        // between blocks, and before the pre-emission passes, which turn
        // some `leal`s into adds and shifts.
        config->insertPass(&llvm::MachineBlockPlacementID, new WindowMaskFolding());
      });
}

}  // namespace threechains::confined
