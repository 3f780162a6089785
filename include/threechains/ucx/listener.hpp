// Listener: RAII owner of a ucp_listener_h on a sockaddr. Connection requests
// are handed to a callback during Worker::progress().
#pragma once

#include <threechains/error.hpp>
#include <threechains/ucx/worker.hpp>

#include <netinet/in.h>
#include <ucp/api/ucp.h>

#include <functional>
#include <memory>

namespace threechains {

class Listener {
 public:
  using OnConnect = std::function<void(ucp_conn_request_h)>;

  // Listens on all interfaces at `port` (0: the OS picks; see port()).
  Listener(Worker worker, uint16_t port, OnConnect on_connect)
      : state_(std::make_unique<State>(std::move(worker), std::move(on_connect))) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_ANY);
    address.sin_port = htons(port);
    ucp_listener_params_t params{};
    params.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&address);
    params.sockaddr.addrlen = sizeof(address);
    params.conn_handler.cb = [](ucp_conn_request_h request, void* arg) {
      static_cast<State*>(arg)->on_connect(request);
    };
    params.conn_handler.arg = state_.get();
    check(ucp_listener_create(state_->worker.handle(), &params, &state_->handle),
          "ucp_listener_create");
    ucp_listener_attr_t attr{};
    attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    check(ucp_listener_query(state_->handle, &attr), "ucp_listener_query");
    state_->port = ntohs(reinterpret_cast<const sockaddr_in*>(&attr.sockaddr)->sin_port);
  }

  [[nodiscard]] uint16_t port() const noexcept { return state_->port; }

 private:
  struct State {
    State(Worker w, OnConnect c) : worker(std::move(w)), on_connect(std::move(c)) {}
    State(const State&) = delete;
    State& operator=(const State&) = delete;
    ~State() {
      if (handle != nullptr) ucp_listener_destroy(handle);
    }
    Worker worker;
    OnConnect on_connect;
    ucp_listener_h handle = nullptr;
    uint16_t port = 0;
  };
  std::unique_ptr<State> state_;
};

}  // namespace threechains
