// The window verifier for aarch64: see verify_aarch64.hpp for the rules and
// docs/security.md ("The aarch64 verifier") for why each is enough. Every
// word is matched against an encoding class of the Arm ARM ("A64
// instruction set encoding"); the masks below are that table's, one class
// each, and a word that matches no allowed class is refused.
#include "confine/verify_aarch64.hpp"

#include "confine/verifier_calls.hpp"
#include "confine/window.hpp"

#include <algorithm>
#include <array>
#include <optional>
#include <vector>

namespace threechains::confined {
namespace {

using verifier_text::hex;
using verifier_text::Refusal;
using verifier_text::say;
using Word = uint32_t;

constexpr uint32_t field(Word word, unsigned high, unsigned low) {
  return (word >> low) & ((uint32_t{1} << (high - low + 1)) - 1);
}
constexpr int64_t signed_field(Word word, unsigned high, unsigned low) {
  const unsigned width = high - low + 1;
  const auto value = static_cast<int64_t>(field(word, high, low));
  return value >= (int64_t{1} << (width - 1)) ? value - (int64_t{1} << width) : value;
}
constexpr bool is(Word word, Word mask, Word pattern) {
  return (word & mask) == pattern;
}

constexpr unsigned kBase = kAarch64WindowBaseRegister;
constexpr unsigned kLink = 30;
constexpr unsigned kZeroOrSp = 31;  // xzr or sp, as the encoding class says
constexpr auto kGuard = static_cast<int64_t>(Window::kAarch64Guard);
constexpr auto kWindowSize = static_cast<int64_t>(Window::kSize);

// ---- What a path knows of a general register -------------------------------

enum class Kind : uint8_t {
  unknown,
  clean,     // its upper 32 bits are zero
  base,      // exactly x21 + offset
  windowed,  // x21 + (some value below 4 GiB) + offset
  absolute,  // exactly the window's base + offset: an address the verifier computed
};

struct Value {
  Kind kind = Kind::unknown;
  int64_t offset = 0;
  bool operator==(const Value&) const = default;
};

// Offsets this far from the window are no address any rule accepts; past
// it the value is unknown (and the arithmetic cannot overflow).
constexpr int64_t kFar = int64_t{1} << 40;
Value at_offset(Kind kind, int64_t offset) {
  return offset > kFar || offset < -kFar ? Value{} : Value{kind, offset};
}
bool points_into_window(Value value) {
  return value.kind == Kind::base || value.kind == Kind::windowed;
}

// At one instruction of one function.
struct State {
  int64_t height = 0;         // bytes sp lies below where it was at the entry
  std::array<Value, 31> x{};  // x0..x30; x21 is base + 0 throughout
  bool return_in_x30 = true;  // x30 holds the address the entry returns to
  // Frame slots (addresses relative to the entry's sp, so negative) that
  // hold that return address; kNoSlot where none.
  static constexpr int64_t kNoSlot = 1;
  std::array<int64_t, 2> saved_return{kNoSlot, kNoSlot};
  bool operator==(const State&) const = default;

  State() { x[kBase] = Value{Kind::base, 0}; }
};

Value join(Value a, Value b) {
  return a == b ? a : Value{};
}

State join(const State& a, const State& b) {
  State joined = a;
  for (std::size_t r = 0; r < a.x.size(); ++r) joined.x[r] = join(a.x[r], b.x[r]);
  joined.return_in_x30 = a.return_in_x30 && b.return_in_x30;
  for (int64_t& slot : joined.saved_return)
    if (std::find(b.saved_return.begin(), b.saved_return.end(), slot) == b.saved_return.end())
      slot = State::kNoSlot;
  return joined;
}

// DecodeBitMasks of the Arm ARM for a logical immediate: the mask, or
// nothing for a reserved encoding.
std::optional<uint64_t> logical_immediate(unsigned n, unsigned imms, unsigned immr,
                                          unsigned width) {
  const unsigned combined = (n << 6) | (~imms & 0x3f);
  if (combined == 0) return std::nullopt;
  unsigned length = 31 - static_cast<unsigned>(__builtin_clz(combined));
  if (length < 1) return std::nullopt;
  const unsigned levels = (1U << length) - 1;
  if ((imms & levels) == levels) return std::nullopt;
  const unsigned element = 1U << length;
  if (element > width) return std::nullopt;
  const unsigned ones = (imms & levels) + 1;
  const unsigned rotate = immr & levels;
  const uint64_t element_mask = element == 64 ? ~uint64_t{0} : (uint64_t{1} << element) - 1;
  uint64_t pattern = ones == 64 ? ~uint64_t{0} : (uint64_t{1} << ones) - 1;
  if (rotate != 0) pattern = ((pattern >> rotate) | (pattern << (element - rotate))) & element_mask;
  uint64_t mask = 0;
  for (unsigned at = 0; at < width; at += element) mask |= pattern << at;
  return mask;
}

// What one instruction does to control.
struct Flow {
  enum class Kind : uint8_t { next, jump, call, branch, ret, trap } kind = Kind::next;
  uint64_t target = 0;
};

// A load or store, as the rules need it.
struct Transfer {
  enum class Mode : uint8_t { offset, pre, post, register_offset } mode = Mode::offset;
  unsigned base = 0;             // Rn (31: sp)
  int64_t immediate = 0;         // displacement, or what writeback adds
  unsigned index = 0;            // Rm of a register offset
  // A register offset's index: uxtw, sxtw, or a whole x register (lsl).
  enum class Index : uint8_t { zero_extended, sign_extended, whole } index_kind{};
  unsigned shift = 0;            // the index scaled by 1 << shift (S set: the access's size)
  int64_t element = 0;           // bytes per register
  int registers = 1;             // 1, or 2 for a pair
  std::array<unsigned, 2> rt{};  // Rt, Rt2
  bool load = false;
  bool vector = false;        // Rt are SIMD&FP registers
  bool clean_result = false;  // a load into a w register (zero-extended)
};

class Verifier {
 public:
  explicit Verifier(const VerifierInput& input) : input_(input) {
    for (const CodeRange& range : input.code) code_bytes_ += range.bytes.size();
    work_left_ = 4 * code_bytes_ + 4096;  // steps: each instruction a few times
    probes_left_ = 16 * work_left_;       // of the tables of states: never the first out
  }

