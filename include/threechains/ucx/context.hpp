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
  explicit Context(const ContextOptions& options = {})
      : transport_(options.transport), remote_memory_access_(options.remote_memory_access) {
    ucp_config_t* config = nullptr;
    check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
    const auto modify = [&](const char* name, const char* value) {
      const ucs_status_t status = ucp_config_modify(config, name, value);
      if (status != UCS_OK) {
        ucp_config_release(config);
        check(status, (std::string("ucp_config_modify(") + name + ")").c_str());
      }
    };
    if (const char* tls = transport_tls(options.transport)) modify("TLS", tls);
    // Endpoints ask for peer error handling (a peer that goes away is reported,
    // not fatal). UCX 1.13 then leaves shared-memory transports out of
    // client/server endpoints unless they are told to take part in it.
    if (options.transport != Transport::tcp) modify("MM_ERROR_HANDLING", "y");
    // Without RMA, tcp interfaces also stop advertising their native put
    // (uct/tcp: a PUT request writes wherever its header says, rkey unseen),
    // so a peer's unmodified UCX never picks it as a lane to us.
    if (!options.remote_memory_access) modify("PUT_ENABLE", "n");  // uct tcp's own name for it
    // A worker's async context (its connection set-up, run by UCX's async
    // thread and by ucp_ep_create/progress) is guarded by a spinlock unless
    // this is set (ucp_worker.c: UCS_ASYNC_MODE_THREAD_MUTEX). With a lock
    // that sleeps, a progress thread that meets the async thread mid-wire-up
    // gives its core back instead of spinning it away: on 2 cores a serial
    // tcp connect fell from ~7 to ~1.4 ms (docs/performance.md). The hot path
    // (eager AMs, direct rings) never takes this lock; going to sleep
    // (ucp_worker_arm) does, once per sleep. A value the user set in the
    // environment wins.
    if (std::getenv("UCX_USE_MT_MUTEX") == nullptr) modify("USE_MT_MUTEX", "y");
    if (options.reuse_address) {
      // UCX 1.13 reads its connection managers' settings from the environment
      // when a worker opens them (ucp_config_modify does not reach them).
      // overwrite = 0: a value the user set explicitly wins.
      setenv("UCX_TCP_CM_REUSEADDR", "y", 0);
      setenv("UCX_RDMA_CM_REUSEADDR", "y", 0);
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
    // WAKEUP: an idle serving loop sleeps on the worker's event fd
    // (ProgressOptions). UCX 1.13 asks transports for event support only
    // where TAG is requested too, so lane choice is unchanged.
    params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP |
                      (options.remote_memory_access ? UCP_FEATURE_RMA : 0);
    params.name = options.name.c_str();
    ucp_context_h handle = nullptr;
    const ucs_status_t status = ucp_init(&params, config, &handle);
    ucp_config_release(config);
    check(status, "ucp_init");
    handle_ = std::shared_ptr<ucp_context>(handle, [](ucp_context_h h) { ucp_cleanup(h); });
  }

  [[nodiscard]] ucp_context_h handle() const noexcept { return handle_.get(); }
  [[nodiscard]] Transport transport() const noexcept { return transport_; }
  // Whether UCX was asked for put/get (ContextOptions::remote_memory_access).
  [[nodiscard]] bool remote_memory_access() const noexcept { return remote_memory_access_; }

 private:
  std::shared_ptr<ucp_context> handle_;
  Transport transport_;
  bool remote_memory_access_;
};

}  // namespace threechains
