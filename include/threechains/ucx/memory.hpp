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
#include <cstring>
#include <memory>
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

class RemoteBuffer {
 public:
  RemoteBuffer(Endpoint endpoint, uint64_t address, std::size_t size,
               std::span<const std::byte> packed_rkey)
      : state_(std::make_shared<State>(std::move(endpoint), address, size)) {
    check(ucp_ep_rkey_unpack(state_->endpoint.handle(), packed_rkey.data(), &state_->rkey),
          "ucp_ep_rkey_unpack");
  }

  [[nodiscard]] ucp_rkey_h rkey() const noexcept { return state_->rkey; }
  [[nodiscard]] uint64_t address() const noexcept { return state_->address; }
  [[nodiscard]] std::size_t size() const noexcept { return state_->size; }
  [[nodiscard]] const Endpoint& endpoint() const noexcept { return state_->endpoint; }

  // A load/store pointer to the remote memory when UCX can give one (shared
  // memory); nullptr when every access must go through UCX (tcp, RDMA).
  [[nodiscard]] void* direct_pointer() const noexcept {
    void* pointer = nullptr;
    return ucp_rkey_ptr(state_->rkey, state_->address, &pointer) == UCS_OK ? pointer : nullptr;
  }

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
  };
  std::shared_ptr<State> state_;
};

}  // namespace threechains
