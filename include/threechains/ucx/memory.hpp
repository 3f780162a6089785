// MemoryRegion: memory that UCX allocated and registered (UCP_MEM_MAP_ALLOCATE),
// so a peer's put into it over shared memory is a direct store the owner sees
// without progressing. RemoteBuffer: a peer's region as seen through one
// Endpoint (an rkey is unpacked per endpoint, so it belongs to that Endpoint).
#pragma once

#include <threechains/ucx/context.hpp>
#include <threechains/ucx/endpoint.hpp>

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace threechains {

class MemoryRegion {
 public:
  // Allocates and registers `size` bytes, zero-filled.
  MemoryRegion(Context context, std::size_t size);

  [[nodiscard]] std::byte* data() const noexcept { return state_->data; }
  [[nodiscard]] std::size_t size() const noexcept { return state_->size; }
  [[nodiscard]] uint64_t address() const noexcept {
    return reinterpret_cast<uint64_t>(state_->data);
  }
  [[nodiscard]] ucp_mem_h handle() const noexcept { return state_->handle; }

  // The remote key a peer unpacks to reach this region.
  [[nodiscard]] std::vector<std::byte> pack_rkey() const;

 private:
  struct State {
    explicit State(Context c) : context(std::move(c)) {}
    State(const State&) = delete;
    State& operator=(const State&) = delete;
    ~State();
    Context context;
    ucp_mem_h handle = nullptr;
    std::byte* data = nullptr;
    std::size_t size = 0;
  };
  std::shared_ptr<State> state_;
};

class RemoteBuffer {
 public:
  // `packed_rkey` came from the peer: checked before UCX parses it.
  RemoteBuffer(Endpoint endpoint, uint64_t address, std::size_t size,
               std::span<const std::byte> packed_rkey);

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
    ~State();
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
