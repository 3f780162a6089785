// Internal: shrinks a bitcode image before it ships. The target drops the
// per-function CPU pinning anyway (it compiles for its own CPU), and a module
// that is only ever JIT-compiled needs neither the LTO symbol table nor the
// producer's ident.
#pragma once

#include <cstddef>
#include <vector>

namespace threechains {

// Returns the stripped module, or throws errc::bad_container if it is not bitcode.
[[nodiscard]] std::vector<std::byte> strip_bitcode(const std::vector<std::byte>& bitcode);

}  // namespace threechains
