// ImportPolicy: the safe set and the matching rules.
#include <threechains/import_policy.hpp>

#include <algorithm>
#include <array>

namespace threechains {

namespace {

// Symbols of libc and the C++ runtime that compute, allocate, or support
// exceptions, and nothing that reaches the kernel on the caller's behalf.
// (The runtime interface is the library's own, <threechains/runtime.h>.)
constexpr std::array kSafeSymbols = {
    // memory and strings
    "memcpy", "memmove", "memset", "memcmp", "memchr", "memrchr", "bcmp", "bzero", "strlen",
    "strnlen", "strcmp", "strncmp", "strcpy", "strncpy", "strcat", "strncat", "strchr", "strrchr",
    "strstr", "strspn", "strcspn", "strpbrk", "strtok_r", "strtol", "strtoul", "strtoll",
    "strtoull", "strtod", "strtof", "atoi", "atol", "snprintf", "vsnprintf", "qsort", "bsearch",
    "abs", "labs", "llabs",
    // allocation
    "malloc", "calloc", "realloc", "free", "aligned_alloc", "posix_memalign",
    // errno (libm sets it)
    "__errno_location",
    // ThreeChains' runtime interface
    "threechains_rank", "threechains_ranks", "threechains_origin", "threechains_send_self",
    "threechains_send_named", "threechains_lookup",
    // C++: allocation, exceptions, RTTI of thrown types, guarded statics
    "_Znwm", "_Znam", "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm", "_ZnwmSt11align_val_t",
    "_ZdlPvSt11align_val_t", "_ZdlPvmSt11align_val_t", "__cxa_allocate_exception",
    "__cxa_free_exception", "__cxa_throw", "__cxa_begin_catch", "__cxa_end_catch", "__cxa_rethrow",
    "__cxa_get_exception_ptr", "__cxa_pure_virtual", "__cxa_guard_acquire", "__cxa_guard_release",
    "__cxa_guard_abort", "__gxx_personality_v0", "_ZTVN10__cxxabiv117__class_type_infoE",
    "_ZTVN10__cxxabiv120__si_class_type_infoE", "_ZTVN10__cxxabiv121__vmi_class_type_infoE",
    "_ZTISt9exception", "_ZNSt9exceptionD2Ev", "_ZTVSt9exception", "_ZNKSt9exception4whatEv",
    // compiler support the clang-built code may call
    "__stack_chk_fail", "__stack_chk_guard"};

// Whole libraries of pure computation and compiler support.
constexpr std::array kSafeLibraries = {"libm.so.6", "libatomic.so.1", "libgcc_s.so.1"};

std::string_view file_name(std::string_view path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace

ImportPolicy::ImportPolicy() {
  symbols_.assign(kSafeSymbols.begin(), kSafeSymbols.end());
  std::sort(symbols_.begin(), symbols_.end());
  symbols_.erase(std::unique(symbols_.begin(), symbols_.end()), symbols_.end());
  libraries_.assign(kSafeLibraries.begin(), kSafeLibraries.end());
}

ImportPolicy ImportPolicy::unrestricted() {
  ImportPolicy policy;
  policy.unrestricted_ = true;
  return policy;
}

ImportPolicy& ImportPolicy::allow_symbol(std::string name) {
  const auto at = std::lower_bound(symbols_.begin(), symbols_.end(), name);
  if (at == symbols_.end() || *at != name) symbols_.insert(at, std::move(name));
  return *this;
}

ImportPolicy& ImportPolicy::allow_library(std::string library) {
  if (std::find(libraries_.begin(), libraries_.end(), library) == libraries_.end())
    libraries_.push_back(std::move(library));
  return *this;
}

bool ImportPolicy::allows_symbol(std::string_view name) const {
  if (unrestricted_) return true;
  const auto at = std::lower_bound(symbols_.begin(), symbols_.end(), name,
                                   [](const std::string& a, std::string_view b) { return a < b; });
  return at != symbols_.end() && *at == name;
}

bool ImportPolicy::allows_dependency(std::string_view library) const {
  if (unrestricted_) return true;
  // Exact only: "/tmp/x/libm.so.6" is not "libm.so.6".
  return std::find(libraries_.begin(), libraries_.end(), library) != libraries_.end();
}

bool ImportPolicy::allows_object(std::string_view path) const {
  if (unrestricted_) return true;
  for (const std::string& library : libraries_) {
    // A bare soname names the object the loader found for it, wherever it is;
    // a path names that file only.
    const bool bare = library.find('/') == std::string::npos;
    if (bare ? file_name(path) == library : path == library) return true;
  }
  return false;
}

}  // namespace threechains