  Verdict run() {
    check_ranges();
    uint64_t deepest = 0;
    StackNeeds needs([this](uint64_t entry) { return analyse(entry); }, input_.max_stack_bytes,
                     0);  // bl leaves the return address in x30
    for (const uint64_t entry : input_.entries) deepest = std::max(deepest, needs.of(entry));
    Verdict verdict;
    verdict.accepted = true;
    verdict.stack_bytes = deepest;
    verdict.instructions = instructions_;
    return verdict;
  }

 private:
  [[noreturn]] static void refuse(std::string why) { throw Refusal{std::move(why)}; }
  [[noreturn]] void refuse_here(std::string_view rule) const {
    refuse(say(hex(pc_), " (window +", hex(pc_ - input_.window_base), "): word ", hex(word_), ": ",
               rule));
  }

  void check_ranges() {
    for (const CodeRange& range : input_.code) {
      const uint64_t begin = range.address;
      const uint64_t size = range.bytes.size();
      if (begin < input_.window_base || begin - input_.window_base > Window::kSize ||
          size > Window::kSize - (begin - input_.window_base))
        refuse(say("code at ", hex(begin), " (", size, " bytes) lies outside the window"));
      if (begin % 4 != 0) refuse(say("code at ", hex(begin), " is not 4-byte aligned"));
      ranges_.push_back(&range);
    }
    std::sort(ranges_.begin(), ranges_.end(),
              [](const CodeRange* a, const CodeRange* b) { return a->address < b->address; });
    for (std::size_t i = 1; i < ranges_.size(); ++i)
      if (ranges_[i]->address < ranges_[i - 1]->address + ranges_[i - 1]->bytes.size())
        refuse("code ranges overlap");
  }

  // The word at `address`; refused unless a whole aligned word of the code.
  Word fetch(uint64_t address) {
    const auto after =
        std::upper_bound(ranges_.begin(), ranges_.end(), address,
                         [](uint64_t at, const CodeRange* range) { return at < range->address; });
    const CodeRange* range = after == ranges_.begin() ? nullptr : *(after - 1);
    if (range != nullptr && (address - range->address > range->bytes.size() ||
                             range->bytes.size() - (address - range->address) < 4))
      range = nullptr;
    if (range == nullptr || address % 4 != 0)
      refuse(say(hex(address), ": control reaches an address outside the code"));
    const std::byte* bytes = range->bytes.data() + (address - range->address);
    return static_cast<Word>(bytes[0]) | static_cast<Word>(bytes[1]) << 8 |
           static_cast<Word>(bytes[2]) << 16 | static_cast<Word>(bytes[3]) << 24;
  }

  // Offsets from the window's base of an address the verifier computed.
  [[nodiscard]] int64_t from_base(uint64_t address) const {
    return static_cast<int64_t>(address - input_.window_base);
  }

  // ---- Registers -------------------------------------------------------------

  void write(State& state, unsigned reg, Value value) const {
    if (reg == kZeroOrSp) return;  // xzr here: the callers handle sp themselves
    if (reg == kBase) refuse_here("writes x21, the window's base");
    if (reg == kLink) state.return_in_x30 = false;
    state.x[reg] = value;
  }
  static Value result(bool wide) { return wide ? Value{} : Value{Kind::clean, 0}; }
  // A register read where 31 is xzr: zero, so clean.
  static Value read(const State& state, unsigned reg) {
    return reg == kZeroOrSp ? Value{Kind::clean, 0} : state.x[reg];
  }

