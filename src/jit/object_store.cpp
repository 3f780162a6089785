#include "jit/object_store.hpp"

#include "write_exactly.hpp"

#include <threechains/error.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace threechains {
namespace {

constexpr std::array<char, 8> kMagic = {'T', 'C', 'O', 'B', 'J', '0', '0', '1'};
constexpr uint64_t kMaxObject = uint64_t{256} << 20;

// The fixed part of an entry; the key and the object follow it.
struct EntryHeader {
  std::array<char, 8> magic;
  uint64_t key_size;
  uint64_t object_size;
  uint64_t object_hash;  // XXH3-64 of the object
};
static_assert(sizeof(EntryHeader) == 32);

// A file descriptor that closes itself.
class Descriptor {
 public:
  explicit Descriptor(int fd) noexcept : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  [[nodiscard]] int get() const noexcept { return fd_; }

 private:
  int fd_;
};

bool read_exactly(int fd, void* out, std::size_t size) {
  auto* at = static_cast<char*>(out);
  while (size > 0) {
    const ssize_t n = ::read(fd, at, size);
    if (n <= 0) return false;
    at += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

ObjectStore::ObjectStore(std::filesystem::path directory) : directory_(std::move(directory)) {
  if (::mkdir(directory_.c_str(), 0700) != 0 && errno != EEXIST) {
    throw Error(errc::invalid_argument, "code cache directory '" + directory_.string() +
                                            "' cannot be created: " + std::strerror(errno));
  }
  // Opened once, not following a symbolic link, and used for every entry from
  // then on (openat, renameat): what was checked is what is used, whatever
  // happens to the path later.
  dir_fd_ = ::open(directory_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir_fd_ < 0) {
    throw Error(errc::invalid_argument,
                "code cache directory '" + directory_.string() +
                    "' cannot be opened (it must be a directory, not a symbolic link): " +
                    std::strerror(errno));
  }
  struct stat info {};
  if (::fstat(dir_fd_, &info) != 0 || info.st_uid != ::geteuid() ||
      (info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    ::close(dir_fd_);
    dir_fd_ = -1;
    throw Error(errc::invalid_argument,
                "code cache directory '" + directory_.string() +
                    "' must be owned by this user and writable by nobody else (chmod go-w): "
                    "what it holds is linked as native code");
  }
}

ObjectStore::~ObjectStore() {
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

std::string ObjectStore::name_of(const std::string& key) {
  char name[32];
  std::snprintf(name, sizeof(name), "%016llx.tco",
                static_cast<unsigned long long>(XXH3_64bits(key.data(), key.size())));
  return name;
}

std::optional<std::vector<std::byte>> ObjectStore::find(const std::string& key) const {
  const Descriptor file(::openat(dir_fd_, name_of(key).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (file.get() < 0) return std::nullopt;
  // Ours, a regular file, and of a size its header can agree with: checked
  // before anything is allocated from what the file says.
  struct stat info {};
  if (::fstat(file.get(), &info) != 0 || !S_ISREG(info.st_mode) || info.st_uid != ::geteuid() ||
      (info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return std::nullopt;
  }
  EntryHeader header{};
  if (!read_exactly(file.get(), &header, sizeof(header))) return std::nullopt;
  if (header.magic != kMagic || header.key_size != key.size() || header.object_size > kMaxObject ||
      sizeof(header) + header.key_size + header.object_size !=
          static_cast<uint64_t>(info.st_size)) {
    return std::nullopt;
  }
  std::string stored_key(header.key_size, '\0');
  if (!read_exactly(file.get(), stored_key.data(), stored_key.size()) || stored_key != key)
    return std::nullopt;
  std::vector<std::byte> object(header.object_size);
  if (!read_exactly(file.get(), object.data(), object.size())) return std::nullopt;
  if (XXH3_64bits(object.data(), object.size()) != header.object_hash) return std::nullopt;
  return object;
}

bool ObjectStore::store(const std::string& key, std::span<const std::byte> object) const noexcept {
  try {
    static std::atomic<uint64_t> counter{0};
    const std::string target = name_of(key);
    // Unique per process and call (several JitCaches may share a directory):
    // created exclusively, so nobody else's file is ever written through.
    const std::string temporary = target + "." + std::to_string(::getpid()) + "." +
                                  std::to_string(counter.fetch_add(1)) + ".tmp";
    const EntryHeader header{kMagic, key.size(), object.size(),
                             XXH3_64bits(object.data(), object.size())};
    bool written = false;
    {
      const Descriptor file(::openat(dir_fd_, temporary.c_str(),
                                     O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
      if (file.get() < 0) return false;
      written = detail::write_exactly(file.get(), &header, sizeof(header)) &&
                detail::write_exactly(file.get(), key.data(), key.size()) &&
                detail::write_exactly(file.get(), object.data(), object.size());
    }
    if (written && ::renameat(dir_fd_, temporary.c_str(), dir_fd_, target.c_str()) == 0)
      return true;
    (void)::unlinkat(dir_fd_, temporary.c_str(), 0);
    return false;
  } catch (...) {
    return false;
  }
}

}  // namespace threechains
