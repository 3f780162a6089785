// What exposure.hpp says.
#include "confine/exposure.hpp"

#include <threechains/error.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace threechains::confined {

ExposureArena::ExposureArena() {
  fd_ = memfd_create("threechains-exposed", MFD_CLOEXEC);
  if (fd_ < 0) {
    throw Error(
        errc::limit_exceeded,
        std::string("cannot create memory to expose to window code: ") + std::strerror(errno));
  }
}

ExposureArena::~ExposureArena() {
  if (fd_ >= 0) (void)close(fd_);
}

std::span<std::byte> ExposureArena::allocate(std::size_t bytes, bool writable) {
  const std::size_t page = page_size();
  const std::size_t rounded = bytes == 0 ? page : (bytes + page - 1) / page * page;
  constexpr uint64_t kRoom = Window::kSize - Window::kShared;
  if (rounded < bytes || rounded > kRoom - size_) {
    throw Error(errc::limit_exceeded,
                "memory exposed to window code: " + std::to_string(kRoom - size_) +
                    " bytes left, not the " + std::to_string(bytes) + " asked for");
  }
  const uint64_t offset = size_;
  if (ftruncate(fd_, static_cast<off_t>(offset + rounded)) != 0) {
    throw Error(errc::limit_exceeded, "cannot grow the memory exposed to window code to " +
                                          std::to_string(offset + rounded) +
                                          " bytes: " + std::strerror(errno));
  }
  // The host writes every piece; windows get what `writable` says. A
  // failure part way leaves the piece unused (not handed out, `size_`
  // unchanged): the next allocation maps over the same offset.
  host_view_.map_shared(fd_, offset, Window::kShared + offset, rounded, true);
  for (Window* window : windows_)
    window->map_shared(fd_, offset, Window::kShared + offset, rounded, writable);
  size_ = offset + rounded;
  pieces_.push_back({offset, rounded, writable});
  return {host_view_.base() + Window::kShared + offset, bytes};
}

void ExposureArena::attach(Window& window) {
  for (const Piece& piece : pieces_)
    window.map_shared(fd_, piece.offset, Window::kShared + piece.offset, piece.bytes,
                      piece.writable);
  // Once: a window renewed in place (JitCache) is attached again.
  if (std::find(windows_.begin(), windows_.end(), &window) == windows_.end())
    windows_.push_back(&window);
}

}  // namespace threechains::confined
