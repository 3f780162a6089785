// Endpoint: RAII owner of a ucp_ep_h, created by UCX's sockaddr client/server
// set-up (connect to host:port, or accept a listener's connection request).
// Holds its Worker alive; notes when the peer goes away instead of crashing.
#pragma once

#include <threechains/ucx/request.hpp>
#include <threechains/ucx/worker.hpp>

#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace threechains {

class Endpoint {
 public:
  // Client side: connect to a Listener at host:port.
  [[nodiscard]] static Endpoint connect(const Worker& worker, const std::string& host,
                                        uint16_t port);

  // Server side: accept a connection request a Listener handed over.
  [[nodiscard]] static Endpoint accept(const Worker& worker, ucp_conn_request_h request);

  [[nodiscard]] ucp_ep_h handle() const noexcept { return state_->handle; }
  [[nodiscard]] const Worker& worker() const noexcept { return state_->worker; }
  // UCS_OK while the connection is usable; the error UCX reported once it is not.
  [[nodiscard]] ucs_status_t status() const noexcept { return state_->status; }
  [[nodiscard]] bool failed() const noexcept { return state_->status != UCS_OK; }
  // Endpoints of this process that UCX reported failed, so far: a loop that
  // holds many can look at this one number instead of at each of them.
  [[nodiscard]] static uint64_t failures() noexcept {
    return failures_.load(std::memory_order_acquire);
  }

  // UCX's own description of this endpoint's lanes (which transport carries AM, RMA).
  [[nodiscard]] std::string describe() const;

  // Sends Active Message `id` (eager, with this endpoint as the reply
  // endpoint, so the handler knows who spoke). `header` and `data` must stay
  // valid until the returned Request completes.
  [[nodiscard]] Request am_send(unsigned id, const void* header, std::size_t header_length,
                                const void* data, std::size_t length) const {
    ucp_request_param_t params{};
    params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    params.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
    return {ucp_am_send_nbx(state_->handle, id, header, header_length, data, length, &params),
            "ucp_am_send_nbx"};
  }

  // The same, with the data gathered from `count` pieces (UCX's IOV datatype).
  // `iov` and what it points to must stay valid until the Request completes.
  [[nodiscard]] Request am_send_gathered(unsigned id, const void* header,
                                         std::size_t header_length, const ucp_dt_iov_t* iov,
                                         std::size_t count) const {
    ucp_request_param_t params{};
    params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_DATATYPE;
    params.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
    params.datatype = ucp_dt_make_iov();
    return {ucp_am_send_nbx(state_->handle, id, header, header_length, iov, count, &params),
            "ucp_am_send_nbx"};
  }

  // One-sided put of `length` bytes at `data` to `remote` (rkey from a RemoteBuffer).
  [[nodiscard]] Request put(const void* data, std::size_t length, uint64_t remote,
                            ucp_rkey_h rkey) const {
    ucp_request_param_t params{};
    return {ucp_put_nbx(state_->handle, data, length, remote, rkey, &params), "ucp_put_nbx"};
  }

  // Starts closing the connection (flushing, or forced if the peer failed) and
  // returns at once; the Request completes when UCX has let go of it. Once
  // called, handle() is null. Safe to call more than once.
  [[nodiscard]] Request start_close() noexcept {
    return state_->start_close(state_->status != UCS_OK ? UCP_EP_CLOSE_FLAG_FORCE : 0);
  }
  // Closes without flushing: for a connection that gets nothing from us.
  [[nodiscard]] Request start_force_close() noexcept {
    return state_->start_close(UCP_EP_CLOSE_FLAG_FORCE);
  }

  // Flushes outstanding operations and closes the connection, waiting at most `limit`.
  // Safe to call more than once; the destructor of the last copy force-closes otherwise.
  void close(std::chrono::milliseconds limit = std::chrono::seconds(2)) {
    state_->close(failed() ? UCP_EP_CLOSE_FLAG_FORCE : 0, limit);
  }

 private:
  // Shared by the copies of one Endpoint; made and destroyed in
  // src/ucx/endpoint.cpp (the last copy force-closes the connection).
  struct State {
    explicit State(Worker w) : worker(std::move(w)) {}
    State(const State&) = delete;
    State& operator=(const State&) = delete;
    ~State();

    Request start_close(uint32_t flags) noexcept;
    void close(uint32_t flags, std::chrono::milliseconds limit) noexcept;

    Worker worker;
    ucp_ep_h handle = nullptr;
    ucs_status_t status = UCS_OK;
  };

  static inline std::atomic<uint64_t> failures_{0};

  explicit Endpoint(std::shared_ptr<State> state) : state_(std::move(state)) {}
  static Endpoint create(const Worker& worker, ucp_ep_params_t& params, const char* what);

  std::shared_ptr<State> state_;
};

}  // namespace threechains
