// Internal: writes all of a buffer to a file descriptor, or says it could not.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace threechains::detail {

// False if the whole of `data` could not be written: errno says why (EIO
// where write(2) stopped making progress without one). Retries EINTR.
[[nodiscard]] inline bool write_exactly(int fd, const void* data, std::size_t size) noexcept {
  const auto* at = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, at, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    at += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace threechains::detail
