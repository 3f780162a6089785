// Pre-linked images (threechains_add_ifunc PRELINKED): linked by ld.lld at
// build time, mapped by the JitCache with no linker. Real images built by
// clang-22 and lld-22; the malformed ones are those images with one field
// broken, as a hostile or damaged container would carry them.
#include "ifuncs/matrix/matrix.h"

#include <threechains/container.hpp>
#include <threechains/error.hpp>
#include <threechains/ifunc.hpp>
#include <threechains/jit_cache.hpp>

#include <catch2/catch.hpp>

#include <elf.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

using namespace threechains;

namespace {

std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  const std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(raw.size());
  std::memcpy(bytes.data(), raw.data(), raw.size());
  return bytes;
}

// This host's pre-linked image of `target` (built beside its container).
std::vector<std::byte> host_image(const std::string& container, const std::string& target) {
  const std::string dir = container.substr(0, container.rfind('/'));
#if defined(__aarch64__)
  const std::string triple = "aarch64-linux-gnu";
#else
  const std::string triple = "x86_64-linux-gnu";
#endif
  return read_file(dir + "/" + target + ".d/" + target + "." + triple + ".prelinked.so");
}

// A container of one image, for this host, as the JitCache receives it.
std::vector<std::byte> container_of(const std::string& name, std::vector<std::byte> image) {
  IfuncLibrary library{name, {{host_triple(), CodecId::binary, std::move(image)}}, {}};
  return pack_container(library);
}

template <class T>
T& at(std::vector<std::byte>& bytes, std::size_t offset) {
  REQUIRE(offset + sizeof(T) <= bytes.size());
  return *reinterpret_cast<T*>(bytes.data() + offset);
}

Elf64_Ehdr& header_of(std::vector<std::byte>& image) {
  return at<Elf64_Ehdr>(image, 0);
}

Elf64_Phdr& segment(std::vector<std::byte>& image, uint32_t type, uint32_t flags) {
  const Elf64_Ehdr& header = header_of(image);
  for (int i = 0; i < header.e_phnum; ++i) {
    auto& phdr = at<Elf64_Phdr>(image, header.e_phoff + i * sizeof(Elf64_Phdr));
    if (phdr.p_type == type && (phdr.p_flags & flags) == flags) return phdr;
  }
  FAIL("no such segment");
  throw std::logic_error("unreachable");
}

Elf64_Shdr& section(std::vector<std::byte>& image, uint32_t type) {
  const Elf64_Ehdr& header = header_of(image);
  for (int i = 0; i < header.e_shnum; ++i) {
    auto& shdr = at<Elf64_Shdr>(image, header.e_shoff + i * sizeof(Elf64_Shdr));
    if (shdr.sh_type == type) return shdr;
  }
  FAIL("no such section");
  throw std::logic_error("unreachable");
}

Elf64_Shdr& section_named(std::vector<std::byte>& image, const std::string& name) {
  const Elf64_Ehdr& header = header_of(image);
  const auto& names =
      at<Elf64_Shdr>(image, header.e_shoff + header.e_shstrndx * sizeof(Elf64_Shdr));
  for (int i = 0; i < header.e_shnum; ++i) {
    auto& shdr = at<Elf64_Shdr>(image, header.e_shoff + i * sizeof(Elf64_Shdr));
    if (reinterpret_cast<const char*>(image.data() + names.sh_offset + shdr.sh_name) == name)
      return shdr;
  }
  FAIL("no section " << name);
  throw std::logic_error("unreachable");
}

// Loads `container`, expecting `code` and a message containing `says`.
void expect_refused(JitCache& cache, const std::vector<std::byte>& container, errc code,
                    const std::string& says) {
  try {
    (void)cache.load(code_identity(container), CodecId::binary, container);
    FAIL("loaded what it should refuse");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.code() == code);
    CHECK_THAT(e.what(), Catch::Contains(says));
  }
}

}  // namespace

TEST_CASE("a pre-linked counter loads with no linker, runs, and is evicted", "[jit][prelinked]") {
  const Ifunc counter = Ifunc::load(TC_COUNTER_PRELINKED);
  REQUIRE(counter.codec() == CodecId::binary);
  JitCache cache;
  const LoadResult loaded = cache.load(counter.id(), counter.codec(), counter.code());
  REQUIRE(loaded.entry != nullptr);
  CHECK(loaded.tier == 0);
  CHECK(loaded.name == "counter");
  uint64_t total = 0;
  uint64_t increment = 5;
  loaded.entry(&increment, sizeof(increment), &total);
  loaded.entry(nullptr, 0, &total);
  CHECK(total == 6);
  // Its exports resolve by name; its instructions are named after its function.
  CHECK(cache.lookup(counter.id(), "counter_main") == reinterpret_cast<void*>(loaded.entry));
  CHECK(cache.lookup(counter.id(), "no_such_symbol") == nullptr);
  std::uintptr_t offset = 1;
  const std::string* name = cache.function_at(reinterpret_cast<const void*>(loaded.entry), offset);
  REQUIRE(name != nullptr);
  CHECK(*name == "counter_main");
  CHECK(offset == 0);
  CHECK(cache.evict(counter.id()));
  CHECK(cache.function_at(reinterpret_cast<const void*>(loaded.entry), offset) == nullptr);
  CHECK(cache.lookup(counter.id(), "counter_main") == nullptr);
  // Loaded again (into the memory it left): runs as before.
  const LoadResult again = cache.load(counter.id(), counter.codec(), counter.code());
  again.entry(&increment, sizeof(increment), &total);
  CHECK(total == 11);
}