  void change_height(State& state, int64_t by) const {
    state.height += by;
    // A slot below sp is no longer the function's: a callee's frame or a
    // signal frame may write it (helper-19: a frame freed before a call,
    // then taken back, held the callee's value where x30 was saved).
    for (int64_t& slot : state.saved_return)
      if (slot != State::kNoSlot && slot < -state.height) slot = State::kNoSlot;
    if (state.height < 0) refuse_here("frees stack above the function's entry");
    if (static_cast<uint64_t>(state.height) > input_.max_stack_bytes)
      refuse_here(say("a frame deeper than ", input_.max_stack_bytes, " bytes"));
  }

  // ---- Data processing: immediate --------------------------------------------

  void immediate_operation(State& state) const {
    const Word w = word_;
    const unsigned rd = field(w, 4, 0);
    const unsigned rn = field(w, 9, 5);
    const bool wide = field(w, 31, 31) != 0;
    switch (field(w, 25, 23)) {
      case 0b000:
      case 0b001: {  // adr, adrp: an address the verifier computes
        const int64_t immediate = signed_field(w, 23, 5) * 4 + field(w, 30, 29);
        const bool page = field(w, 31, 31) != 0;
        const uint64_t from = page ? pc_ & ~uint64_t{0xfff} : pc_;
        const uint64_t target = from + static_cast<uint64_t>(page ? immediate * 4096 : immediate);
        write(state, rd, at_offset(Kind::absolute, from_base(target)));
        return;
      }
      case 0b010: {  // add, sub (immediate)
        const bool subtract = field(w, 30, 30) != 0;
        const bool flags = field(w, 29, 29) != 0;
        int64_t immediate = static_cast<int64_t>(field(w, 21, 10)) << (field(w, 22, 22) ? 12 : 0);
        if (subtract) immediate = -immediate;
        if (rd == kZeroOrSp && !flags) {
          if (!wide || rn != kZeroOrSp)
            refuse_here("writes sp other than by adding a constant to it");
          change_height(state, -immediate);
          return;
        }
        Value value = result(wide);
        if (wide && rn != kZeroOrSp && state.x[rn].kind != Kind::unknown &&
            state.x[rn].kind != Kind::clean)
          value = at_offset(state.x[rn].kind, state.x[rn].offset + immediate);
        write(state, rd, value);
        return;
      }
      case 0b100: {  // and, orr, eor, ands (immediate)
        const unsigned opc = field(w, 30, 29);
        const auto mask =
            logical_immediate(field(w, 22, 22), field(w, 15, 10), field(w, 21, 16), wide ? 64 : 32);
        if (!mask) refuse_here("a reserved logical immediate");
        if (rd == kZeroOrSp && opc != 0b11) refuse_here("writes sp with a logical operation");
        const bool masks_low = (opc == 0b00 || opc == 0b11) && (*mask >> 32) == 0;
        write(state, rd, wide && !masks_low ? Value{} : Value{Kind::clean, 0});
        return;
      }
      case 0b101: {  // movn, movz, movk
        const unsigned opc = field(w, 30, 29);
        const unsigned shift = field(w, 22, 21);
        if (opc == 0b01 || (!wide && shift >= 2)) refuse_here("a reserved move-wide encoding");
        const bool low = shift < 2;
        const bool clean =
            !wide || (opc == 0b10 && low) ||
            (opc == 0b11 && low && rd != kZeroOrSp && state.x[rd].kind == Kind::clean);
        write(state, rd, clean ? Value{Kind::clean, 0} : Value{});
        return;
      }
      case 0b110: {  // sbfm, bfm, ubfm
        const unsigned opc = field(w, 30, 29);
        const unsigned n = field(w, 22, 22);
        const unsigned immr = field(w, 21, 16);
        const unsigned imms = field(w, 15, 10);
        if (opc == 0b11 || n != static_cast<unsigned>(wide) || (!wide && (immr > 31 || imms > 31)))
          refuse_here("a reserved bitfield encoding");
        // ubfm moves bits imms..0 (imms < immr) or imms..immr (else) to
        // the bottom or to 64 - immr: the highest bit it can set.
        const unsigned top = imms >= immr ? imms - immr : 64 - immr + imms;
        write(state, rd, !wide || (opc == 0b10 && top < 32) ? Value{Kind::clean, 0} : Value{});
        return;
      }
      case 0b111:  // extr
        if (field(w, 30, 29) != 0 || field(w, 21, 21) != 0 ||
            field(w, 22, 22) != static_cast<unsigned>(wide) || (!wide && field(w, 15, 15) != 0))
          refuse_here("a reserved extract encoding");
        write(state, rd, result(wide));
        return;
      default:  // 0b011: add/sub with tags, min/max (immediate)
        refuse_here("not an instruction confined code may use (tags, min/max immediate)");
    }
  }

  // ---- Data processing: register ---------------------------------------------

