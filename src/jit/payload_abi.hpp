// Internal (used by the prototype-compatible API, src/ucp_ifunc/): which
// argument order an ifunc library's <name>_payload_init takes, read off the
// function's type in the container's bitcode. The two research prototypes
// disagree, and a call in the wrong order writes the payload over the
// caller's source arguments:
//   Two-Chains:   int f(void* payload, size_t payload_size,
//                       void* source_args, size_t source_args_size);
//   Three-Chains: int f(void* source_args, size_t source_args_size,
//                       void* payload, size_t* payload_size);
// (ThreeChains' own <threechains/ifunc.h> takes the Three-Chains order.)
// The fourth parameter tells them apart: an integer or a pointer.
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace threechains {

enum class PayloadInitOrder {
  unknown,        // no bitcode image, or no such function with four parameters
  payload_first,  // Two-Chains
  source_first,   // Three-Chains and <threechains/ifunc.h>
};

// Reads this host's bitcode image of `container` first, then the others;
// unknown where none says. Throws Error(bad_container) only if the container
// itself cannot be parsed (call it on the program's own libraries).
[[nodiscard]] PayloadInitOrder payload_init_order(std::span<const std::byte> container,
                                                  const std::string& function);

}  // namespace threechains
