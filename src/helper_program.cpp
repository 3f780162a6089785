// What helper_program.hpp says.
#include "helper_program.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

namespace threechains {

std::string find_helper_program(const char* name, const char* variable) {
  if (const char* named = std::getenv(variable)) return named;
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&find_helper_program), &self) == 0 ||
      self.dli_fname == nullptr)
    return {};
  const std::filesystem::path library_dir = std::filesystem::path(self.dli_fname).parent_path();
  for (const std::filesystem::path& candidate :
       {library_dir / name, library_dir.parent_path() / "libexec" / "threechains" / name}) {
    if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return {};
}

}  // namespace threechains
