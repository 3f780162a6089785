// Context: RAII owner of a ucp_context_h, configured for Active Messages (and,
// only when asked, RMA) over the transport the caller asks for. Copies share
// the same UCX context.
#pragma once

#include <threechains/error.hpp>

#include <ucp/api/ucp.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

namespace threechains {

// Which UCX transports a Context may use. `shared_memory` and `tcp` pin UCX to
// one family (what the tests and the demo compare); `any` leaves UCX_TLS alone.
enum class Transport { any, shared_memory, tcp };

[[nodiscard]] constexpr std::string_view to_string(Transport t) noexcept {
  switch (t) {
    case Transport::shared_memory:
      return "shm";
    case Transport::tcp:
      return "tcp";
    case Transport::any:
      break;
  }
  return "any";
}

[[nodiscard]] inline Transport parse_transport(std::string_view name) {
  if (name == "shm" || name == "shared_memory") return Transport::shared_memory;
  if (name == "tcp") return Transport::tcp;
  if (name == "any") return Transport::any;
  throw Error(errc::invalid_argument,
              "unknown transport '" + std::string(name) + "' (shm, tcp, any)");
}

// The UCX_TLS list for a transport. Connection set-up goes through UCX's
// sockaddr client/server (its TCP connection manager) whatever the data lanes are;
// `self` is kept so a process can also talk to itself.
[[nodiscard]] constexpr const char* transport_tls(Transport t) noexcept {
  switch (t) {
    case Transport::shared_memory:
      return "posix,sysv,self,tcp";
    case Transport::tcp:
      return "tcp,self";
    case Transport::any:
      break;
  }
  return nullptr;
}

struct ContextOptions {
  Transport transport = Transport::any;
  std::string name = "threechains";
  // Listeners bind with SO_REUSEADDR, so a target restarted on its port can
  // listen at once instead of waiting for the kernel to let the port go.
  // UCX 1.13 takes this from the environment (UCX_TCP_CM_REUSEADDR), set by
  // the first Context that asks and kept for the process; set the variable
  // yourself to decide otherwise.
  bool reuse_address = true;
  // Ask UCX for remote memory access (put, get, atomics). Off by default: UCX
  // 1.13 emulates RMA and atomics over tcp with Active Messages whose handlers
  // (src/ucp/rma/ in UCX) write to and read from whatever address a message
  // names, without looking at an rkey, and a worker on shared memory has tcp
  // lanes too (connection set-up needs them). With it off those handlers are
  // never installed, so a peer reaches nothing with a put or a get. Frames then
  // travel as direct stores into the mapped ring (shared memory) or as Active
  // Messages (tcp). Turn it on for RDMA networks, where the NIC checks every
  // rkey (Delivery::put), or for a benchmark's GET baseline on a closed machine;
  // docs/security.md says what a peer can reach then.
  bool remote_memory_access = false;
};

class Context {
 public:
  // Reads UCX's configuration (the environment's UCX_* first), sets what
  // `options` ask for in the names the running UCX understands
  // (src/ucx/compat.hpp), and initialises UCX. Throws Error on failure,
  // naming the setting and the UCX version.
  explicit Context(const ContextOptions& options = {});

  [[nodiscard]] ucp_context_h handle() const noexcept { return handle_.get(); }
  [[nodiscard]] Transport transport() const noexcept { return transport_; }
  // Whether UCX was asked for put/get (ContextOptions::remote_memory_access).
  [[nodiscard]] bool remote_memory_access() const noexcept { return remote_memory_access_; }

 private:
  friend class MemoryRegion;  // clears what it gets unless allocates_zeroed_
  std::shared_ptr<ucp_context> handle_;
  Transport transport_;
  bool remote_memory_access_;
  // Every way left to UCX to allocate memory for ucp_mem_map maps pages
  // fresh from the kernel, so zero (context.cpp, ALLOC_PRIO).
  bool allocates_zeroed_ = false;
};

}  // namespace threechains
