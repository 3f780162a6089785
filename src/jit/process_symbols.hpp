// Which loaded object defines a symbol of this process, and whether the
// import policy lets injected code bind it: what the JIT's generators ask
// when they link, and what the host optimiser asks before it writes a call.
#pragma once

#include <threechains/import_policy.hpp>

#include <link.h>

#include <string_view>

namespace threechains {

// The loaded object (link_map) that defines `address`, or nullptr.
[[nodiscard]] const link_map* object_defining(const void* address) noexcept;

// Whether a call to `name`, left to this process to resolve, would bind
// under `policy`: allowed by name, or defined by an object it allows.
[[nodiscard]] bool binds_in_process(const ImportPolicy& policy, std::string_view name);

}  // namespace threechains