  void register_operation(State& state) const {
    const Word w = word_;
    const unsigned rd = field(w, 4, 0);
    const unsigned rn = field(w, 9, 5);
    const unsigned rm = field(w, 20, 16);
    const bool wide = field(w, 31, 31) != 0;
    const bool add = field(w, 30, 30) == 0;
    if (is(w, 0x1f200000, 0x0b200000)) {  // add, sub (extended register): Rd, Rn may be sp
      const bool flags = field(w, 29, 29) != 0;
      const unsigned option = field(w, 15, 13);
      const unsigned shift = field(w, 12, 10);
      if (rd == kZeroOrSp && !flags) refuse_here("writes sp other than by adding a constant to it");
      if (shift > 4 || field(w, 23, 22) != 0) refuse_here("a reserved extended-register encoding");
      Value value = result(wide);
      // x21 + w, uxtw (or + x known clean): an address in the window.
      if (wide && add && shift == 0 && rn != kZeroOrSp && state.x[rn].kind == Kind::base &&
          (option == 0b010 || (option == 0b011 && read(state, rm).kind == Kind::clean)))
        value = Value{Kind::windowed, state.x[rn].offset};
      write(state, rd, value);
      return;
    }
    if (is(w, 0x1f200000, 0x0b000000)) {  // add, sub (shifted register)
      if (field(w, 23, 22) == 0b11) refuse_here("a reserved shift");
      Value value = result(wide);
      if (wide && add && field(w, 23, 22) == 0 && field(w, 15, 10) == 0 && rn != kZeroOrSp &&
          rm != kZeroOrSp) {
        const Value a = state.x[rn];
        const Value b = state.x[rm];
        if (a.kind == Kind::base && b.kind == Kind::clean) value = Value{Kind::windowed, a.offset};
        if (b.kind == Kind::base && a.kind == Kind::clean) value = Value{Kind::windowed, b.offset};
      }
      write(state, rd, value);
      return;
    }
    if (is(w, 0x1f000000, 0x0a000000)) {  // and, bic, orr, orn, eor, eon, ands, bics
      Value value = result(wide);
      // mov xd, xm is orr xd, xzr, xm: the value, whatever it is.
      const bool move = field(w, 30, 29) == 0b01 && field(w, 21, 21) == 0 &&
                        field(w, 23, 22) == 0 && field(w, 15, 10) == 0 && rn == kZeroOrSp;
      if (wide && move) value = rm == kZeroOrSp ? Value{Kind::clean, 0} : state.x[rm];
      write(state, rd, value);
      return;
    }
    // The rest has bit 28 set; bits 24..21 say which class.
    const unsigned op2 = field(w, 24, 21);
    if (op2 == 0b0000) {  // adc, sbc; rmif, setf (flags only)
      if (field(w, 15, 10) == 0) {
        write(state, rd, result(wide));
        return;
      }
      // Only rmif and setf8/16 write no register here; addpt and subpt
      // (FEAT_CPA) share the space and write Xd|SP (helper-19).
      const bool rmif = field(w, 31, 29) == 0b101 && field(w, 14, 10) == 0b00001;
      const bool setf = field(w, 31, 29) == 0b001 && field(w, 20, 15) == 0 &&
                        field(w, 13, 10) == 0b0010 && field(w, 4, 0) == 0b01101;
      if (!rmif && !setf) refuse_here("not an instruction confined code may use (carry class)");
      return;
    }
    if (op2 == 0b0010) {  // ccmp, ccmn: flags only
      // Unallocated unless S is set and o2 and o3 are clear (helper-28):
      // what a later architecture puts there is not these.
      if (field(w, 29, 29) != 1 || field(w, 10, 10) != 0 || field(w, 4, 4) != 0)
        refuse_here("a reserved conditional-compare encoding");
      return;
    }
    if (op2 == 0b0100) {        // csel, csinc, csinv, csneg
      if (field(w, 29, 29) != 0 || field(w, 11, 11) != 0)
        refuse_here("a reserved conditional-select encoding");
      write(state, rd, result(wide));
      return;
    }
    if (op2 == 0b0110) {
      const unsigned opcode = field(w, 15, 10);
      if (field(w, 29, 29) != 0) refuse_here("not an instruction confined code may use");
      if (field(w, 30, 30) == 0) {
        // Two sources: divisions, variable shifts, crc32, min/max. Not the
        // memory-tagging ones (irg writes sp), not pacga.
        const bool allowed = opcode == 0b000010 || opcode == 0b000011 ||
                             (opcode >= 0b001000 && opcode <= 0b001011) ||
                             (opcode >= 0b010000 && opcode <= 0b010111) ||
                             (opcode >= 0b011000 && opcode <= 0b011011);
        if (!allowed) refuse_here("not an instruction confined code may use (two-source)");
      } else {
        // One source: rbit, rev*, clz, cls, ctz, cnt, abs. Not pointer
        // authentication.
        if (rm != 0 || opcode > 0b001000)
          refuse_here("not an instruction confined code may use (one-source)");
      }
      write(state, rd, result(wide));
      return;
    }
    if ((op2 & 0b1000) != 0) {  // madd, msub, smaddl, umulh, ...
      // Allocated: madd and msub at either width; smaddl, smsubl, umaddl,
      // umsubl, and smulh and umulh (o0 clear, Ra all ones) in 64 bits.
      // The rest (FEAT_CPA's maddpt among them) is refused (helper-28).
      const unsigned op31 = field(w, 23, 21);
      const bool o0 = field(w, 15, 15) != 0;
      const bool multiply_add = op31 == 0b000;
      const bool long_multiply_add = wide && (op31 == 0b001 || op31 == 0b101);
      const bool high_multiply =
          wide && (op31 == 0b010 || op31 == 0b110) && !o0 && field(w, 14, 10) == 0b11111;
      if (field(w, 30, 29) != 0 || !(multiply_add || long_multiply_add || high_multiply))
        refuse_here("a reserved or unknown multiply encoding");
      write(state, rd, result(wide));
      return;
    }
    refuse_here("not an instruction confined code may use");
  }