TEST_CASE("a pre-linked image's data starts afresh in reused memory", "[jit][prelinked]") {
  // .data, .bss, .rodata and a table of function pointers (RELATIVE
  // relocations): the second load gets the first one's block back, dirty.
  const Ifunc ifunc = Ifunc::load(TC_STATIC_DATA_PRELINKED);
  JitCache cache;
  for (int load = 0; load < 2; ++load) {
    const LoadResult loaded = cache.load(ifunc.id(), ifunc.codec(), ifunc.code());
    matrix_result result{};
    for (int call = 0; call < 3; ++call) loaded.entry(nullptr, 0, &result);
    CHECK(result.values[0] == 42);  // 40, 41, 42
    CHECK(result.values[1] == 3);   // .bss from 0
    CHECK(result.values[2] == 25);
    CHECK(result.values[3] == 30);
    CHECK(std::string(result.text) == "rodata survives");
    CHECK(cache.evict(ifunc.id()));
  }
}

TEST_CASE("a pre-linked image's imports go through the ImportPolicy", "[jit][prelinked]") {
  JitCache cache;
  SECTION("a refused import is named, and nothing runs") {
    const Ifunc evil = Ifunc::load(TC_EVIL_SYSTEM_PRELINKED);
    expect_refused(cache, std::vector<std::byte>(evil.code().begin(), evil.code().end()),
                   errc::import_refused, "'system'");
    CHECK_FALSE(cache.contains(evil.id()));
  }
  SECTION("a missing symbol is named") {
    const Ifunc missing = Ifunc::load(TC_NEEDS_MISSING_SYMBOL_PRELINKED);
    expect_refused(cache, std::vector<std::byte>(missing.code().begin(), missing.code().end()),
                   errc::symbol_not_found, "threechains_test_no_such_function");
  }
  SECTION("native TLS is refused with the way out") {
    const Ifunc tls = Ifunc::load(TC_NATIVE_TLS_PRELINKED);
    expect_refused(cache, std::vector<std::byte>(tls.code().begin(), tls.code().end()),
                   errc::jit_failed, "-femulated-tls");
  }
  // Whatever was refused, the cache keeps loading good code.
  const Ifunc counter = Ifunc::load(TC_COUNTER_PRELINKED);
  uint64_t total = 0;
  cache.load(counter.id(), counter.codec(), counter.code()).entry(nullptr, 0, &total);
  CHECK(total == 1);
}

TEST_CASE("malformed pre-linked images are refused with a clear error", "[jit][prelinked]") {
  std::vector<std::byte> image = host_image(TC_STATIC_DATA_PRELINKED, "test_static_data_prelinked");
  JitCache cache;
  SECTION("truncated") {
    image.resize(image.size() / 2);
    expect_refused(cache, container_of("static_data", image), errc::bad_container,
                   "bad pre-linked image");
  }
  SECTION("a segment whose bytes run past the end of the image") {
    Elf64_Phdr& code = segment(image, PT_LOAD, PF_X);
    code.p_offset = image.size() - code.p_filesz / 2;
    expect_refused(cache, container_of("static_data", image), errc::bad_container,
                   "segment lies outside");
  }
  SECTION("a segment larger than a loader maps") {
    segment(image, PT_LOAD, PF_X).p_memsz = uint64_t{1} << 40;
    expect_refused(cache, container_of("static_data", image), errc::bad_container,
                   "segment lies outside");
  }
  SECTION("a relocation that would write outside the mapping") {
    const Elf64_Shdr& relocations = section(image, SHT_RELA);
    at<Elf64_Rela>(image, relocations.sh_offset).r_offset = uint64_t{1} << 40;
    expect_refused(cache, container_of("static_data", image), errc::bad_container,
                   "relocation outside");
  }
  SECTION("a relocation naming a symbol the table does not have") {
    const Elf64_Shdr& relocations = section(image, SHT_RELA);
    auto& first = at<Elf64_Rela>(image, relocations.sh_offset);
    first.r_info = ELF64_R_INFO(100000, ELF64_R_TYPE(first.r_info));
    expect_refused(cache, container_of("static_data", image), errc::bad_container,
                   "names no symbol");
  }
  SECTION("a relocation type the loader does not apply") {
    const Elf64_Shdr& relocations = section(image, SHT_RELA);
    auto& first = at<Elf64_Rela>(image, relocations.sh_offset);
    first.r_info = ELF64_R_INFO(ELF64_R_SYM(first.r_info), 37);  // IRELATIVE on x86_64
#if defined(__aarch64__)
    first.r_info = ELF64_R_INFO(ELF64_R_SYM(first.r_info), 1032);
#endif
    expect_refused(cache, container_of("static_data", image), errc::jit_failed, "relocation type");
  }
  SECTION("writable code") {
    segment(image, PT_LOAD, PF_X).p_flags |= PF_W;
    expect_refused(cache, container_of("static_data", image), errc::code_refused,
                   "writable and executable");
  }
  SECTION("another machine's image") {
    header_of(image).e_machine = EM_RISCV;
    expect_refused(cache, container_of("static_data", image), errc::bad_container,
                   "for this machine");
  }
  SECTION("an image without the entry point") {
    expect_refused(cache, container_of("other_name", image), errc::symbol_not_found,
                   "no 'other_name_main'");
  }
  SECTION("refused twice under one identity, cleanly") {
    image.resize(image.size() / 2);
    const std::vector<std::byte> broken = container_of("static_data", image);
    expect_refused(cache, broken, errc::bad_container, "bad pre-linked image");
    expect_refused(cache, broken, errc::bad_container, "bad pre-linked image");
    CHECK_FALSE(cache.contains(code_identity(broken)));
  }
  // The cache survives all of it.
  const Ifunc counter = Ifunc::load(TC_COUNTER_PRELINKED);
  uint64_t total = 0;
  cache.load(counter.id(), counter.codec(), counter.code()).entry(nullptr, 0, &total);
  CHECK(total == 1);
}

