// The run-time decisions of compat.hpp.
#include "ucx/compat.hpp"

#include <ucp/api/ucp.h>
#include <uct/api/uct.h>

namespace threechains::ucx_compat {

std::string Version::text() const {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

Version running() noexcept {
  unsigned major = 0;
  unsigned minor = 0;
  unsigned release = 0;
  ucp_get_version(&major, &minor, &release);
  return {major, minor, release};
}

const char* tcp_put_enable_key(Version version) noexcept {
  return version < Version{1, 17, 0} ? "PUT_ENABLE" : "TCP_PUT_ENABLE";
}

bool has_component(std::string_view name) noexcept {
  uct_component_h* components = nullptr;
  unsigned count = 0;
  if (uct_query_components(&components, &count) != UCS_OK) return false;
  bool found = false;
  for (unsigned i = 0; i < count && !found; ++i) {
    uct_component_attr_t attr{};
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
    found = uct_component_query(components[i], &attr) == UCS_OK && name == attr.name;
  }
  uct_release_component_list(components);
  return found;
}

const char* fence_mode(Version version) noexcept {
  if (version < Version{1, 16, 0}) return nullptr;  // weak unless the user asked otherwise
  return version < Version{1, 19, 0} ? "weak" : "ep_based";
}

}  // namespace threechains::ucx_compat
