// Internal: what a jump that abandons frames must tell a sanitizer. Which
// build this is can only be asked of the preprocessor.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define THREECHAINS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define THREECHAINS_ASAN 1
#endif
#endif
#ifdef THREECHAINS_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace threechains::detail {

// Call right before __builtin_longjmp. ASan's interceptor of longjmp forgets
// the poisoned stack of the frames a jump abandons; the builtin bypasses it,
// and those frames' poison would then stay for whatever uses the stack next.
// (ThreadSanitizer's interceptors are bypassed too, and it has no such call:
// code that jumps this way is kept out of the TSan suite, CMakePresets.json.
// That is why the confined runtime's own trap, confine/runtime.cpp, which
// TSan's tests do reach, keeps setjmp: the builtin saved it no measurable
// time there, 17.5-26.9 ns a call before and 20.2-22.2 after, one A/B.)
inline void before_abandoning_frames() noexcept {
#ifdef THREECHAINS_ASAN
  __asan_handle_no_return();
#endif
}

}  // namespace threechains::detail
