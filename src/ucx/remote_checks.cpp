// What a peer's rkey must pass before we use it (memory.hpp: RemoteBuffer).
//
// 1. The packed rkey, before UCX parses it.
//
// UCX 1.13's ucp_ep_rkey_unpack takes no length: it walks the md map and the
// per-transport blobs as the bytes say (src/ucp/core/ucp_rkey.c), and each
// transport's unpack reads its own fixed struct, posix a NUL-terminated path
// after it (src/uct/sm/mm/posix/mm_posix.c). So a short or lying blob reads
// past the buffer. Here: the framing must fit the bytes we were given
// (u64 md map, u8 memory type, then per md a u8 size and that many bytes),
// the memory must be host memory, and UCX gets a copy followed by zeros, so
// whatever a transport reads past its blob is ours and ends any string.
//
// 2. A direct pointer, before we store through it. Over shared memory UCX
// turns (rkey, remote address) into a local pointer by adding an offset and
// checks no bounds (uct_mm_rkey_ptr), so a peer that names an address outside
// the segment it registered points us at our own heap, or at another peer's
// ring. The range must lie in the one shared mapping that unpacking this
// rkey attached (a mapping of this process that was not there before: UCX
// 1.13 attaches a segment afresh on every unpack, shmat or mmap).
#include <threechains/ucx/memory.hpp>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <fstream>
#include <string>

namespace threechains::detail {

std::vector<std::byte> checked_packed_rkey(std::span<const std::byte> packed) {
  const auto refuse = [&](const std::string& why) {
    return Error(errc::protocol, "a packed rkey of " + std::to_string(packed.size()) +
                                     " bytes refused before UCX saw it: " + why);
  };
  uint64_t md_map = 0;
  if (packed.size() < sizeof(md_map) + 1) throw refuse("shorter than its header");
  std::memcpy(&md_map, packed.data(), sizeof(md_map));
  if (md_map == 0) throw refuse("it names no memory domain");
  const auto memory_type = static_cast<uint8_t>(packed[sizeof(md_map)]);
  if (memory_type != UCS_MEMORY_TYPE_HOST) throw refuse("not host memory");
  std::size_t at = sizeof(md_map) + 1;
  for (int domains = std::popcount(md_map); domains > 0; --domains) {
    if (at >= packed.size()) throw refuse("its memory domains run past its end");
    at += 1 + static_cast<std::size_t>(packed[at]);
    if (at > packed.size()) throw refuse("its memory domains run past its end");
  }
  std::vector<std::byte> copy(packed.size() + kRkeyPadding, std::byte{0});
  std::memcpy(copy.data(), packed.data(), packed.size());
  return copy;
}

std::vector<SharedMapping> shared_mappings() {
  std::vector<SharedMapping> mappings;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long low = 0, high = 0;
    char permissions[5] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %4s", &low, &high, permissions) != 3) continue;
    if (permissions[0] == 'r' && permissions[1] == 'w' && permissions[3] == 's')
      mappings.push_back({low, high});
  }
  return mappings;
}

bool in_new_shared_mapping(std::span<const SharedMapping> before, const void* start,
                           std::size_t size) {
  const auto first = reinterpret_cast<uintptr_t>(start);
  if (size == 0 || first + size < first) return false;
  for (const SharedMapping& now : shared_mappings()) {
    if (first < now.low || first >= now.high) continue;
    // The mapping that holds the start must hold the end, and must be the
    // one this unpack attached: not there before it.
    const bool existed = std::any_of(before.begin(), before.end(), [&](const SharedMapping& m) {
      return m.low == now.low && m.high == now.high;
    });
    return first + size <= now.high && !existed;
  }
  return false;
}

}  // namespace threechains::detail
