// The pre-linked image loader (prelinked_image.hpp).
#include "jit/prelinked_image.hpp"

#include "jit/eh_frame_check.hpp"
#include "jit/image_memory.hpp"

#include <threechains/error.hpp>

#include <llvm/BinaryFormat/ELF.h>
#include <llvm/ExecutionEngine/Orc/TargetProcess/RegisterEHFrames.h>
#include <llvm/Object/ELF.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace threechains::jit {
namespace {

using Elf = llvm::object::ELFFile<llvm::object::ELF64LE>;
using ElfTypes = llvm::object::ELF64LE;

// What this loader maps at most: an ifunc is code for one job, not a program.
constexpr uint64_t kMaxSpan = uint64_t{64} << 20;

#if defined(__x86_64__)
constexpr unsigned kMachine = llvm::ELF::EM_X86_64;
enum class Reloc : uint32_t {
  none = llvm::ELF::R_X86_64_NONE,
  absolute = llvm::ELF::R_X86_64_64,          // S + A
  glob_dat = llvm::ELF::R_X86_64_GLOB_DAT,    // S
  jump_slot = llvm::ELF::R_X86_64_JUMP_SLOT,  // S
  relative = llvm::ELF::R_X86_64_RELATIVE,    // B + A
};
#elif defined(__aarch64__)
constexpr unsigned kMachine = llvm::ELF::EM_AARCH64;
enum class Reloc : uint32_t {
  none = llvm::ELF::R_AARCH64_NONE,
  absolute = llvm::ELF::R_AARCH64_ABS64,
  glob_dat = llvm::ELF::R_AARCH64_GLOB_DAT,
  jump_slot = llvm::ELF::R_AARCH64_JUMP_SLOT,
  relative = llvm::ELF::R_AARCH64_RELATIVE,
};
#else
#error "the pre-linked loader knows x86_64 and aarch64"
#endif

[[noreturn]] void refuse_ifunc_resolver(const std::string& name) {
  throw Error(errc::jit_failed, "ifunc '" + name +
                                    "': the pre-linked image has IFUNC resolvers, which this "
                                    "loader does not run; pack it as a relocatable object "
                                    "(without PRELINKED)");
}

[[noreturn]] void malformed(const std::string& name, const std::string& what) {
  throw Error(errc::bad_container, "ifunc '" + name + "': bad pre-linked image: " + what);
}

template <typename T>
T checked(llvm::Expected<T> value, const std::string& name, const char* what) {
  if (!value) malformed(name, std::string(what) + ": " + llvm::toString(value.takeError()));
  return std::move(*value);
}

// One page's protection, from the segments that touch it.
struct PageFlags {
  bool read = false;
  bool write = false;
  bool execute = false;
};

}  // namespace

bool is_prelinked_image(std::span<const std::byte> image) noexcept {
  constexpr std::size_t kTypeOffset = 16;  // e_type, after e_ident
  if (image.size() < sizeof(llvm::ELF::Elf64_Ehdr)) return false;
  if (std::memcmp(image.data(), llvm::ELF::ElfMagic, 4) != 0) return false;
  uint16_t type = 0;
  std::memcpy(&type, image.data() + kTypeOffset, sizeof(type));
  return type == llvm::ELF::ET_DYN;
}

