// MemoryRegion's and RemoteBuffer's set-up and teardown: cold (once per
// region, once per peer), so out of the header every user of the library
// compiles. What a peer's rkey must pass is in remote_checks.cpp.
#include <threechains/ucx/memory.hpp>

#include "ucx/remote_checks.hpp"

#include <cstring>

namespace threechains {

MemoryRegion::MemoryRegion(Context context, std::size_t size)
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
  // Zero-filled as promised: fresh pages are (Context: ALLOC_PRIO), and
  // clearing them would only fault every page in.
  if (!state_->context.allocates_zeroed_) std::memset(state_->data, 0, size);
}

std::vector<std::byte> MemoryRegion::pack_rkey() const {
  void* buffer = nullptr;
  std::size_t length = 0;
  check(ucp_rkey_pack(state_->context.handle(), state_->handle, &buffer, &length), "ucp_rkey_pack");
  std::vector<std::byte> packed(static_cast<std::byte*>(buffer),
                                static_cast<std::byte*>(buffer) + length);
  ucp_rkey_buffer_release(buffer);
  return packed;
}

MemoryRegion::State::~State() {
  if (handle != nullptr) ucp_mem_unmap(context.handle(), handle);
}

RemoteBuffer::RemoteBuffer(Endpoint endpoint, uint64_t address, std::size_t size,
                           std::span<const std::byte> packed_rkey)
    : state_(std::make_shared<State>(std::move(endpoint), address, size)) {
  const std::vector<std::byte> checked = detail::checked_packed_rkey(packed_rkey);
  const detail::DirectRange range =
      detail::unpack_rkey(state_->endpoint.handle(), checked, address, size, &state_->rkey);
  state_->direct = range.pointer;
  state_->mapped_elsewhere = range.outside;
}

RemoteBuffer::State::~State() {
  if (rkey != nullptr) ucp_rkey_destroy(rkey);
}

}  // namespace threechains
