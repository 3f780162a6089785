// Code identity: a content hash, so new code under an old name is new code.
#include <threechains/container.hpp>

#include <xxhash.h>

namespace threechains {

CodeId code_identity(std::span<const std::byte> code) noexcept {
  return XXH3_64bits(code.data(), code.size());
}

}  // namespace threechains