  // ---- Scalar floating point and Advanced SIMD -------------------------------
  // They read and write the vector registers; these few write a general one.

  void vector_operation(State& state) const {
    const Word w = word_;
    const unsigned rd = field(w, 4, 0);
    const bool wide = field(w, 31, 31) != 0;
    if (is(w, 0x5f20fc00, 0x1e200000)) {  // conversion between floating point and integer
      const unsigned opcode = field(w, 18, 16);
      if (opcode != 0b010 && opcode != 0b011 && opcode != 0b111) write(state, rd, result(wide));
      return;
    }
    if (is(w, 0x5f200000, 0x1e000000)) {  // conversion between floating and fixed point
      if ((field(w, 18, 16) & 0b110) == 0) write(state, rd, result(wide));
      return;
    }
    if (is(w, 0x9fe08400, 0x0e000400)) {  // Advanced SIMD copy: smov, umov write Rd
      const unsigned imm4 = field(w, 14, 11);
      if (field(w, 29, 29) == 0 && (imm4 == 0b0101 || imm4 == 0b0111))
        write(state, rd, result(field(w, 30, 30) != 0));
    }
  }

  // ---- Branches, exceptions, system ------------------------------------------

  Flow branch_or_system() const {
    const Word w = word_;
    const auto relative = [this](int64_t words) { return pc_ + static_cast<uint64_t>(words * 4); };
    if (is(w, 0x7c000000, 0x14000000))  // b, bl
      return {field(w, 31, 31) ? Flow::Kind::call : Flow::Kind::jump,
              relative(signed_field(w, 25, 0))};
    if (is(w, 0x7e000000, 0x34000000))  // cbz, cbnz
      return {Flow::Kind::branch, relative(signed_field(w, 23, 5))};
    if (is(w, 0x7e000000, 0x36000000))  // tbz, tbnz
      return {Flow::Kind::branch, relative(signed_field(w, 18, 5))};
    if (is(w, 0xff000000, 0x54000000))  // b.cond, bc.cond
      return {Flow::Kind::branch, relative(signed_field(w, 23, 5))};
    if (is(w, 0xffe0001f, 0xd4200000)) return {Flow::Kind::trap};  // brk
    if (w == 0xd65f03c0) return {Flow::Kind::ret};                 // ret (x30)
    if (is(w, 0xfffff01f, 0xd503201f)) {                           // hints
      const unsigned hint = field(w, 11, 5);
      if (hint == 0 || hint == 32 || hint == 34 || hint == 36 || hint == 38) return {};  // nop, bti
      refuse_here("a hint confined code may not use (pointer authentication, wfe, ...)");
    }
    // clrex, dsb, dmb, isb, sb: they order, they reach no state.
    if (is(w, 0xfffff0ff, 0xd503305f) || is(w, 0xfffff0ff, 0xd503309f) ||
        is(w, 0xfffff0ff, 0xd50330bf) || is(w, 0xfffff0ff, 0xd50330df) ||
        is(w, 0xfffff0ff, 0xd50330ff))
      return {};
    if (is(w, 0xfe000000, 0xd6000000)) refuse_here("an indirect branch, call or return");
    refuse_here("a system instruction, exception or branch confined code may not use");
  }

  // ---- Loads and stores -------------------------------------------------------

  // size/V/opc of the single-register classes: bytes, load, clean result;
  // nullopt for prefetch.
  struct Width {
    int64_t bytes = 0;
    bool load = false;
    bool clean = false;
    bool prefetch = false;
  };
  Width single_width(bool vector) const {
    const unsigned size = field(word_, 31, 30);
    const unsigned opc = field(word_, 23, 22);
    if (vector) {
      if ((opc & 0b10) != 0 && size != 0) refuse_here("a reserved vector load or store");
      return {(opc & 0b10) != 0 ? 16 : int64_t{1} << size, (opc & 1) != 0, false, false};
    }
    const int64_t bytes = int64_t{1} << size;
    switch (opc) {
      case 0b00:
        return {bytes, false, false, false};
      case 0b01:
        return {bytes, true, size <= 2, false};
      case 0b10:
        if (size == 3) return {8, false, false, true};  // prfm
        return {bytes, true, false, false};             // sign-extends to 64 bits
      default:
        if (size >= 2) refuse_here("a reserved load encoding");
        return {bytes, true, true, false};  // sign-extends to 32 bits
    }
  }

