// MemoryRegion: memory that UCX allocated and registered (UCP_MEM_MAP_ALLOCATE),
// so a peer's put into it over shared memory is a direct store the owner sees
// without progressing. RemoteBuffer: a peer's region as seen through one
// Endpoint (an rkey is unpacked per endpoint, so it belongs to that Endpoint).
#pragma once

#include <threechains/error.hpp>
#include <threechains/ucx/context.hpp>
#include <threechains/ucx/endpoint.hpp>

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace threechains {

class MemoryRegion {
 public:
  // Allocates and registers `size` bytes, zero-filled.
  MemoryRegion(Context context, std::size_t size)
      : state_(std::make_shared<State>(std::move(context))) {
    ucp_mem_map_params_t params{};
    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    params.length = size;
    params.flags = UCP_MEM_MAP_ALLOCATE;
    check(ucp_mem_map(state_->context.handle(), &params, &state_->handle), "ucp_mem_map");
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    check(ucp_mem_query(state_->handle, &attr), "ucp_mem_query");
    state_->data = static_cast<std::byte*>(attr.address);
    state_->size = size;
    std::memset(state_->data, 0, size);
  }

  [[nodiscard]] std::byte* data() const noexcept { return state_->data; }
  [[nodiscard]] std::size_t size() const noexcept { return state_->size; }
  [[nodiscard]] uint64_t address() const noexcept {
    return reinterpret_cast<uint64_t>(state_->data);
  }
  [[nodiscard]] ucp_mem_h handle() const noexcept { return state_->handle; }

  // The remote key a peer unpacks to reach this region.
  [[nodiscard]] std::vector<std::byte> pack_rkey() const {
    void* buffer = nullptr;
    std::size_t length = 0;
    check(ucp_rkey_pack(state_->context.handle(), state_->handle, &buffer, &length),
          "ucp_rkey_pack");
    std::vector<std::byte> packed(static_cast<std::byte*>(buffer),
                                  static_cast<std::byte*>(buffer) + length);
    ucp_rkey_buffer_release(buffer);
    return packed;
  }

 private:
  struct State {
    explicit State(Context c) : context(std::move(c)) {}
    State(const State&) = delete;
    State& operator=(const State&) = delete;
    ~State() {
      if (handle != nullptr) ucp_mem_unmap(context.handle(), handle);
    }
    Context context;
    ucp_mem_h handle = nullptr;
    std::byte* data = nullptr;
    std::size_t size = 0;
  };
  std::shared_ptr<State> state_;
};

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

class RemoteBuffer {
 public:
  // `packed_rkey` came from the peer: checked before UCX parses it.
  RemoteBuffer(Endpoint endpoint, uint64_t address, std::size_t size,
               std::span<const std::byte> packed_rkey)
      : state_(std::make_shared<State>(std::move(endpoint), address, size)) {
    const std::vector<std::byte> checked = detail::checked_packed_rkey(packed_rkey);
    const detail::DirectRange range =
        detail::unpack_rkey(state_->endpoint.handle(), checked, address, size, &state_->rkey);
    state_->direct = range.pointer;
    state_->mapped_elsewhere = range.outside;
  }

  [[nodiscard]] ucp_rkey_h rkey() const noexcept { return state_->rkey; }
  [[nodiscard]] uint64_t address() const noexcept { return state_->address; }
  [[nodiscard]] std::size_t size() const noexcept { return state_->size; }
  [[nodiscard]] const Endpoint& endpoint() const noexcept { return state_->endpoint; }

  // A load/store pointer to the remote memory when UCX can give one (shared
  // memory) and all `size` bytes lie in the segment this rkey attached;
  // nullptr when every access must go through UCX (tcp, RDMA), or the peer
  // named a range outside what it registered.
  [[nodiscard]] void* direct_pointer() const noexcept { return state_->direct; }

  // True when UCX maps this memory here (shared memory) but the range the
  // peer named does not lie in the segment its rkey attached: every access,
  // a put through UCX included, would land elsewhere in this process (our
  // heap, another peer's ring). Such a peer is refused.
  [[nodiscard]] bool outside_its_segment() const noexcept { return state_->mapped_elsewhere; }

 private:
  struct State {
    State(Endpoint e, uint64_t a, std::size_t s) : endpoint(std::move(e)), address(a), size(s) {}
    State(const State&) = delete;
    State& operator=(const State&) = delete;
    ~State() {
      if (rkey != nullptr) ucp_rkey_destroy(rkey);
    }
    Endpoint endpoint;
    uint64_t address;
    std::size_t size;
    ucp_rkey_h rkey = nullptr;
    void* direct = nullptr;         // the range, mapped here (shared memory)
    bool mapped_elsewhere = false;  // mapped here, but not within its own segment
  };
  std::shared_ptr<State> state_;
};

}  // namespace threechains
