// Listener's set-up and teardown: cold (once per Receiver), so out of the
// header every user of the library compiles.
#include <threechains/ucx/listener.hpp>

#include <netinet/in.h>

namespace threechains {

Listener::Listener(Worker worker, uint16_t port, OnConnect on_connect)
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

Listener::State::~State() {
  if (handle != nullptr) ucp_listener_destroy(handle);
}

}  // namespace threechains