PrelinkedImage PrelinkedImage::load(std::span<const std::byte> bytes, const std::string& name,
                                    Resolver resolve, ImageMemory& memory) {
  const llvm::StringRef data(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const Elf elf = checked(Elf::create(data), name, "not ELF");
  const auto& header = elf.getHeader();
  if (header.e_ident[llvm::ELF::EI_CLASS] != llvm::ELF::ELFCLASS64 ||
      header.e_ident[llvm::ELF::EI_DATA] != llvm::ELF::ELFDATA2LSB ||
      header.e_type != llvm::ELF::ET_DYN || header.e_machine != kMachine) {
    malformed(name, "not a 64-bit little-endian shared object for this machine");
  }

  // The segments: one mapping from the lowest page to the highest byte.
  const auto headers = checked(elf.program_headers(), name, "program headers");
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  uint64_t low = UINT64_MAX;
  uint64_t high = 0;
  for (const auto& segment : headers) {
    if (segment.p_type == llvm::ELF::PT_TLS)
      throw Error(errc::jit_failed, "ifunc '" + name +
                                        "': the pre-linked image uses native thread-local "
                                        "storage; compile it with -femulated-tls (TLS)");
    if (segment.p_type != llvm::ELF::PT_LOAD) continue;
    if (segment.p_filesz > segment.p_memsz || segment.p_memsz > kMaxSpan ||
        segment.p_vaddr > kMaxSpan || segment.p_offset > bytes.size() ||
        segment.p_filesz > bytes.size() - segment.p_offset) {
      malformed(name, "a segment lies outside the image or is too large");
    }
    low = std::min(low, segment.p_vaddr & ~(page - 1));
    high = std::max(high, segment.p_vaddr + segment.p_memsz);
  }
  if (high <= low || high - low > kMaxSpan) malformed(name, "no loadable segment of sane size");
  const uint64_t span = ((high - low) + page - 1) & ~(page - 1);

  PrelinkedImage image;
  image.base_ = memory.acquire(span);
  image.memory_ = &memory;
  image.span_ = span;
  // Where vaddr 0 would be (an address, never dereferenced), and the
  // block's byte for a vaddr already checked to be in it.
  const uint64_t bias = reinterpret_cast<uint64_t>(image.base_) - low;
  const auto mapped = [&](uint64_t vaddr) { return image.base_ + (vaddr - low); };
  for (const auto& segment : headers) {
    if (segment.p_type == llvm::ELF::PT_LOAD && segment.p_filesz != 0)
      std::memcpy(mapped(segment.p_vaddr), bytes.data() + segment.p_offset, segment.p_filesz);
  }
  // Whether [vaddr, vaddr + size) lies in the mapping.
  const auto inside = [&](uint64_t vaddr, uint64_t size) {
    return vaddr >= low && size <= span && vaddr - low <= span - size;
  };
  // The loadable segment holding [vaddr, vaddr + size) in its file bytes, if any.
  const auto segment_holding = [&](uint64_t vaddr, uint64_t size) -> const auto* {
    for (const auto& segment : headers) {
      if (segment.p_type == llvm::ELF::PT_LOAD && vaddr >= segment.p_vaddr &&
          size <= segment.p_filesz && vaddr - segment.p_vaddr <= segment.p_filesz - size)
        return &segment;
    }
    return static_cast<decltype(&*headers.begin())>(nullptr);
  };

  // The sections: symbol tables, relocations, constructors, unwind tables.
  const auto sections = checked(elf.sections(), name, "section headers");
  uint64_t eh_frame_address = 0;
  uint64_t eh_frame_size = 0;
  const auto symbols_of = [&](uint32_t index) {
    if (index >= sections.size()) malformed(name, "a relocation section names no symbol table");
    const auto& table = sections[index];
    const auto symbols = checked(elf.symbols(&table), name, "symbol table");
    const llvm::StringRef strings =
        checked(elf.getStringTableForSymtab(table, sections), name, "string table");
    return std::pair{symbols, strings};
  };
  const llvm::StringRef section_names =
      checked(elf.getSectionStringTable(sections), name, "section names");
  for (const auto& section : sections) {
    const llvm::StringRef section_name =
        checked(elf.getSectionName(section, section_names), name, "section name");
    if (section.sh_type == llvm::ELF::SHT_INIT_ARRAY ||
        section.sh_type == llvm::ELF::SHT_FINI_ARRAY ||
        section.sh_type == llvm::ELF::SHT_PREINIT_ARRAY || section_name == ".init" ||
        section_name == ".fini") {
      if (section.sh_size != 0)
        throw Error(errc::jit_failed, "ifunc '" + name +
                                          "': the pre-linked image has constructors or "
                                          "destructors, which this loader does not run; pack it "
                                          "as a relocatable object (without PRELINKED)");
    }
    // Unwind tables (C++ exceptions thrown and caught inside the ifunc),
    // checked once mapped and relocated, below (a section of only the
    // terminator threechains-prelink.ld adds has nothing to register).
    constexpr uint64_t kTerminator = 4;
    if (section_name == ".eh_frame" && section.sh_size > kTerminator) {
      eh_frame_address = section.sh_addr;
      eh_frame_size = section.sh_size;
    }
    if (section.sh_type == llvm::ELF::SHT_RELR || section.sh_type == llvm::ELF::SHT_ANDROID_REL ||
        section.sh_type == llvm::ELF::SHT_ANDROID_RELA ||
        section.sh_type == llvm::ELF::SHT_ANDROID_RELR) {
      throw Error(errc::jit_failed, "ifunc '" + name +
                                        "': the pre-linked image has packed relocations, which "
                                        "this loader does not apply (link it without "
                                        "-z pack-relative-relocs)");
    }
    if (section.sh_type == llvm::ELF::SHT_GNU_verneed && section.sh_size != 0) {
      throw Error(errc::jit_failed, "ifunc '" + name +
                                        "': the pre-linked image needs versioned symbols, which "
                                        "this loader does not resolve (link it with no "
                                        "libraries: name them as the ifunc's DEPS)");
    }
    if (section.sh_type == llvm::ELF::SHT_DYNSYM) {
      const auto [symbols, strings] =
          symbols_of(static_cast<uint32_t>(&section - sections.begin()));
      for (const auto& symbol : symbols) {
        if (symbol.isUndefined() || symbol.getBinding() == llvm::ELF::STB_LOCAL) continue;
        if (symbol.getType() == llvm::ELF::STT_GNU_IFUNC) refuse_ifunc_resolver(name);
        const llvm::StringRef symbol_name = checked(symbol.getName(strings), name, "symbol name");
        if (symbol_name.empty() || !inside(symbol.st_value, std::max<uint64_t>(symbol.st_size, 1)))
          continue;
        image.exports_.emplace_back(symbol_name.str(), bias + symbol.st_value);
      }
    }
    if (section.sh_type == llvm::ELF::SHT_SYMTAB || section.sh_type == llvm::ELF::SHT_DYNSYM) {
      const auto [symbols, strings] =
          symbols_of(static_cast<uint32_t>(&section - sections.begin()));
      for (const auto& symbol : symbols) {
        if (symbol.getType() != llvm::ELF::STT_FUNC || symbol.isUndefined() || symbol.st_size == 0)
          continue;
        if (!inside(symbol.st_value, symbol.st_size)) continue;
        const llvm::StringRef symbol_name = checked(symbol.getName(strings), name, "symbol name");
        image.functions_.push_back(
            {bias + symbol.st_value, bias + symbol.st_value + symbol.st_size, symbol_name.str()});
      }
    }
  }
  std::sort(image.exports_.begin(), image.exports_.end());
  std::sort(image.functions_.begin(), image.functions_.end(),
            [](const Function& a, const Function& b) { return a.begin < b.begin; });
  image.functions_.erase(
      std::unique(image.functions_.begin(), image.functions_.end(),
                  [](const Function& a, const Function& b) { return a.begin == b.begin; }),
      image.functions_.end());

  // The relocations: the base, and the imports through the resolver.
  for (const auto& section : sections) {
    if (section.sh_type == llvm::ELF::SHT_REL)
      malformed(name, "REL relocations (this loader takes RELA)");
    if (section.sh_type != llvm::ELF::SHT_RELA || (section.sh_flags & llvm::ELF::SHF_ALLOC) == 0)
      continue;
    const auto relocations = checked(elf.relas(section), name, "relocations");
    const auto [symbols, strings] = symbols_of(section.sh_link);
    for (const auto& relocation : relocations) {
      const auto type = static_cast<Reloc>(relocation.getType(false));
      if (type == Reloc::none) continue;
      if (!inside(relocation.r_offset, sizeof(uint64_t)))
        malformed(name, "a relocation outside the image");
      uint64_t symbol_address = 0;
      const uint32_t index = relocation.getSymbol(false);
      if (index != 0) {
        if (index >= symbols.size()) malformed(name, "a relocation names no symbol");
        const auto& symbol = symbols[index];
        if (symbol.isUndefined()) {
          const llvm::StringRef symbol_name = checked(symbol.getName(strings), name, "symbol name");
          symbol_address = resolve(symbol_name, symbol.getBinding() == llvm::ELF::STB_WEAK);
        } else if (symbol.getType() == llvm::ELF::STT_GNU_IFUNC) {
          refuse_ifunc_resolver(name);
        } else if (symbol.st_shndx == llvm::ELF::SHN_ABS) {
          symbol_address = symbol.st_value;  // an absolute value: no base added
        } else {
          if (!inside(symbol.st_value, 0)) malformed(name, "a symbol outside the image");
          symbol_address = bias + symbol.st_value;
        }
      }
      const auto addend = static_cast<uint64_t>(relocation.r_addend);
      uint64_t value = 0;
      switch (type) {
        case Reloc::relative:
          value = bias + addend;
          break;
        case Reloc::absolute:
          value = symbol_address + addend;
          break;
        case Reloc::glob_dat:
        case Reloc::jump_slot:
          // x86_64 ignores the addend of these (it is 0); AArch64 adds it.
          value = symbol_address + (kMachine == llvm::ELF::EM_AARCH64 ? addend : 0);
          break;
        default:
          throw Error(errc::jit_failed,
                      "ifunc '" + name + "': the pre-linked image needs relocation type " +
                          std::to_string(relocation.getType(false)) +
                          ", which this loader does not apply (native TLS or IFUNC resolvers); "
                          "pack it as a relocatable object (without PRELINKED)");
      }
      std::memcpy(mapped(relocation.r_offset), &value, sizeof(value));
    }
  }

  // Protection, page by page: the union of the segments on each page, and
  // never writable and executable at once.
  std::vector<PageFlags> pages(span / page);
  for (const auto& segment : headers) {
    if (segment.p_type != llvm::ELF::PT_LOAD || segment.p_memsz == 0) continue;
    const uint64_t first = ((segment.p_vaddr & ~(page - 1)) - low) / page;
    const uint64_t last = (segment.p_vaddr + segment.p_memsz - 1 - low) / page;
    for (uint64_t k = first; k <= last; ++k) {
      pages[k].read |= (segment.p_flags & llvm::ELF::PF_R) != 0;
      pages[k].write |= (segment.p_flags & llvm::ELF::PF_W) != 0;
      pages[k].execute |= (segment.p_flags & llvm::ELF::PF_X) != 0;
    }
  }
  // The unwind tables, as the unwinder will read them: in the mapped,
  // relocated image, on pages nothing may write, describing only its code.
  if (eh_frame_size != 0) {
    if (segment_holding(eh_frame_address, eh_frame_size) == nullptr)
      malformed(name, ".eh_frame outside the image's file-backed segments");
    for (uint64_t k = (eh_frame_address - low) / page;
         k <= (eh_frame_address + eh_frame_size - 1 - low) / page; ++k) {
      if (pages[k].write || !pages[k].read)
        malformed(name, ".eh_frame on a page that is writable or unreadable");
    }
    const auto in_code = [&](uint64_t begin, uint64_t end) {
      if (begin < bias || end < begin) return false;
      const uint64_t vaddr = begin - bias;
      const uint64_t size = end - begin;
      for (const auto& segment : headers) {
        if (segment.p_type == llvm::ELF::PT_LOAD && (segment.p_flags & llvm::ELF::PF_X) != 0 &&
            vaddr >= segment.p_vaddr && size <= segment.p_memsz &&
            vaddr - segment.p_vaddr <= segment.p_memsz - size)
          return true;
      }
      return false;
    };
    check_eh_frame(std::span<const std::byte>(mapped(eh_frame_address), eh_frame_size),
                   bias + eh_frame_address, in_code, name);
  }
  for (std::size_t k = 0; k < pages.size();) {
    std::size_t run = k + 1;
    const auto same = [&](const PageFlags& a, const PageFlags& b) {
      return a.read == b.read && a.write == b.write && a.execute == b.execute;
    };
    while (run < pages.size() && same(pages[run], pages[k])) ++run;
    if (pages[k].write && pages[k].execute)
      throw Error(errc::code_refused, "ifunc '" + name +
                                          "': the pre-linked image puts writable and executable "
                                          "bytes on one page of " +
                                          std::to_string(page) +
                                          " bytes (link it with "
                                          "-z max-page-size=" +
                                          std::to_string(page) + " or larger)");
    const int protection = (pages[k].read ? PROT_READ : 0) | (pages[k].write ? PROT_WRITE : 0) |
                           (pages[k].execute ? PROT_EXEC : 0);
    if (protection != (PROT_READ | PROT_WRITE)) {
      if (pages[k].execute) {
        const auto* begin = reinterpret_cast<char*>(image.base_ + k * page);
        __builtin___clear_cache(const_cast<char*>(begin),
                                const_cast<char*>(begin) + (run - k) * page);
      }
      if (mprotect(image.base_ + k * page, (run - k) * page, protection) != 0)
        throw Error(errc::jit_failed,
                    "ifunc '" + name + "': cannot protect its pages: " + std::strerror(errno));
    }
    k = run;
  }
  // Last: nothing may throw once the unwinder knows the section (the image's
  // destructor takes it back only if this set eh_frame_).
  if (eh_frame_size != 0) {
    if (llvm::Error e =
            llvm::orc::registerEHFrameSection(mapped(eh_frame_address), eh_frame_size)) {
      throw Error(errc::jit_failed, "ifunc '" + name + "': cannot register its unwind tables: " +
                                        llvm::toString(std::move(e)));
    }
    image.eh_frame_ = bias + eh_frame_address;
    image.eh_frame_size_ = eh_frame_size;
  }
  return image;
}

void* PrelinkedImage::find(llvm::StringRef symbol) const noexcept {
  const auto it =
      std::lower_bound(exports_.begin(), exports_.end(), symbol,
                       [](const std::pair<std::string, uint64_t>& entry, llvm::StringRef key) {
                         return llvm::StringRef(entry.first) < key;
                       });
  if (it == exports_.end() || it->first != symbol) return nullptr;
  return reinterpret_cast<void*>(it->second);
}

void PrelinkedImage::release() noexcept {
  if (eh_frame_ != 0) {
    llvm::consumeError(llvm::orc::deregisterEHFrameSection(reinterpret_cast<const void*>(eh_frame_),
                                                           eh_frame_size_));
  }
  if (memory_ != nullptr) memory_->release(base_, span_);
  memory_ = nullptr;
  base_ = nullptr;
  span_ = 0;
  eh_frame_ = 0;
  eh_frame_size_ = 0;
  exports_.clear();
  functions_.clear();
}

PrelinkedImage::~PrelinkedImage() {
  release();
}

PrelinkedImage::PrelinkedImage(PrelinkedImage&& other) noexcept
    : memory_(std::exchange(other.memory_, nullptr)),
      base_(std::exchange(other.base_, nullptr)),
      span_(std::exchange(other.span_, 0)),
      exports_(std::move(other.exports_)),
      functions_(std::move(other.functions_)),
      eh_frame_(std::exchange(other.eh_frame_, 0)),
      eh_frame_size_(std::exchange(other.eh_frame_size_, 0)) {}

PrelinkedImage& PrelinkedImage::operator=(PrelinkedImage&& other) noexcept {
  if (this != &other) {
    release();
    memory_ = std::exchange(other.memory_, nullptr);
    base_ = std::exchange(other.base_, nullptr);
    span_ = std::exchange(other.span_, 0);
    exports_ = std::move(other.exports_);
    functions_ = std::move(other.functions_);
    eh_frame_ = std::exchange(other.eh_frame_, 0);
    eh_frame_size_ = std::exchange(other.eh_frame_size_, 0);
  }
  return *this;
}

}  // namespace threechains::jit
