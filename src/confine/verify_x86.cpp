// The window verifier for x86-64: see verify_x86.hpp for the rules and
// docs/security.md ("The verifier") for why each is enough. Written to be
// read by an auditor: every rule is one small function, and anything not
// explicitly allowed is refused.
#include "confine/verify_x86.hpp"

#include "confine/verifier_calls.hpp"

#include "confine/window.hpp"

#include <Zydis/Zydis.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <concepts>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace threechains::confined {
namespace {

using verifier_text::hex;
using verifier_text::Refusal;
using verifier_text::say;

struct Decoded {
  uint64_t address = 0;
  ZydisDecodedInstruction instruction{};
  std::array<ZydisDecodedOperand, ZYDIS_MAX_OPERAND_COUNT> operands{};

  [[nodiscard]] std::span<const ZydisDecodedOperand> all() const {
    return {operands.data(), instruction.operand_count};
  }
  [[nodiscard]] std::span<const ZydisDecodedOperand> explicit_operands() const {
    return {operands.data(), instruction.operand_count_visible};
  }
  [[nodiscard]] uint64_t next() const { return address + instruction.length; }
  [[nodiscard]] ZydisMnemonic mnemonic() const { return instruction.mnemonic; }
};

std::string text(const Decoded& decoded) {
  ZydisFormatter formatter;
  ZydisFormatterInit(&formatter, ZYDIS_FORMATTER_STYLE_ATT);
  std::array<char, 256> buffer{};
  if (!ZYAN_SUCCESS(
          ZydisFormatterFormatInstruction(&formatter, &decoded.instruction, decoded.operands.data(),
                                          decoded.instruction.operand_count_visible, buffer.data(),
                                          buffer.size(), decoded.address, nullptr)))
    return "(unprintable)";
  return buffer.data();
}

// ---- Which instructions may appear at all ---------------------------------

// Plain computation: integer and vector arithmetic, moves, atomics. Branch,
// call, stack and miscellaneous categories are allowed only for the
// mnemonics named in allowed_mnemonic below.
constexpr std::array kComputation = {
    ZYDIS_CATEGORY_ADOX_ADCX,   ZYDIS_CATEGORY_AES,        ZYDIS_CATEGORY_AVX,
    ZYDIS_CATEGORY_AVX2,        ZYDIS_CATEGORY_AVX512,     ZYDIS_CATEGORY_AVX512_BITALG,
    ZYDIS_CATEGORY_AVX512_VBMI, ZYDIS_CATEGORY_BINARY,     ZYDIS_CATEGORY_BITBYTE,
    ZYDIS_CATEGORY_BLEND,       ZYDIS_CATEGORY_BMI1,       ZYDIS_CATEGORY_BMI2,
    ZYDIS_CATEGORY_BROADCAST,   ZYDIS_CATEGORY_CMOV,       ZYDIS_CATEGORY_COMPRESS,
    ZYDIS_CATEGORY_CONFLICT,    ZYDIS_CATEGORY_CONVERT,    ZYDIS_CATEGORY_DATAXFER,
    ZYDIS_CATEGORY_EXPAND,      ZYDIS_CATEGORY_FMA4,       ZYDIS_CATEGORY_FP16,
    ZYDIS_CATEGORY_GFNI,        ZYDIS_CATEGORY_IFMA,       ZYDIS_CATEGORY_KMASK,
    ZYDIS_CATEGORY_LOGICAL,     ZYDIS_CATEGORY_LOGICAL_FP, ZYDIS_CATEGORY_LZCNT,
    ZYDIS_CATEGORY_PCLMULQDQ,   ZYDIS_CATEGORY_ROTATE,     ZYDIS_CATEGORY_SEMAPHORE,
    ZYDIS_CATEGORY_SETCC,       ZYDIS_CATEGORY_SHA,        ZYDIS_CATEGORY_SHIFT,
    ZYDIS_CATEGORY_SSE,         ZYDIS_CATEGORY_STTNI,      ZYDIS_CATEGORY_VAES,
    ZYDIS_CATEGORY_VBMI2,       ZYDIS_CATEGORY_VFMA,       ZYDIS_CATEGORY_VPCLMULQDQ,
    ZYDIS_CATEGORY_NOP,         ZYDIS_CATEGORY_WIDENOP,
};

// Instructions of allowed categories that change state the host inherits
// (MXCSR's exception masks and rounding), that read state others left
// (MXCSR's sticky status flags), or that are allowed only in the forms the
// rules below understand.
bool allowed_mnemonic(const Decoded& decoded) {
  const ZydisInstructionCategory category = decoded.instruction.meta.category;
  switch (decoded.mnemonic()) {
    case ZYDIS_MNEMONIC_LDMXCSR:
    case ZYDIS_MNEMONIC_VLDMXCSR:
    case ZYDIS_MNEMONIC_FXRSTOR:    // loads MXCSR and the x87 state, and Zydis lists
    case ZYDIS_MNEMONIC_FXRSTOR64:  // neither as an operand (helper-14's attack)
    case ZYDIS_MNEMONIC_FXSAVE:
    case ZYDIS_MNEMONIC_FXSAVE64:
      return false;  // unmasked FP exceptions would fault in the host later
    case ZYDIS_MNEMONIC_STMXCSR:
    case ZYDIS_MNEMONIC_VSTMXCSR:
      // The status flags are sticky: an inexact result or a division by
      // zero of the host's or of another peer's code, there to read (the
      // IR screen refuses the intrinsic; a compromised compiler need not).
      return false;
    case ZYDIS_MNEMONIC_LEA:
    case ZYDIS_MNEMONIC_UD2:  // the shape's trap
    case ZYDIS_MNEMONIC_PAUSE:
    case ZYDIS_MNEMONIC_ENDBR64:
    case ZYDIS_MNEMONIC_CLC:
    case ZYDIS_MNEMONIC_STC:
    case ZYDIS_MNEMONIC_CMC:
    case ZYDIS_MNEMONIC_LAHF:
    case ZYDIS_MNEMONIC_SAHF:
    case ZYDIS_MNEMONIC_PUSH:
    case ZYDIS_MNEMONIC_POP:
    case ZYDIS_MNEMONIC_CALL:
    case ZYDIS_MNEMONIC_RET:
    case ZYDIS_MNEMONIC_JMP:
      return true;
    case ZYDIS_MNEMONIC_MFENCE:
    case ZYDIS_MNEMONIC_LFENCE:
    case ZYDIS_MNEMONIC_SFENCE:
      return true;
    case ZYDIS_MNEMONIC_XBEGIN:
      return false;
    case ZYDIS_MNEMONIC_LOOP:
    case ZYDIS_MNEMONIC_LOOPE:
    case ZYDIS_MNEMONIC_LOOPNE:
      // With a 0x67 prefix they count in %ecx, and whether that write
      // clears %rcx's upper half is not written down for every CPU
      // (helper-28: it does on AMD); the dataflow would call %rcx clean.
      // No code generator emits them.
      return false;
    default:
      break;
  }
  if (category == ZYDIS_CATEGORY_COND_BR) return true;  // its target is checked as a branch
  return std::find(kComputation.begin(), kComputation.end(), category) != kComputation.end();
}

// Register classes no allowed instruction may name: x87 and MMX state (the
// host's floating point), segments, control, debug and descriptor tables.
// (MXCSR, which every SSE arithmetic instruction reads, only as written.)
bool forbidden_register(ZydisRegister reg) {
  switch (ZydisRegisterGetClass(reg)) {
    case ZYDIS_REGCLASS_X87:
    case ZYDIS_REGCLASS_MMX:
    case ZYDIS_REGCLASS_TMM:
    case ZYDIS_REGCLASS_SEGMENT:
    case ZYDIS_REGCLASS_TABLE:
    case ZYDIS_REGCLASS_TEST:
    case ZYDIS_REGCLASS_CONTROL:
    case ZYDIS_REGCLASS_DEBUG:
    case ZYDIS_REGCLASS_BOUND:
      return true;
    default:
      return false;
  }
}

// ---- What each path knows -------------------------------------------------

// At one instruction of one function: how far %rsp is below the function's
// entry (where its return address is), and which general registers hold
// values whose upper 32 bits are zero on every path here.
struct State {
  int64_t height = 0;
  uint16_t clean = 0;  // bit i: the general register with Zydis id i
  bool operator==(const State&) const = default;
};

std::optional<int> gpr64_id(ZydisRegister reg) {
  const ZydisRegister enclosing = ZydisRegisterGetLargestEnclosing(ZYDIS_MACHINE_MODE_LONG_64, reg);
  if (ZydisRegisterGetClass(enclosing) != ZYDIS_REGCLASS_GPR64) return std::nullopt;
  return ZydisRegisterGetId(enclosing);
}

bool is_rsp(ZydisRegister reg) {
  return ZydisRegisterGetLargestEnclosing(ZYDIS_MACHINE_MODE_LONG_64, reg) == ZYDIS_REGISTER_RSP;
}

bool writes(const ZydisDecodedOperand& operand) {
  return (operand.actions & ZYDIS_OPERAND_ACTION_MASK_WRITE) != 0;
}

// Instructions Zydis reports as writing their 32-bit destination that leave
// the whole 64-bit register as it was when the source is zero: bsf and bsr
// (helper-14 ran one on this CPU), and tzcnt and lzcnt, which run as bsf and
// bsr on CPUs without them. Their destination keeps its state.
bool may_leave_destination(const Decoded& decoded) {
  const ZydisMnemonic m = decoded.mnemonic();
  return m == ZYDIS_MNEMONIC_BSF || m == ZYDIS_MNEMONIC_BSR || m == ZYDIS_MNEMONIC_TZCNT ||
         m == ZYDIS_MNEMONIC_LZCNT;
}

bool stack_instruction(const Decoded& decoded) {
  const ZydisMnemonic m = decoded.mnemonic();
  return m == ZYDIS_MNEMONIC_PUSH || m == ZYDIS_MNEMONIC_POP || m == ZYDIS_MNEMONIC_CALL ||
         m == ZYDIS_MNEMONIC_RET;
}

// The stack slot push, pop, call and ret reach on their own: [%rsp] (after
// push's and call's decrement), which the height rules account for.
bool implicit_stack_slot(const Decoded& decoded, const ZydisDecodedOperand& operand) {
  return stack_instruction(decoded) && operand.visibility == ZYDIS_OPERAND_VISIBILITY_HIDDEN &&
         operand.type == ZYDIS_OPERAND_TYPE_MEMORY && operand.mem.base == ZYDIS_REGISTER_RSP;
}

class Verifier {
 public:
  explicit Verifier(const VerifierInput& input) : input_(input) {
    ZydisDecoderInit(&decoder_, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
    for (const CodeRange& range : input.code) code_bytes_ += range.bytes.size();
    work_left_ = 16 * code_bytes_ + 4096;  // steps: each instruction a few times
    probes_left_ = 16 * work_left_;        // of the tables of states: never the first out
  }

  Verdict run() {
    check_ranges();
    uint64_t deepest = 0;
    StackNeeds needs([this](uint64_t entry) { return analyse(entry); }, input_.max_stack_bytes,
                     8);  // a call pushes its return address
    for (const uint64_t entry : input_.entries) deepest = std::max(deepest, needs.of(entry));
    Verdict verdict;
    verdict.accepted = true;
    verdict.stack_bytes = deepest;
    verdict.instructions = instructions_;
    return verdict;
  }

 private:
  [[noreturn]] static void refuse(std::string why) { throw Refusal{std::move(why)}; }
  [[noreturn]] void refuse_at(const Decoded& decoded, std::string_view rule) const {
    refuse(say(hex(decoded.address), " (window +", hex(decoded.address - input_.window_base),
               "): ", text(decoded), ": ", rule));
  }

  // The code lies in the window, so %rip-relative displacements land in the
  // window or its guards; ranges do not overlap.
  void check_ranges() {
    for (const CodeRange& range : input_.code) {
      const uint64_t begin = range.address;
      const uint64_t size = range.bytes.size();
      if (begin < input_.window_base || begin - input_.window_base > Window::kSize ||
          size > Window::kSize - (begin - input_.window_base))
        refuse(say("code at ", hex(begin), " (", size, " bytes) lies outside the window"));
      ranges_.push_back(&range);
    }
    std::sort(ranges_.begin(), ranges_.end(),
              [](const CodeRange* a, const CodeRange* b) { return a->address < b->address; });
    for (std::size_t i = 1; i < ranges_.size(); ++i)
      if (ranges_[i]->address < ranges_[i - 1]->address + ranges_[i - 1]->bytes.size())
        refuse("code ranges overlap");
  }

  // The instruction starting at `address`, decoded each time a path
  // reaches it (a decode costs less than keeping its 1.1 KB record: 1 MB of
  // code kept 1.2 GB); refused if the address is not in the code or the
  // bytes there are no instruction that ends inside the same range.
  Decoded decode(uint64_t address) {
    const auto after =
        std::upper_bound(ranges_.begin(), ranges_.end(), address,
                         [](uint64_t at, const CodeRange* range) { return at < range->address; });
    const CodeRange* range = after == ranges_.begin() ? nullptr : *(after - 1);
    if (range != nullptr && address - range->address >= range->bytes.size()) range = nullptr;
    if (range == nullptr)
      refuse(say(hex(address), ": control reaches an address outside the code"));
    const uint64_t offset = address - range->address;
    Decoded decoded;
    decoded.address = address;
    if (!ZYAN_SUCCESS(ZydisDecoderDecodeFull(&decoder_, range->bytes.data() + offset,
                                             range->bytes.size() - offset, &decoded.instruction,
                                             decoded.operands.data())))
      refuse(say(hex(address),
                 ": bytes that are no instruction (or one cut off by the end of the code)"));
    check_instruction(decoded);
    return decoded;
  }

  // The rules that do not depend on the path.
  void check_instruction(const Decoded& decoded) const {
    if (!allowed_mnemonic(decoded)) refuse_at(decoded, "not an instruction confined code may use");
    for (const ZydisDecodedOperand& operand : decoded.all()) {
      if (operand.type == ZYDIS_OPERAND_TYPE_POINTER) refuse_at(decoded, "a far pointer");
      if (operand.type == ZYDIS_OPERAND_TYPE_REGISTER && forbidden_register(operand.reg.value))
        refuse_at(decoded, "names x87, MMX, segment or system state");
      if (operand.type == ZYDIS_OPERAND_TYPE_REGISTER &&
          operand.reg.value == ZYDIS_REGISTER_MXCSR && writes(operand))
        refuse_at(decoded, "writes MXCSR");
    }
    // A branch, call or return with a 16-bit operand size (a 0x66 prefix)
    // truncates the instruction pointer to 16 bits (retw pops 2 bytes and
    // jumps below 64 KiB; AMD honours it on jumps too); push and pop of 16
    // bits are left to no one either.
    const bool control = decoded.instruction.meta.category == ZYDIS_CATEGORY_COND_BR ||
                         stack_instruction(decoded) || decoded.mnemonic() == ZYDIS_MNEMONIC_JMP;
    // lretq is mnemonic RET to Zydis too, and pops 16 bytes (%rip and %cs).
    const ZydisBranchType branch = decoded.instruction.meta.branch_type;
    if (control && branch != ZYDIS_BRANCH_TYPE_NONE && branch != ZYDIS_BRANCH_TYPE_SHORT &&
        branch != ZYDIS_BRANCH_TYPE_NEAR)
      refuse_at(decoded, "a far branch, call or return");
    // Zydis reports 64 bits for 41 66 c3, which this machine's CPU ran as
    // retw (fuzz_verifier found it): the prefix alone refuses.
    if (control && (decoded.instruction.operand_width != 64 ||
                    (decoded.instruction.attributes & ZYDIS_ATTRIB_HAS_OPERANDSIZE) != 0))
      refuse_at(decoded, "a branch, call, return, push or pop of less than 64 bits");
    // bt/bts/btr/btc of memory with a register bit offset reach up to
    // 2^60 bytes from their operand: the operand's address is not where
    // they access.
    const auto operands = decoded.explicit_operands();
    const ZydisMnemonic m = decoded.mnemonic();
    if ((m == ZYDIS_MNEMONIC_BT || m == ZYDIS_MNEMONIC_BTS || m == ZYDIS_MNEMONIC_BTR ||
         m == ZYDIS_MNEMONIC_BTC) &&
        operands.size() == 2 && operands[0].type == ZYDIS_OPERAND_TYPE_MEMORY &&
        operands[1].type == ZYDIS_OPERAND_TYPE_REGISTER)
      refuse_at(decoded, "a bit test of memory at a register offset (reaches past its operand)");
  }

  // One memory operand (not lea's, not a nop's, not push/pop/call/ret's own
  // slot) against the rules, with the path's state before the instruction.
  void check_access(const Decoded& decoded, const ZydisDecodedOperand& operand,
                    const State& state) const {
    const ZydisDecodedOperandMem& mem = operand.mem;
    if (mem.type != ZYDIS_MEMOP_TYPE_MEM) refuse_at(decoded, "a vector-indexed or bound access");
    const int64_t bytes = operand.size / 8;
    const bool wide_addressing = decoded.instruction.address_width == 64;
    if (mem.segment == ZYDIS_REGISTER_GS) {
      if (mem.base == ZYDIS_REGISTER_EIP || mem.base == ZYDIS_REGISTER_RIP)
        refuse_at(decoded, "%gs with an instruction-relative address");
      // The 32-bit sum wraps inside the window; the widest access ends
      // in the upper guard.
      if (!wide_addressing) {
        if (bytes <= 0 || bytes > static_cast<int64_t>(Window::kGuard))
          refuse_at(decoded, "%gs with an access of unknown width");
        return;
      }
      if (mem.index != ZYDIS_REGISTER_NONE)
        refuse_at(decoded, "%gs with an index register and 64-bit addressing");
      // No base: an absolute displacement, sign-extended from 32 bits, so
      // the access starts within 2 GiB of the base either way (in the
      // window or its lower guard) and ends at most its width past 2 GiB,
      // in the window (what the shape leaves of a constant pointer). The
      // moffs forms of mov (a0-a3) carry 64 bits instead: anywhere
      // (helper-27's attack), so the value itself is bounded.
      if (mem.base == ZYDIS_REGISTER_NONE) {
        if (bytes <= 0 || bytes > static_cast<int64_t>(Window::kGuard))
          refuse_at(decoded, "%gs with an access of unknown width");
        if (mem.disp.value < INT32_MIN || mem.disp.value > INT32_MAX)
          refuse_at(decoded, "%gs with an absolute displacement past the window's guards");
        return;
      }
      const std::optional<int> base = gpr64_id(mem.base);
      if (!base || mem.base == ZYDIS_REGISTER_RSP)
        refuse_at(decoded, "%gs without a general base register");
      if ((state.clean & (1U << *base)) == 0)
        refuse_at(decoded, "%gs through a register whose upper half may be set on some path");
      // base < 4 GiB, displacement >= -2 GiB: it starts in the window or its
      // guards; it must end there too, or a masked store, which faults on
      // no lane it skips, writes past the upper guard (helper-14's attack).
      if (bytes <= 0 || mem.disp.value > static_cast<int64_t>(Window::kGuard) - bytes)
        refuse_at(decoded, "%gs with a displacement that reaches past the upper guard");
      if (mem.disp.value < -static_cast<int64_t>(Window::kGuard))
        refuse_at(decoded, "%gs with a displacement that reaches below the lower guard");
      return;
    }
    if (mem.segment == ZYDIS_REGISTER_FS) refuse_at(decoded, "an access through %fs");
    if (!wide_addressing || mem.index != ZYDIS_REGISTER_NONE)
      refuse_at(decoded, "an access outside the window");
    if (mem.base == ZYDIS_REGISTER_RIP) {
      // The code lies in the window, so %rip plus a 32-bit displacement
      // starts in the window or its guards; it must end there too.
      const uint64_t target = decoded.next() + static_cast<uint64_t>(mem.disp.value);
      const uint64_t lowest = input_.window_base - Window::kGuard;
      if (bytes <= 0 || target < lowest ||
          target - lowest > 2 * Window::kGuard + Window::kSize - static_cast<uint64_t>(bytes))
        refuse_at(decoded, "an instruction-relative access that reaches past the guards");
      return;
    }
    if (mem.base == ZYDIS_REGISTER_RSP) {
      const int64_t offset = mem.disp.value;
      if (bytes <= 0 || offset < 0 || offset > state.height - bytes)
        refuse_at(decoded,
                  say("a stack access outside the function's frame (height ", state.height, ")"));
      return;
    }
    refuse_at(decoded, "an access outside the window (not %gs, %rip or the frame)");
  }

  // The state after `decoded` (not a branch's target: its successors).
  State step(const Decoded& decoded, State state) const {
    const bool no_access = decoded.mnemonic() == ZYDIS_MNEMONIC_NOP ||
                           decoded.instruction.meta.category == ZYDIS_CATEGORY_WIDENOP;
    for (const ZydisDecodedOperand& operand : decoded.all())
      if (operand.type == ZYDIS_OPERAND_TYPE_MEMORY && operand.mem.type != ZYDIS_MEMOP_TYPE_AGEN &&
          !no_access && !implicit_stack_slot(decoded, operand))
        check_access(decoded, operand, state);

    const int64_t height = state.height;
    state.height = stack_height_after(decoded, height);
    if (state.height < 0)
      refuse_at(decoded, "pops or frees stack above the function's return address");
    if (static_cast<uint64_t>(state.height) > input_.max_stack_bytes)
      refuse_at(decoded, say("a frame deeper than ", input_.max_stack_bytes, " bytes"));

    for (const ZydisDecodedOperand& operand : decoded.all()) {
      if (operand.type != ZYDIS_OPERAND_TYPE_REGISTER || !writes(operand)) continue;
      const std::optional<int> id = gpr64_id(operand.reg.value);
      if (!id) continue;
      if (is_rsp(operand.reg.value)) continue;  // stack_height_after allowed it
      const uint16_t bit = static_cast<uint16_t>(1U << *id);
      switch (ZydisRegisterGetClass(operand.reg.value)) {
        case ZYDIS_REGCLASS_GPR32:  // zero-extends, when it writes at all
          if ((operand.actions & ZYDIS_OPERAND_ACTION_WRITE) != 0 &&
              !may_leave_destination(decoded))
            state.clean |= bit;
          break;
        case ZYDIS_REGCLASS_GPR64:
          state.clean &= static_cast<uint16_t>(~bit);
          break;
        default:  // 8 and 16 bits leave the upper half as it was
          break;
      }
    }
    return state;
  }

  // %rsp changes only in the forms whose effect is a constant.
  int64_t stack_height_after(const Decoded& decoded, int64_t height) const {
    const auto operands = decoded.explicit_operands();
    const bool writes_rsp = std::any_of(decoded.all().begin(), decoded.all().end(),
                                        [](const ZydisDecodedOperand& operand) {
                                          return operand.type == ZYDIS_OPERAND_TYPE_REGISTER &&
                                                 writes(operand) && is_rsp(operand.reg.value);
                                        });
    if (!writes_rsp) return height;
    const bool rsp_destination = !operands.empty() &&
                                 operands[0].type == ZYDIS_OPERAND_TYPE_REGISTER &&
                                 operands[0].reg.value == ZYDIS_REGISTER_RSP;
    const int64_t width = decoded.instruction.operand_width / 8;
    switch (decoded.mnemonic()) {
      case ZYDIS_MNEMONIC_PUSH:
        return height + width;
      case ZYDIS_MNEMONIC_POP:
        if (operands.size() != 1 || operands[0].type != ZYDIS_OPERAND_TYPE_REGISTER ||
            is_rsp(operands[0].reg.value))
          refuse_at(decoded, "pop into memory or into %rsp");
        return height - width;
      case ZYDIS_MNEMONIC_CALL:
      case ZYDIS_MNEMONIC_RET:
        return height;  // the callee's and the caller's own business (see analyse)
      case ZYDIS_MNEMONIC_SUB:
      case ZYDIS_MNEMONIC_ADD:
        if (rsp_destination && operands.size() == 2 &&
            operands[1].type == ZYDIS_OPERAND_TYPE_IMMEDIATE) {
          const int64_t amount = operands[1].imm.value.s;
          return decoded.mnemonic() == ZYDIS_MNEMONIC_SUB ? height + amount : height - amount;
        }
        break;
      case ZYDIS_MNEMONIC_LEA:
        if (rsp_destination && operands.size() == 2 && operands[1].mem.base == ZYDIS_REGISTER_RSP &&
            operands[1].mem.index == ZYDIS_REGISTER_NONE && decoded.instruction.address_width == 64)
          return height - operands[1].mem.disp.value;
        break;
      default:
        break;
    }
    refuse_at(decoded, "changes %rsp other than by push, pop, call, ret or a constant");
  }

  uint64_t branch_target(const Decoded& decoded) const {
    const auto operands = decoded.explicit_operands();
    if (operands.empty() || operands[0].type != ZYDIS_OPERAND_TYPE_IMMEDIATE ||
        !operands[0].imm.is_relative)
      refuse_at(decoded, "an indirect branch or call");
    ZyanU64 target = 0;
    if (!ZYAN_SUCCESS(
            ZydisCalcAbsoluteAddress(&decoded.instruction, &operands[0], decoded.address, &target)))
      refuse_at(decoded, "a branch whose target cannot be computed");
    return target;
  }

  // Every path of the function entered at `entry`, with the height and
  // clean registers each instruction sees; the same height on every path.
  AnalysedFunction analyse(uint64_t entry) {
    AnalysedFunction function;
    AddressStates<State> seen(secret_hash_key(), probes_left_);
    std::vector<uint64_t> pending;
    const auto reach = [&](uint64_t address, State state) {
      auto [known, fresh] = seen.try_emplace(address, state);
      if (!fresh) {
        if (known->height != state.height)
          refuse(say(hex(address), ": reached with the stack at two heights (", known->height,
                     " and ", state.height, ")"));
        const uint16_t clean = known->clean & state.clean;
        if (clean == known->clean) return;
        known->clean = clean;
      }
      pending.push_back(address);
    };
    reach(entry, State{});
    while (!pending.empty()) {
      if (work_left_-- == 0) refuse("code too intricate to verify within the verifier's budget");
      if (input_.stop != nullptr && input_.stop->load(std::memory_order_relaxed))
        refuse("the verifier was stopped (its cache is going)");
      const uint64_t address = pending.back();
      pending.pop_back();
      const Decoded decoded = decode(address);
      const State before = seen.at(address);
      const State after = step(decoded, before);
      function.deepest = std::max(function.deepest, after.height);
      switch (decoded.mnemonic()) {
        case ZYDIS_MNEMONIC_RET:
          if (!decoded.explicit_operands().empty())
            refuse_at(decoded, "ret that frees its caller's stack");
          if (before.height != 0)
            refuse_at(decoded,
                      say("ret with the stack ", before.height, " bytes below the return address"));
          continue;
        case ZYDIS_MNEMONIC_UD2:
          continue;
        case ZYDIS_MNEMONIC_JMP:
          reach(branch_target(decoded), after);
          continue;
        case ZYDIS_MNEMONIC_CALL:
          function.calls.emplace_back(branch_target(decoded), before.height);
          function.deepest = std::max(function.deepest, before.height + 8);
          reach(decoded.next(), State{after.height, 0});  // the callee may set any register
          continue;
        default:
          break;
      }
      if (decoded.instruction.meta.category == ZYDIS_CATEGORY_COND_BR)
        reach(branch_target(decoded), after);
      reach(decoded.next(), after);
    }
    instructions_ += seen.size();
    return function;
  }

  const VerifierInput& input_;
  ZydisDecoder decoder_{};
  uint64_t code_bytes_ = 0;
  uint64_t work_left_ = 0;
  uint64_t probes_left_ = 0;
  std::vector<const CodeRange*> ranges_;       // by address, checked not to overlap
  std::size_t instructions_ = 0;               // reached, summed over the functions read
};

}  // namespace

Verdict verify_window_code_x86_64(const VerifierInput& input) {
  try {
    return Verifier(input).run();
  } catch (const Refusal& refusal) {
    Verdict verdict;
    verdict.refusal = refusal.why;
    return verdict;
  }
}

}  // namespace threechains::confined
