// ObjectStore: the JIT's objects on disk (JitOptions::code_cache_directory), so
// a restarted target links what it compiled before instead of compiling again.
//
// An entry is keyed by everything that decides the object's bytes: the code
// identity, the image's triple, this host's triple, CPU name and features, the
// LLVM version, both optimisation levels and whether the import policy is
// restricted (an unrestricted target may compile inline assembly a restricted
// one refuses). The key is stored in the entry and compared in full, and the
// object carries its XXH3 hash: a corrupt, truncated or foreign entry (another
// CPU, another LLVM, a hash collision of file names) is ignored and replaced.
//
// What an entry holds is native code linked without the container's signature
// being checked again, so the directory must be private: owned by this user
// and writable by nobody else, or the store refuses it. It is opened once,
// never through a symbolic link, and entries are opened relative to it
// (openat, O_NOFOLLOW), each checked to be a regular file of this user's
// before it is read. The directories above it are not checked: put it where
// only this user can replace it.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace threechains {

class ObjectStore {
 public:
  // Creates `directory` (mode 0700) if it does not exist. Throws Error
  // (invalid_argument) if it cannot be used or is not private.
  explicit ObjectStore(std::filesystem::path directory);
  ~ObjectStore();
  ObjectStore(const ObjectStore&) = delete;
  ObjectStore& operator=(const ObjectStore&) = delete;

  // The object stored under `key`, or nothing (absent, corrupt or foreign).
  [[nodiscard]] std::optional<std::vector<std::byte>> find(const std::string& key) const;

  // Stores `object` under `key` (write to a temporary, then rename: readers
  // never see half an entry). Returns false if it could not be written; the
  // store is a cache, so a failed write loses nothing but time.
  bool store(const std::string& key, std::span<const std::byte> object) const noexcept;

 private:
  [[nodiscard]] static std::string name_of(const std::string& key);

  std::filesystem::path directory_;
  int dir_fd_ = -1;  // the directory, opened and checked once
};

}  // namespace threechains
