#include "jit/process_symbols.hpp"

#include <dlfcn.h>

#include <string>

namespace threechains {

const link_map* object_defining(const void* address) noexcept {
  Dl_info info;
  void* map = nullptr;
  if (address == nullptr || dladdr1(address, &info, &map, RTLD_DL_LINKMAP) == 0) return nullptr;
  return static_cast<const link_map*>(map);
}

bool binds_in_process(const ImportPolicy& policy, std::string_view name) {
  if (policy.allows_symbol(name)) return true;
  const std::string symbol(name);
  const link_map* object = object_defining(dlsym(RTLD_DEFAULT, symbol.c_str()));
  return object != nullptr && policy.allows_object(object->l_name);
}

}  // namespace threechains