  Transfer single_transfer(Transfer::Mode mode, int64_t immediate) const {
    Transfer t;
    t.vector = field(word_, 26, 26) != 0;
    const Width width = single_width(t.vector);
    t.mode = mode;
    t.base = field(word_, 9, 5);
    t.immediate = immediate;
    t.element = width.bytes;
    t.rt = {width.prefetch ? kZeroOrSp : field(word_, 4, 0), 0};
    t.load = width.load;
    t.clean_result = width.clean;
    if (width.prefetch && mode != Transfer::Mode::offset && mode != Transfer::Mode::register_offset)
      refuse_here("a reserved prefetch encoding");
    // Prefetch type 11 in the register-offset form is rprfm (FEAT_RPRFM):
    // its register describes a range, not an offset (helper-28). Only
    // pld, pli and pst prefetches are read as accesses.
    if (width.prefetch && field(word_, 4, 3) == 0b11)
      refuse_here("a range or unallocated prefetch (rprfm)");
    return t;
  }

  std::optional<Transfer> decode_transfer() const {
    const Word w = word_;
    if (is(w, 0x3b000000, 0x39000000)) {  // unsigned immediate offset
      Transfer t = single_transfer(Transfer::Mode::offset, 0);
      t.immediate = static_cast<int64_t>(field(w, 21, 10)) * t.element;
      return t;
    }
    if (is(w, 0x3b200000, 0x38000000)) {  // 9-bit signed: unscaled, post, pre
      static constexpr std::array kModes = {Transfer::Mode::offset, Transfer::Mode::post,
                                            Transfer::Mode::offset, Transfer::Mode::pre};
      if (field(w, 11, 10) == 0b10) refuse_here("an unprivileged load or store");
      return single_transfer(kModes[field(w, 11, 10)], signed_field(w, 20, 12));
    }
    if (is(w, 0x3b200c00, 0x38200800)) {  // register offset
      Transfer t = single_transfer(Transfer::Mode::register_offset, 0);
      const unsigned option = field(w, 15, 13);
      if (option != 0b010 && option != 0b011 && option != 0b110)
        refuse_here("a register offset other than a w register extended or an x register");
      t.index = field(w, 20, 16);
      t.index_kind = option == 0b010   ? Transfer::Index::zero_extended
                     : option == 0b110 ? Transfer::Index::sign_extended
                                       : Transfer::Index::whole;
      // Scaled by the access's size (S set): by 8 at most, which the guards
      // take for a w index (by 16, for q registers, they would need 32 GiB).
      if (field(w, 12, 12) != 0) {
        if (t.element > 8) refuse_here("a register offset scaled by 16");
        t.shift = static_cast<unsigned>(__builtin_ctzll(static_cast<uint64_t>(t.element)));
      }
      return t;
    }
    if (is(w, 0x3a000000, 0x28000000)) {  // pairs
      Transfer t;
      const unsigned opc = field(w, 31, 30);
      t.vector = field(w, 26, 26) != 0;
      t.load = field(w, 22, 22) != 0;
      const unsigned index = field(w, 24, 23);
      if (opc == 0b11 || (!t.vector && opc == 0b01 && (!t.load || index == 0b00)))
        refuse_here("a reserved or tag-storing pair encoding");
      t.element = t.vector ? int64_t{4} << opc : (opc == 0b10 ? 8 : 4);
      t.clean_result = !t.vector && opc == 0b00;
      t.registers = 2;
      t.rt = {field(w, 4, 0), field(w, 14, 10)};
      t.base = field(w, 9, 5);
      t.immediate = signed_field(w, 21, 15) * t.element;
      static constexpr std::array kModes = {Transfer::Mode::offset, Transfer::Mode::post,
                                            Transfer::Mode::offset, Transfer::Mode::pre};
      t.mode = kModes[index];
      if (t.load && t.rt[0] == t.rt[1]) refuse_here("a pair load into one register twice");
      return t;
    }
    return std::nullopt;
  }

  // An access from `value` (a register that points into the window, or an
  // address the verifier computed) whose bytes lie at [lowest, highest)
  // past it: inside the window or its guards, whatever the part below 4
  // GiB of a windowed value is.
  void check_reach(Value value, int64_t lowest, int64_t highest) const {
    if (!points_into_window(value) && value.kind != Kind::absolute)
      refuse_here(
          "an access outside the window (not x21 plus an offset, a computed address or sp)");
    const int64_t first = value.offset + lowest;
    const int64_t end = value.offset + highest + (value.kind == Kind::windowed ? kWindowSize : 0);
    if (first < -kGuard || end > kWindowSize + kGuard)
      refuse_here("an access that reaches past the window's guards");
  }

  void forget_overlapping_slots(State& state, int64_t address, int64_t bytes) const {
    for (int64_t& slot : state.saved_return)
      if (slot != State::kNoSlot && address < slot + 8 && slot < address + bytes)
        slot = State::kNoSlot;
  }

