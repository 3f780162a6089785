// Which sanitizer this test was built with, for the tests whose figures or
// limits a sanitizer changes (its shadow memory, its quarantine, its
// slower code). Only the preprocessor can say; gcc and clang say it apart.
#pragma once

namespace threechains::test {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitized = true;
#else
inline constexpr bool kAddressSanitized = false;
#endif
#else
inline constexpr bool kAddressSanitized = false;
#endif

#if defined(__SANITIZE_THREAD__)
inline constexpr bool kThreadSanitized = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kThreadSanitized = true;
#else
inline constexpr bool kThreadSanitized = false;
#endif
#else
inline constexpr bool kThreadSanitized = false;
#endif

inline constexpr bool kSanitized = kAddressSanitized || kThreadSanitized;

}  // namespace threechains::test
