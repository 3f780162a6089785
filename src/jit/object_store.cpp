#include "jit/object_store.hpp"

#include <threechains/error.hpp>

#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace threechains {
namespace {

constexpr std::array<char, 8> kMagic = {'T', 'C', 'O', 'B', 'J', '0', '0', '1'};

// The fixed part of an entry; the key and the object follow it.
struct EntryHeader {
  std::array<char, 8> magic;
  uint64_t key_size;
  uint64_t object_size;
  uint64_t object_hash;  // XXH3-64 of the object
};
static_assert(sizeof(EntryHeader) == 32);

}  // namespace

ObjectStore::ObjectStore(std::filesystem::path directory) : directory_(std::move(directory)) {
  std::error_code error;
  if (std::filesystem::create_directories(directory_, error) && !error) {
    std::filesystem::permissions(directory_, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::replace, error);
  }
  struct stat info {};
  if (::stat(directory_.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    throw Error(errc::invalid_argument,
                "code cache directory '" + directory_.string() + "' cannot be created or read");
  }
  if (info.st_uid != ::geteuid() || (info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    throw Error(errc::invalid_argument,
                "code cache directory '" + directory_.string() +
                    "' must be owned by this user and writable by nobody else (chmod go-w): "
                    "what it holds is linked as native code");
  }
}

std::filesystem::path ObjectStore::path_of(const std::string& key) const {
  char name[32];
  std::snprintf(name, sizeof(name), "%016llx.tco",
                static_cast<unsigned long long>(XXH3_64bits(key.data(), key.size())));
  return directory_ / name;
}

std::optional<std::vector<std::byte>> ObjectStore::find(const std::string& key) const {
  std::ifstream in(path_of(key), std::ios::binary);
  if (!in) return std::nullopt;
  EntryHeader header{};
  if (!in.read(reinterpret_cast<char*>(&header), sizeof(header))) return std::nullopt;
  if (header.magic != kMagic || header.key_size != key.size() ||
      header.object_size > (uint64_t{1} << 30)) {
    return std::nullopt;
  }
  std::string stored_key(header.key_size, '\0');
  if (!in.read(stored_key.data(), static_cast<std::streamsize>(stored_key.size())) ||
      stored_key != key) {
    return std::nullopt;
  }
  std::vector<std::byte> object(header.object_size);
  if (!in.read(reinterpret_cast<char*>(object.data()), static_cast<std::streamsize>(object.size())))
    return std::nullopt;
  if (in.peek() != std::ifstream::traits_type::eof()) return std::nullopt;  // trailing bytes
  if (XXH3_64bits(object.data(), object.size()) != header.object_hash) return std::nullopt;
  return object;
}

bool ObjectStore::store(const std::string& key, std::span<const std::byte> object) const noexcept {
  try {
    const std::filesystem::path target = path_of(key);
    const std::filesystem::path temporary =
        target.string() + "." + std::to_string(::getpid()) + ".tmp";
    EntryHeader header{kMagic, key.size(), object.size(),
                       XXH3_64bits(object.data(), object.size())};
    {
      std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(&header), sizeof(header));
      out.write(key.data(), static_cast<std::streamsize>(key.size()));
      out.write(reinterpret_cast<const char*>(object.data()),
                static_cast<std::streamsize>(object.size()));
      if (!out.flush()) {
        std::error_code ignored;
        std::filesystem::remove(temporary, ignored);
        return false;
      }
    }
    std::error_code error;
    std::filesystem::rename(temporary, target, error);
    if (error) {
      std::error_code ignored;
      std::filesystem::remove(temporary, ignored);
      return false;
    }
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace threechains