  void transfer(const Transfer& t, State& state) const {
    const int64_t bytes = t.element * t.registers;
    const int64_t at = t.mode == Transfer::Mode::post ? 0 : t.immediate;
    const bool writeback = t.mode == Transfer::Mode::pre || t.mode == Transfer::Mode::post;
    if (!t.vector && t.load && writeback && t.base != kZeroOrSp &&
        (t.rt[0] == t.base || (t.registers == 2 && t.rt[1] == t.base)))
      refuse_here("a load with writeback into its own base register");
    if (t.base == kZeroOrSp) {
      if (t.mode == Transfer::Mode::register_offset) refuse_here("sp with a register offset");
      // The access lies in the frame as it is while the data is there:
      // after the writeback for pre-index, before it otherwise.
      const int64_t frame =
          t.mode == Transfer::Mode::pre ? state.height - t.immediate : state.height;
      const int64_t address = at - state.height;  // from the entry's sp
      if (address < -frame || address + bytes > 0)
        refuse_here(say("a stack access outside the function's frame (height ", state.height, ")"));
      for (int r = 0; r < t.registers; ++r) {
        const int64_t slot = address + r * t.element;
        if (t.load) {
          if (t.vector) continue;
          const bool ret = t.element == 8 &&
                           std::find(state.saved_return.begin(), state.saved_return.end(), slot) !=
                               state.saved_return.end();
          write(state, t.rt[r], t.clean_result ? Value{Kind::clean, 0} : Value{});
          if (t.rt[r] == kLink) state.return_in_x30 = ret;
          continue;
        }
        forget_overlapping_slots(state, slot, t.element);
        if (!t.vector && t.rt[r] == kLink && t.element == 8 && state.return_in_x30) {
          auto free =
              std::find(state.saved_return.begin(), state.saved_return.end(), State::kNoSlot);
          if (free != state.saved_return.end()) *free = slot;
        }
      }
      if (writeback) change_height(state, -t.immediate);
      return;
    }
    const Value base = state.x[t.base];
    if (t.mode == Transfer::Mode::register_offset) {
      if (!points_into_window(base))
        refuse_here("a register offset from a register that does not point into the window");
      if (t.index_kind == Transfer::Index::whole && read(state, t.index).kind != Kind::clean)
        refuse_here("a register offset whose upper half may be set on some path");
      // The index's range: below 4 GiB, or (sxtw) 2 GiB either way; scaled.
      const bool sign_extended = t.index_kind == Transfer::Index::sign_extended;
      const int64_t low = sign_extended ? -(int64_t{1} << 31) * (int64_t{1} << t.shift) : 0;
      const int64_t high = (sign_extended ? (int64_t{1} << 31) - 1 : (int64_t{1} << 32) - 1) *
                           (int64_t{1} << t.shift);
      check_reach(base, low, high + bytes);
    } else {
      check_reach(base, at, at + bytes);
    }
    if (writeback) write(state, t.base, at_offset(base.kind, base.offset + t.immediate));
    if (t.load && !t.vector)
      for (int r = 0; r < t.registers; ++r)
        write(state, t.rt[r], t.clean_result ? Value{Kind::clean, 0} : Value{});
  }

  // Atomics, exclusives, literals and vector structures: each its own form.
  void other_memory_operation(State& state) const {
    const Word w = word_;
    const unsigned rn = field(w, 9, 5);
    const unsigned rt = field(w, 4, 0);
    if (is(w, 0x3b000000, 0x18000000)) {  // ldr (literal): pc-relative
      const unsigned opc = field(w, 31, 30);
      const bool vector = field(w, 26, 26) != 0;
      if (vector && opc == 0b11) refuse_here("a reserved literal load");
      const int64_t bytes = vector ? int64_t{4} << opc : (opc == 0b01 ? 8 : 4);
      const uint64_t target = pc_ + static_cast<uint64_t>(signed_field(w, 23, 5) * 4);
      check_reach(Value{Kind::absolute, from_base(target)}, 0, bytes);
      if (!vector && opc != 0b11) write(state, rt, result(opc != 0b00));
      return;
    }
    if (rn == kZeroOrSp)
      refuse_here("an atomic, exclusive or vector-structure access of the stack");
    const Value base = state.x[rn];
    if (is(w, 0x3b200c00, 0x38200000)) {  // atomic memory operations (LSE)
      const unsigned o3 = field(w, 15, 15);
      const unsigned opc = field(w, 14, 12);
      // o3 with opc 100 is ldapr: acquire set, release clear (the other
      // combinations are unallocated, helper-28).
      if (field(w, 26, 26) != 0 || (o3 == 1 && opc != 0b000 && opc != 0b100) ||
          (o3 == 1 && opc == 0b100 && (field(w, 20, 16) != kZeroOrSp || field(w, 23, 22) != 0b10)))
        refuse_here("an atomic operation confined code may not use");
      const int64_t bytes = int64_t{1} << field(w, 31, 30);
      check_reach(base, 0, bytes);
      write(state, rt, result(bytes == 8));
      return;
    }
    if (is(w, 0x3f000000, 0x08000000)) {  // exclusives, acquire/release, cas, casp
      check_reach(base, 0, 16);
      const unsigned rs = field(w, 20, 16);
      const unsigned rt2 = field(w, 14, 10);
      // stxr's status register as its base: CONSTRAINED UNPREDICTABLE, an
      // unknown address among the outcomes (helper-19).
      if (rs != kZeroOrSp && rs == rn)
        refuse_here("an exclusive whose status register is its base");
      const bool pair = field(w, 31, 31) == 0 && field(w, 23, 23) == 0 && field(w, 21, 21) == 1;
      for (const unsigned reg : {rs, rt, rt2})
        if (reg != kZeroOrSp) write(state, reg, Value{});
      if (pair)  // casp: the pairs Rs, Rs+1 and Rt, Rt+1
        for (const unsigned reg : {rs + 1, rt + 1})
          if (reg <= kZeroOrSp) write(state, reg, Value{});
      return;
    }
    const bool structures = is(w, 0xbfbf0000, 0x0c000000) || is(w, 0xbf9f0000, 0x0d000000);
    const bool structures_post = is(w, 0xbfa00000, 0x0c800000) || is(w, 0xbf800000, 0x0d800000);
    if (structures || structures_post) {  // ld1..ld4, st1..st4: at most 64 bytes
      check_reach(base, 0, 64);
      if (structures_post) write(state, rn, Value{});
      return;
    }
    refuse_here("a load or store confined code may not use");
  }

