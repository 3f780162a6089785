// The walk over a pre-linked image's .eh_frame (eh_frame_check.hpp). The
// encodings are DWARF's (DW_EH_PE_*), as the LSB's exception frames use them.
#include "jit/eh_frame_check.hpp"

#include <threechains/error.hpp>

#include <algorithm>
#include <cstring>
#include <vector>

namespace threechains::jit {
namespace {

constexpr uint8_t kOmit = 0xff;        // DW_EH_PE_omit
constexpr uint8_t kIndirect = 0x80;    // DW_EH_PE_indirect
constexpr uint8_t kPcRelative = 0x10;  // DW_EH_PE_pcrel

// Reads one record, never past its end.
class Reader {
 public:
  Reader(std::span<const std::byte> bytes, std::size_t at, std::size_t end, const std::string& name)
      : bytes_(bytes), at_(at), end_(end), name_(name) {}

  [[noreturn]] void refuse(const std::string& why) const {
    throw Error(errc::jit_failed,
                "ifunc '" + name_ + "': the pre-linked image's .eh_frame " + why +
                    " (link it with threechains-prelink.ld, as threechains_add_ifunc PRELINKED "
                    "does)");
  }

  [[nodiscard]] std::size_t position() const noexcept { return at_; }

  uint64_t fixed(std::size_t size) {
    if (end_ - at_ < size) refuse("has a record cut short");
    uint64_t value = 0;
    std::memcpy(&value, bytes_.data() + at_, size);  // little-endian hosts only
    at_ += size;
    return value;
  }

  uint64_t uleb() {
    uint64_t value = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
      const auto byte = static_cast<uint8_t>(fixed(1));
      value |= uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80u) == 0) return value;
    }
    refuse("has an over-long LEB128 number");
  }

  std::string text() {
    std::string out;
    while (true) {
      const auto c = static_cast<char>(fixed(1));
      if (c == '\0') return out;
      out += c;
    }
  }

  // A pointer in `encoding`, applied (pc-relative to its own field, whose
  // mapped address is `section_address` + its offset). Nothing else is
  // what a linker writes into an image's FDEs.
  uint64_t pointer(uint8_t encoding, uint64_t section_address) {
    const std::size_t field = at_;
    const uint64_t raw = value(encoding);
    switch (encoding & 0x70) {
      case 0:
        return raw;
      case kPcRelative:
        return section_address + field + raw;
      default:
        refuse("uses a pointer encoding this loader does not apply");
    }
  }

  // A value in `encoding`'s format (its low nibble), sign-extended.
  uint64_t value(uint8_t encoding) {
    switch (encoding & 0x0f) {
      case 0x00:  // absptr
      case 0x04:  // udata8
      case 0x0c:  // sdata8
        return fixed(8);
      case 0x03:  // udata4
        return fixed(4);
      case 0x0b:  // sdata4
        return static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(fixed(4))));
      case 0x02:  // udata2
        return fixed(2);
      case 0x0a:  // sdata2
        return static_cast<uint64_t>(static_cast<int64_t>(static_cast<int16_t>(fixed(2))));
      default:
        refuse("uses a pointer format this loader does not read");
    }
  }

 private:
  std::span<const std::byte> bytes_;
  std::size_t at_;
  std::size_t end_;
  const std::string& name_;
};

struct Cie {
  std::size_t offset = 0;
  uint8_t fde_encoding = 0;  // absptr unless the augmentation says ('R')
};

Cie read_cie(Reader& in, std::size_t offset) {
  Cie cie{offset, 0};
  const auto version = static_cast<uint8_t>(in.fixed(1));
  if (version != 1 && version != 3) in.refuse("has a CIE of an unknown version");
  const std::string augmentation = in.text();
  (void)in.uleb();  // code alignment
  (void)in.uleb();  // data alignment (SLEB128: its bytes are what matter here)
  if (version == 1)
    (void)in.fixed(1);  // return address register
  else
    (void)in.uleb();
  if (augmentation.empty()) return cie;
  if (augmentation.front() != 'z') in.refuse("has a CIE augmentation this loader does not read");
  const uint64_t length = in.uleb();
  const std::size_t data_end = in.position() + length;
  for (const char c : augmentation.substr(1)) {
    switch (c) {
      case 'R':
        cie.fde_encoding = static_cast<uint8_t>(in.fixed(1));
        if ((cie.fde_encoding & kIndirect) != 0 || cie.fde_encoding == kOmit)
          in.refuse("has an FDE address encoding this loader does not apply");
        break;
      case 'P': {
        const auto encoding = static_cast<uint8_t>(in.fixed(1));
        if (encoding != kOmit) (void)in.value(encoding);  // the personality routine's pointer
        break;
      }
      case 'L':
        (void)in.fixed(1);
        break;
      case 'S':
      case 'B':
        break;
      default:
        in.refuse("has a CIE augmentation this loader does not read");
    }
  }
  if (in.position() > data_end) in.refuse("has CIE augmentation data longer than it says");
  return cie;
}

}  // namespace

void check_eh_frame(std::span<const std::byte> section, uint64_t address,
                    llvm::function_ref<bool(uint64_t begin, uint64_t end)> in_code,
                    const std::string& name) {
  Reader whole(section, 0, section.size(), name);
  std::vector<Cie> cies;  // in increasing offset order
  std::size_t at = 0;
  while (true) {
    if (section.size() - at < sizeof(uint32_t)) whole.refuse("has no zero terminator");
    uint32_t length = 0;
    std::memcpy(&length, section.data() + at, sizeof(length));
    if (length == 0) break;
    if (length == UINT32_MAX) whole.refuse("has a 64-bit record, which this loader does not take");
    if (length < sizeof(uint32_t) || length > section.size() - at - sizeof(uint32_t))
      whole.refuse("has a record running past its end");
    const std::size_t field = at + sizeof(uint32_t);
    const std::size_t end = field + length;
    Reader record(section, field, end, name);
    const auto id = static_cast<uint32_t>(record.fixed(4));
    if (id == 0) {
      cies.push_back(read_cie(record, at));
    } else {
      // An FDE's id is the distance back from that field to its CIE.
      const auto cie = std::lower_bound(
          cies.begin(), cies.end(), field - id,
          [](const Cie& known, std::size_t offset) { return known.offset < offset; });
      if (id > field || cie == cies.end() || cie->offset != field - id)
        whole.refuse("has an FDE whose CIE is not in it");
      const uint64_t begin = record.pointer(cie->fde_encoding, address);
      const uint64_t size = record.value(cie->fde_encoding);
      if (begin + size < begin || !in_code(begin, begin + size))
        whole.refuse("describes code outside the image's");
    }
    at = end;
  }
  if (at == 0) whole.refuse("is only a terminator");
  // What follows the terminator (lld pads, the script adds one more) is zero.
  if (std::any_of(section.begin() + static_cast<std::ptrdiff_t>(at), section.end(),
                  [](std::byte b) { return b != std::byte{0}; }))
    whole.refuse("has bytes after its terminator");
}

}  // namespace threechains::jit
