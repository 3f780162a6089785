// ImportPolicy: what injected code may link against on a target. Checked at
// link time, before any of the ifunc's code runs, for both codecs: an external
// symbol resolves only if the policy allows it by name, or if it is defined by
// a library the policy allows; a dependency library loads only if allowed.
//
// The default is a documented safe set (docs/security.md): memory and string
// functions, allocation, everything libm, libatomic and libgcc_s define,
// ThreeChains' runtime interface (<threechains/runtime.h>) and the C++
// runtime's exception support. Anything else — system, execve, fork, dlopen,
// mprotect, syscall, ptrace, printf, ... — is refused, naming the symbol.
//
// This stops imports by name. It is not a sandbox: a relocatable object can
// issue a system call in its own instructions, and any code can forge a
// pointer. Binary code is only as trustworthy as its signature (Trust).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace threechains {

class ImportPolicy {
 public:
  // The safe set.
  ImportPolicy();

  // DEVELOPMENT ONLY: anything this process can resolve, any library, inline
  // assembly. Named so that a reviewer notices it.
  [[nodiscard]] static ImportPolicy unrestricted();

  // A symbol of this process (a libc function, a global of the application
  // built with -rdynamic / ENABLE_EXPORTS) that injected code may use.
  ImportPolicy& allow_symbol(std::string name);
  // A library injected code may name as a dependency, and whose symbols it may
  // use: a bare soname ("libomp.so.5", found by the loader's search) or an
  // absolute path, matched exactly (a path is never matched by its file name).
  ImportPolicy& allow_library(std::string library);

  [[nodiscard]] bool is_unrestricted() const noexcept { return unrestricted_; }
  [[nodiscard]] bool allows_symbol(std::string_view name) const;
  // Whether a container may load `library` (as it names it) as a dependency.
  [[nodiscard]] bool allows_dependency(std::string_view library) const;
  // Whether symbols defined by the loaded object at `path` (the loader's name
  // for it, as dladdr gives it) may be used.
  [[nodiscard]] bool allows_object(std::string_view path) const;

 private:
  bool unrestricted_ = false;
  std::vector<std::string> symbols_;  // sorted, unique: looked up at link time only
  std::vector<std::string> libraries_;
};

}  // namespace threechains
