// The run-time decisions of compat.hpp.
#include "ucx/compat.hpp"

#include <ucp/api/ucp.h>

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

const char* fence_mode(Version version) noexcept {
  if (version < Version{1, 16, 0}) return nullptr;  // weak unless the user asked otherwise
  return version < Version{1, 19, 0} ? "weak" : "ep_based";
}

}  // namespace threechains::ucx_compat
