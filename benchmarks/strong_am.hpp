// The strongest Active Message baseline a UCX user would set up for a given
// transport: its own context and worker, UCX's default error mode (none: no
// peer failure handling, so UCX may pick every lane, shared-memory zero copy
// included), cma beside posix/sysv on shared memory, and an endpoint made from
// the target's worker address. Sends leave the protocol to UCX (eager for
// small messages, rendezvous for large ones, zero copy where a lane offers it).
// ThreeChains' own endpoints ask for peer error handling, which in UCX 1.13
// costs shared memory its zero-copy lane: this baseline shows what that costs.
#pragma once

#include <threechains/error.hpp>
#include <threechains/ucx/context.hpp>

#include <ucp/api/ucp.h>

#include <cstdio>
#include <string>
#include <vector>

namespace bench {

class StrongAmPeer {
 public:
  explicit StrongAmPeer(threechains::Transport transport) {
    ucp_config_t* config = nullptr;
    threechains::check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
    // shm: what UCX offers on one node, cma's zero-copy rendezvous included;
    // tcp: tcp only, as the comparison demands.
    const char* tls = transport == threechains::Transport::tcp ? "tcp,self" : "posix,sysv,cma,self";
    const ucs_status_t modified = ucp_config_modify(config, "TLS", tls);
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
    params.features = UCP_FEATURE_AM;
    params.name = "strong-am-baseline";
    const ucs_status_t status =
        modified == UCS_OK ? ucp_init(&params, config, &context_) : modified;
    ucp_config_release(config);
    threechains::check(status, "ucp_init (strong AM baseline)");
    ucp_worker_params_t worker_params{};
    worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;
    const ucs_status_t created = ucp_worker_create(context_, &worker_params, &worker_);
    if (created != UCS_OK) {
      ucp_cleanup(context_);
      threechains::check(created, "ucp_worker_create (strong AM baseline)");
    }
  }
  ~StrongAmPeer() {
    if (ep_ != nullptr) {
      ucp_request_param_t params{};
      params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      params.flags = UCP_EP_CLOSE_FLAG_FORCE;
      void* request = ucp_ep_close_nbx(ep_, &params);
      if (UCS_PTR_IS_PTR(request)) {
        for (int i = 0; i < 100000 && ucp_request_check_status(request) == UCS_INPROGRESS; ++i)
          ucp_worker_progress(worker_);
        ucp_request_free(request);
      }
    }
    ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
  }
  StrongAmPeer(const StrongAmPeer&) = delete;
  StrongAmPeer& operator=(const StrongAmPeer&) = delete;

  [[nodiscard]] ucp_worker_h worker() const noexcept { return worker_; }
  [[nodiscard]] ucp_ep_h endpoint() const noexcept { return ep_; }

  // This worker's address, in hex (for the other process's command line).
  [[nodiscard]] std::string address_hex() const {
    ucp_address_t* address = nullptr;
    std::size_t length = 0;
    threechains::check(ucp_worker_get_address(worker_, &address, &length),
                       "ucp_worker_get_address");
    std::string hex;
    const auto* bytes = reinterpret_cast<const unsigned char*>(address);
    for (std::size_t i = 0; i < length; ++i) {
      char two[3];
      std::snprintf(two, sizeof(two), "%02x", bytes[i]);
      hex += two;
    }
    ucp_worker_release_address(worker_, address);
    return hex;
  }

  // An endpoint to the worker whose address_hex() this is, in UCX's default
  // error mode.
  void connect(const std::string& hex) {
    std::vector<unsigned char> address(hex.size() / 2);
    for (std::size_t i = 0; i < address.size(); ++i)
      address[i] = static_cast<unsigned char>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    params.address = reinterpret_cast<const ucp_address_t*>(address.data());
    threechains::check(ucp_ep_create(worker_, &params, &ep_), "ucp_ep_create (strong AM baseline)");
  }

 private:
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h ep_ = nullptr;
};

}  // namespace bench
