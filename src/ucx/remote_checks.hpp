// The checks a peer's packed rkey and the pointer UCX maps it to must pass
// (remote_checks.cpp says why each): RemoteBuffer's constructor runs them;
// tests call them directly.
#pragma once

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace threechains {
namespace detail {
// Padding after a checked rkey's copy: more than any one transport's blob
// (its size is a byte) can make UCX read past it. Its first bytes are 0xff
// (an "unknown device", which ends UCX 1.20's distance list wherever a
// record starts), the rest zeros (which end any string).
inline constexpr std::size_t kRkeyPadding = 512;
inline constexpr std::size_t kRkeyTerminators = 8;
// A copy of a peer's packed rkey that UCX can unpack without reading past
// it: its memory domains as they came, then our own tail (the memory's
// device unknown, padding). Throws errc::protocol if its framing does not
// fit its bytes, or if it says the memory is not plain host memory.
[[nodiscard]] std::vector<std::byte> checked_packed_rkey(std::span<const std::byte> packed);
// This process's shared, writable mappings ([low, high)), read from the text
// of /proc/self/maps, and whether [start, start + size) lies in one that is
// not among `before`: the segment an rkey unpack just attached. How
// unpack_rkey checks on kernels without PROCMAP_QUERY (before 6.11).
struct SharedMapping {
  uintptr_t low;
  uintptr_t high;
};
[[nodiscard]] std::vector<SharedMapping> shared_mappings();
[[nodiscard]] bool in_new_shared_mapping(std::span<const SharedMapping> before, const void* start,
                                         std::size_t size);
// The shared, writable mapping that holds `address`, looked up by address
// (PROCMAP_QUERY, as unpack_rkey does); nullopt when none, or when the
// kernel has no PROCMAP_QUERY.
[[nodiscard]] std::optional<SharedMapping> shared_mapping_at(const void* address);
// Where a checked rkey's memory is, once unpacked into *rkey (which the
// caller owns, and destroys, whatever this returns or throws): `pointer` to
// [address, address + size) when UCX maps it here and the range lies in the
// segment the rkey names; `outside` when UCX maps it here but the range does
// not (RemoteBuffer::outside_its_segment); neither when every access must go
// through UCX (tcp, RDMA).
struct DirectRange {
  void* pointer = nullptr;
  bool outside = false;
};
[[nodiscard]] DirectRange unpack_rkey(ucp_ep_h endpoint, std::span<const std::byte> checked,
                                      uint64_t address, std::size_t size, ucp_rkey_h* rkey);
// Tests: check as on a kernel without PROCMAP_QUERY (the before/after list).
void check_rkeys_from_text_for_testing(bool on) noexcept;
}  // namespace detail

}  // namespace threechains
