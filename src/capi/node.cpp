// C API: Nodes, made by hand or bootstrapped from the job's launcher.
#include "capi/handles.hpp"

#include <string_view>

using threechains::capi::all_given;
using threechains::capi::fail;
using threechains::capi::guarded;

namespace {

threechains_node_options all_options(const threechains_node_options* given) {
  threechains_node_options defaults{};
  threechains_node_options_init(&defaults);
  return threechains::capi::read_options(given, defaults);
}

// Exposes the options' objects on `node`.
void expose_all(const threechains_node_options& options, threechains::Node& node) {
  if (options.exposed_count != 0 &&
      (options.exposed_names == nullptr || options.exposed_objects == nullptr)) {
    throw threechains::Error(threechains::errc::invalid_argument,
                             "exposed_count is set but exposed_names or exposed_objects is NULL");
  }
  for (std::size_t i = 0; i < options.exposed_count; ++i) {
    if (options.exposed_names[i] == nullptr) {
      throw threechains::Error(threechains::errc::invalid_argument,
                               "exposed_names[" + std::to_string(i) + "] is NULL");
    }
    node.expose(options.exposed_names[i], options.exposed_objects[i]);
  }
}

threechains::NodeOptions node_options(const threechains_node_options& all) {
  threechains::NodeOptions options;
  // The nested structs carry their own sizes (a caller may have set them from
  // an older header): read each over its defaults; NULL leaves the defaults.
  options.receiver = threechains::capi::receiver_options(
      threechains::capi::read_options(all.receiver, threechains::capi::default_receiver_options()));
  options.channel = threechains::capi::channel_options(
      threechains::capi::read_options(all.channel, threechains::capi::default_channel_options()));
  return options;
}

threechains::Launcher parse_launcher(const char* name) {
  const std::string_view text = name != nullptr ? name : "auto";
  if (text == "auto" || text.empty()) return threechains::Launcher::automatic;
  if (text == "pmix") return threechains::Launcher::pmix;
  if (text == "mpi") return threechains::Launcher::mpi;
  throw threechains::Error(threechains::errc::invalid_argument,
                           "unknown launcher '" + std::string(text) + "' (pmix, mpi, auto)");
}

}  // namespace

extern "C" {

void threechains_node_options_init(threechains_node_options* options) {
  if (options == nullptr) return;
  *options = threechains_node_options{};
  options->size = sizeof(*options);
}

threechains_status threechains_node_create(threechains_worker* worker, int64_t rank, int64_t ranks,
                                           const threechains_node_options* options,
                                           threechains_node** out) {
  if (!all_given(worker, out)) return fail(THREECHAINS_INVALID_ARGUMENT, "worker or out is NULL");
  return guarded("threechains_node_create", [&] {
    const threechains_node_options all = all_options(options);
    threechains::Node node(worker->worker, rank, ranks, node_options(all));
    expose_all(all, node);
    *out = new threechains_node{std::nullopt, std::move(node)};
  });
}

threechains_status threechains_node_bootstrap(threechains_worker* worker, const char* launcher,
                                              const threechains_node_options* options,
                                              threechains_node** out) {
  if (!all_given(worker, out)) return fail(THREECHAINS_INVALID_ARGUMENT, "worker or out is NULL");
  return guarded("threechains_node_bootstrap", [&] {
    threechains::Launch launch = threechains::Launch::join(parse_launcher(launcher));
    const threechains_node_options all = all_options(options);
    threechains::Node node =
        threechains::bootstrap(worker->worker, launch, node_options(all),
                               [&](threechains::Node& fresh) { expose_all(all, fresh); });
    *out = new threechains_node{std::move(launch), std::move(node)};
  });
}

void threechains_node_destroy(threechains_node* node) {
  delete node;
}
int64_t threechains_node_rank(const threechains_node* node) {
  return node != nullptr ? node->node.rank() : -1;
}
int64_t threechains_node_ranks(const threechains_node* node) {
  return node != nullptr ? node->node.ranks() : 0;
}
uint16_t threechains_node_port(const threechains_node* node) {
  return node != nullptr ? node->node.port() : 0;
}

threechains_status threechains_node_connect(threechains_node* node, const char* const* hosts,
                                            const uint16_t* ports) {
  if (!all_given(node, hosts, ports)) {
    return fail(THREECHAINS_INVALID_ARGUMENT, "node, hosts or ports is NULL");
  }
  return guarded("threechains_node_connect", [&] {
    std::vector<threechains::NodeAddress> addresses;
    for (int64_t r = 0; r < node->node.ranks(); ++r) {
      const char* host = hosts[r] != nullptr ? hosts[r] : "";
      addresses.push_back({host, ports[r]});
    }
    node->node.connect(addresses);
  });
}

threechains_status threechains_node_expose(threechains_node* node, const char* name, void* object) {
  if (!all_given(node, name)) return fail(THREECHAINS_INVALID_ARGUMENT, "node or name is NULL");
  return guarded("threechains_node_expose", [&] { node->node.expose(name, object); });
}

threechains_status threechains_node_send(threechains_node* node, int64_t rank,
                                         const threechains_ifunc* ifunc, const void* payload,
                                         std::size_t size) {
  if (!all_given(node, ifunc) || (payload == nullptr && size != 0)) {
    return fail(THREECHAINS_INVALID_ARGUMENT, "threechains_node_send: a NULL argument");
  }
  return guarded("threechains_node_send", [&] {
    node->node.send_bytes(rank, ifunc->ifunc, {static_cast<const std::byte*>(payload), size});
  });
}

threechains_status threechains_node_poll(threechains_node* node, unsigned* dispatched) {
  if (!all_given(node)) return fail(THREECHAINS_INVALID_ARGUMENT, "node is NULL");
  unsigned ran = 0;
  const threechains_status status =
      guarded("threechains_node_poll", [&] { ran = node->node.poll(); });
  if (dispatched != nullptr) *dispatched = ran;
  return status;
}

threechains_status threechains_node_barrier(threechains_node* node) {
  if (!all_given(node)) return fail(THREECHAINS_INVALID_ARGUMENT, "node is NULL");
  if (!node->launch) {
    return fail(THREECHAINS_INVALID_ARGUMENT,
                "threechains_node_barrier: the node was not bootstrapped from a launcher");
  }
  return guarded("threechains_node_barrier",
                 [&] { threechains::barrier(*node->launch, node->node); });
}

threechains_status threechains_node_close(threechains_node* node) {
  if (!all_given(node)) return fail(THREECHAINS_INVALID_ARGUMENT, "node is NULL");
  return guarded("threechains_node_close", [&] { node->node.close(); });
}

}  // extern "C"