  // ---- One instruction, one path ----------------------------------------------

  Flow step(uint64_t address, State& state) {
    pc_ = address;
    word_ = fetch(address);
    const Word w = word_;
    if (is(w, 0xffff0000, 0x00000000)) return {Flow::Kind::trap};  // udf
    if (is(w, 0x1c000000, 0x10000000)) {
      immediate_operation(state);
    } else if (is(w, 0x1c000000, 0x14000000)) {
      return branch_or_system();
    } else if (is(w, 0x0a000000, 0x08000000)) {
      if (const std::optional<Transfer> t = decode_transfer())
        transfer(*t, state);
      else
        other_memory_operation(state);
    } else if (is(w, 0x0e000000, 0x0a000000)) {
      register_operation(state);
    } else if (is(w, 0x0e000000, 0x0e000000)) {
      vector_operation(state);
    } else {
      refuse_here("not an instruction confined code may use (SVE, SME or unallocated)");
    }
    return {};
  }

  // Every path of the function entered at `entry`.
  AnalysedFunction analyse(uint64_t entry) {
    AnalysedFunction function;
    AddressStates<State> seen(secret_hash_key(), probes_left_);
    std::vector<uint64_t> pending;
    const auto reach = [&](uint64_t address, const State& state) {
      auto [known, fresh] = seen.try_emplace(address, state);
      if (!fresh) {
        if (known->height != state.height)
          refuse(say(hex(address), ": reached with the stack at two heights (", known->height,
                     " and ", state.height, ")"));
        State joined = join(*known, state);
        if (joined == *known) return;
        *known = joined;
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
      State state = seen.at(address);
      const Flow flow = step(address, state);
      function.deepest = std::max(function.deepest, state.height);
      switch (flow.kind) {
        case Flow::Kind::next:
          reach(address + 4, state);
          break;
        case Flow::Kind::jump:
          reach(flow.target, state);
          break;
        case Flow::Kind::branch:
          reach(flow.target, state);
          reach(address + 4, state);
          break;
        case Flow::Kind::call: {
          function.calls.emplace_back(flow.target, state.height);
          State after;  // the callee may set any register but x21 and sp
          after.height = state.height;
          after.return_in_x30 = false;
          after.saved_return = state.saved_return;
          reach(address + 4, after);
          break;
        }
        case Flow::Kind::ret:
          if (!state.return_in_x30)
            refuse_here("ret with x30 not holding the function's return address on some path");
          if (state.height != 0)
            refuse_here(say("ret with the stack ", state.height, " bytes below the entry's"));
          break;
        case Flow::Kind::trap:
          break;
      }
    }
    instructions_ += seen.size();
    return function;
  }

  const VerifierInput& input_;
  uint64_t code_bytes_ = 0;
  uint64_t work_left_ = 0;
  uint64_t probes_left_ = 0;
  std::vector<const CodeRange*> ranges_;       // by address, checked not to overlap
  std::size_t instructions_ = 0;               // reached, summed over the functions read
  uint64_t pc_ = 0;                            // the instruction being checked
  Word word_ = 0;
};

}  // namespace

Verdict verify_window_code_aarch64(const VerifierInput& input) {
  try {
    return Verifier(input).run();
  } catch (const Refusal& refusal) {
    Verdict verdict;
    verdict.refusal = refusal.why;
    return verdict;
  }
}

}  // namespace threechains::confined
