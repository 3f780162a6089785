// The code cache on disk (JitOptions::code_cache_directory), as an attacker
// who can write there, or a compromised compile worker, would change it.
#pragma once

#include <xxhash.h>

#include <catch2/catch.hpp>

#include <elf.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace threechains::test {

// A file's bytes, whole.
inline std::string read_whole_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The one window-tier entry of `directory`, read whole. An entry is:
// magic, key size, object size, the object's XXH3 (8 bytes each); the
// key; the object.
struct StoredWindowEntry {
  std::filesystem::path path;
  std::string bytes;
  uint64_t key_size = 0;
  [[nodiscard]] std::span<char> object() { return std::span<char>(bytes).subspan(32 + key_size); }
};

inline StoredWindowEntry read_stored_window_entry(const std::filesystem::path& directory) {
  std::vector<std::filesystem::path> entries;
  for (const auto& entry : std::filesystem::directory_iterator(directory))
    entries.push_back(entry.path());
  REQUIRE(entries.size() == 1);
  StoredWindowEntry entry{entries[0], read_whole_file(entries[0])};
  REQUIRE(entry.bytes.size() > 32);
  uint64_t object_size = 0;
  std::memcpy(&entry.key_size, entry.bytes.data() + 8, 8);
  std::memcpy(&object_size, entry.bytes.data() + 16, 8);
  REQUIRE(32 + entry.key_size + object_size == entry.bytes.size());
  CHECK(entry.bytes.substr(32, entry.key_size).find("window tier") != std::string::npos);
  return entry;
}

// Writes `entry` back holding `object` (its own, changed, or another),
// the entry's object size and hash made to match.
inline void write_stored_window_entry(StoredWindowEntry& entry, std::span<const char> object) {
  std::string bytes = entry.bytes.substr(0, 32 + entry.key_size);
  bytes.append(object.data(), object.size());
  const uint64_t object_size = object.size();
  const uint64_t hash = XXH3_64bits(object.data(), object.size());
  std::memcpy(bytes.data() + 16, &object_size, 8);
  std::memcpy(bytes.data() + 24, &hash, 8);
  std::ofstream out(entry.path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The one window-tier entry of `directory` with `change` applied to its
// object in place.
template <class Change>
void rewrite_stored_window_object(const std::filesystem::path& directory, Change&& change) {
  StoredWindowEntry entry = read_stored_window_entry(directory);
  const std::span<char> object = entry.object();
  change(object);
  write_stored_window_entry(entry, object);
}

// The one window-tier entry of `directory` holding `object` instead of its
// own.
inline void replace_stored_window_object(const std::filesystem::path& directory,
                                         std::span<const char> object) {
  StoredWindowEntry entry = read_stored_window_entry(directory);
  write_stored_window_entry(entry, object);
}

// The same, `change` applied to the object's .text (found by the section
// headers: data, a table of constants, may hold the same bytes).
template <class Change>
void rewrite_stored_window_text(const std::filesystem::path& directory, Change&& change) {
  rewrite_stored_window_object(directory, [&](std::span<char> bytes) {
    char* const object = bytes.data();
    const uint64_t object_size = bytes.size();
    REQUIRE(object_size >= sizeof(Elf64_Ehdr));
    Elf64_Ehdr header;
    std::memcpy(&header, object, sizeof(header));
    REQUIRE(header.e_shoff + uint64_t{header.e_shnum} * sizeof(Elf64_Shdr) <= object_size);
    const auto section = [&](unsigned k) {
      Elf64_Shdr s;
      std::memcpy(&s, object + header.e_shoff + k * sizeof(Elf64_Shdr), sizeof(s));
      return s;
    };
    REQUIRE(header.e_shstrndx < header.e_shnum);
    const Elf64_Shdr names = section(header.e_shstrndx);
    REQUIRE(names.sh_offset + names.sh_size <= object_size);
    uint64_t text_begin = 0;
    uint64_t text_end = 0;
    for (unsigned k = 0; k < header.e_shnum; ++k) {
      const Elf64_Shdr s = section(k);
      REQUIRE(s.sh_name < names.sh_size);
      const char* const name = object + names.sh_offset + s.sh_name;
      if (std::string_view(name, strnlen(name, names.sh_size - s.sh_name)) == ".text") {
        text_begin = s.sh_offset;
        text_end = s.sh_offset + s.sh_size;
      }
    }
    REQUIRE(text_end > text_begin);
    REQUIRE(text_end <= object_size);
    change(std::span<char>(object + text_begin, text_end - text_begin));
  });
}

// In the one window-tier entry of `directory`: every occurrence of `from`
// in the object (its symbol names) becomes `to`, as long.
inline void rename_in_stored_window_object(const std::filesystem::path& directory,
                                           std::string_view from, std::string_view to) {
  REQUIRE(from.size() == to.size());
  rewrite_stored_window_object(directory, [&](std::span<char> object) {
    std::string_view all(object.data(), object.size());
    int renamed = 0;
    for (std::size_t at = all.find(from); at != std::string_view::npos; at = all.find(from, at)) {
      std::memcpy(object.data() + at, to.data(), to.size());
      ++renamed;
    }
    REQUIRE(renamed > 0);
  });
}

// x86-64 only. In the one window-tier entry of `directory`: the first %gs-prefixed
// instruction with a 64-bit operand (65 48..4f) or 32-bit addressing (65 67:
// the mask folded into the access) in the object's .text gets %ds instead,
// so its access goes to the address itself, in the target.
inline void tamper_stored_window_gs_access(const std::filesystem::path& directory) {
  rewrite_stored_window_text(directory, [](std::span<char> text) {
    const auto gs_access = [&](std::size_t k) {
      const auto next = static_cast<unsigned char>(text[k + 1]);
      return static_cast<unsigned char>(text[k]) == 0x65 && ((next & 0xf8) == 0x48 || next == 0x67);
    };
    std::size_t at = 0;
    while (at + 1 < text.size() && !gs_access(at)) ++at;
    REQUIRE(at + 1 < text.size());
    text[at] = 0x3e;  // %ds
  });
}

}  // namespace threechains::test