TEST_CASE("unwind tables the unwinder could not take are refused", "[jit][prelinked]") {
  // libgcc registers a .eh_frame by pointer and walks it by its lengths; one
  // whose first record is the terminator it ignores, and then aborts the
  // process when asked to forget it (found by fuzz_prelinked).
  std::vector<std::byte> image = host_image(TC_MATRIX_CXX_PRELINKED, "test_matrix_cxx_prelinked");
  const Elf64_Shdr& eh_frame = section_named(image, ".eh_frame");
  REQUIRE(eh_frame.sh_size > 8);
  JitCache cache;
  SECTION("the terminator first") {
    at<uint32_t>(image, eh_frame.sh_offset) = 0;
    expect_refused(cache, container_of("cxx", image), errc::jit_failed, "only a terminator");
  }
  SECTION("a record longer than the section") {
    at<uint32_t>(image, eh_frame.sh_offset) = 1u << 20;
    expect_refused(cache, container_of("cxx", image), errc::jit_failed, "running past its end");
  }
  SECTION("no terminator: the first record takes up the whole section") {
    at<uint32_t>(image, eh_frame.sh_offset) = static_cast<uint32_t>(eh_frame.sh_size - 4);
    expect_refused(cache, container_of("cxx", image), errc::jit_failed, "no zero terminator");
  }
  SECTION("an FDE describing code outside the image (the host's, say)") {
    // The first record is the CIE, the FDE follows; its pc_begin
    // (pc-relative, 4 bytes) is 8 bytes in.
    const uint32_t cie_length = at<uint32_t>(image, eh_frame.sh_offset);
    auto& pc_begin = at<int32_t>(image, eh_frame.sh_offset + 4 + cie_length + 8);
    pc_begin += 1 << 24;
    expect_refused(cache, container_of("cxx", image), errc::jit_failed, "describes code outside");
  }
  SECTION("unwind tables moved onto a writable page") {
    Elf64_Shdr& moved = section_named(image, ".eh_frame");
    moved.sh_addr = section_named(image, ".dynamic").sh_addr;
    expect_refused(cache, container_of("cxx", image), errc::bad_container, "writable");
  }
  SECTION("a non-zero byte after the terminator") {
    at<uint32_t>(image, eh_frame.sh_offset + eh_frame.sh_size - 4) = 8;
    expect_refused(cache, container_of("cxx", image), errc::jit_failed, "bytes after");
  }
}

TEST_CASE("a pre-linked C++ ifunc throws and catches inside itself", "[jit][prelinked]") {
  // Its .eh_frame registered with the unwinder while it is loaded.
  const Ifunc cxx = Ifunc::load(TC_MATRIX_CXX_PRELINKED);
  JitCache cache;
  for (int round = 0; round < 2; ++round) {
    const LoadResult loaded = cache.load(cxx.id(), cxx.codec(), cxx.code());
    matrix_result result{};
    loaded.entry(nullptr, 0, &result);
    CHECK(result.values[0] == 100);
    CHECK(result.values[1] == -84);  // thrown, and caught
    CHECK(result.values[2] == 42);
    CHECK(cache.evict(cxx.id()));
  }
}
