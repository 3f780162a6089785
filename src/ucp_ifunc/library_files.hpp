// The files of a ucp_ifunc library directory: which one is an ifunc's, and
// how it becomes code. Our own container (<name>.tcc, threechains-build) is
// read as it is; the research prototypes' own artefact, LLVM bitcode for
// this host (<name>.bc, their Makefiles' `clang -c -emit-llvm`), is packed
// here into a container of one image, so a program's libraries work as the
// prototypes' build left them. Their shared objects (<name>.so) are never
// loaded: dlopen runs a library's constructors with the process's rights
// before any check, and its code never passes the import policy.
#pragma once

#include <threechains/ifunc.hpp>

#include <string>

namespace threechains::ucp_ifunc {

// The ifunc `name` (letters, digits, '_' and '-' only, checked by the caller)
// of `directory`: <name>.tcc, else <name>.bc. Throws Error: errc::io naming
// the paths looked at (and what to do with a <name>.so found instead),
// errc::bad_container for a file that does not read as one.
[[nodiscard]] Ifunc load_library_file(const std::string& directory, const std::string& name);

}  // namespace threechains::ucp_ifunc
