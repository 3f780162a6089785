// Internal: where this library's helper programs are (the GPU worker, the
// compile worker): `$<variable>` if set, else beside the library (a build
// tree), else in <prefix>/libexec/threechains (an installation). Empty if
// none is found.
#pragma once

#include <string>

namespace threechains {

[[nodiscard]] std::string find_helper_program(const char* name, const char* variable);

}  // namespace threechains
