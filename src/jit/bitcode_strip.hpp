// Internal: shrinks a bitcode image before it ships. A module that is only
// ever JIT-compiled needs neither the LTO symbol table nor the producer's
// ident. The per-function CPU attributes stay: the target needs them to tell
// which functions it may retarget to its own CPU (src/jit/host_optimiser.cpp).
#pragma once

#include <cstddef>
#include <vector>

namespace threechains {

// Returns the stripped module, or throws errc::bad_container if it is not bitcode.
[[nodiscard]] std::vector<std::byte> strip_bitcode(const std::vector<std::byte>& bitcode);

}  // namespace threechains
