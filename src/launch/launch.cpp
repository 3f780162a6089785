// Launch::join picks the launcher; bootstrap() turns a joined job into a
// connected Node. Which launchers exist is decided when the library is built
// (THREECHAINS_HAVE_PMIX / THREECHAINS_HAVE_MPI, src/CMakeLists.txt).
#include "launch/launch_system.hpp"

#include <threechains/error.hpp>

#include <unistd.h>

#include <cstdlib>
#include <string_view>
#include <thread>

namespace threechains {
namespace detail {

#ifndef THREECHAINS_HAVE_PMIX
std::unique_ptr<LaunchSystem> join_pmix() {
  return nullptr;
}
#endif
#ifndef THREECHAINS_HAVE_MPI
std::unique_ptr<LaunchSystem> join_mpi() {
  return nullptr;
}
#endif

bool started_by_pmix() noexcept {
  return std::getenv("PMIX_RANK") != nullptr || std::getenv("PMIX_NAMESPACE") != nullptr;
}

namespace {

constexpr bool kHavePmix =
#ifdef THREECHAINS_HAVE_PMIX
    true;
#else
    false;
#endif
constexpr bool kHaveMpi =
#ifdef THREECHAINS_HAVE_MPI
    true;
#else
    false;
#endif

std::string this_host() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// "host:port" -> its parts; the host may itself contain colons (IPv6).
NodeAddress parse_address(const std::string& text, int64_t rank) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    throw Error(errc::protocol, "bootstrap: rank " + std::to_string(rank) +
                                    " advertised no address ('" + text + "')");
  }
  const unsigned long port = std::strtoul(text.c_str() + colon + 1, nullptr, 10);
  if (port == 0 || port > 65535) {
    throw Error(errc::protocol, "bootstrap: rank " + std::to_string(rank) +
                                    " advertised a bad port ('" + text + "')");
  }
  return {text.substr(0, colon), static_cast<uint16_t>(port)};
}

}  // namespace
}  // namespace detail

Launch::Launch(std::unique_ptr<detail::LaunchSystem> system) noexcept
    : system_(std::move(system)) {}
Launch::Launch(Launch&&) noexcept = default;
Launch& Launch::operator=(Launch&&) noexcept = default;
Launch::~Launch() = default;

bool Launch::available(Launcher launcher) noexcept {
  switch (launcher) {
    case Launcher::pmix:
      return detail::kHavePmix;
    case Launcher::mpi:
      return detail::kHaveMpi;
    case Launcher::automatic:
      break;
  }
  return detail::kHavePmix || detail::kHaveMpi;
}

Launch Launch::join(Launcher launcher) {
  if (launcher == Launcher::automatic) {
    if (detail::kHavePmix && detail::started_by_pmix()) {
      launcher = Launcher::pmix;
    } else if (detail::kHaveMpi) {
      launcher = Launcher::mpi;
    } else if (detail::kHavePmix) {
      launcher = Launcher::pmix;  // its error says how to start the program
    } else {
      throw Error(errc::invalid_argument,
                  "Launch: this ThreeChains was built without PMIx and without MPI "
                  "(install libpmix-dev or libopenmpi-dev and rebuild)");
    }
  }
  std::unique_ptr<detail::LaunchSystem> system =
      launcher == Launcher::pmix ? detail::join_pmix() : detail::join_mpi();
  if (system == nullptr) {
    throw Error(errc::invalid_argument,
                launcher == Launcher::pmix
                    ? "Launch: this ThreeChains was built without PMIx (install libpmix-dev "
                      "and rebuild)"
                    : "Launch: this ThreeChains was built without MPI (install libopenmpi-dev "
                      "and rebuild)");
  }
  return Launch(std::move(system));
}

int64_t Launch::rank() const noexcept {
  return system_->rank();
}
int64_t Launch::ranks() const noexcept {
  return system_->ranks();
}
Launcher Launch::launcher() const noexcept {
  return system_->kind();
}

const std::string& Launch::host() const noexcept {
  static const std::string name = detail::this_host();
  return name;
}

std::vector<std::string> Launch::all_gather(const std::string& mine) {
  return system_->all_gather(mine);
}

void Launch::barrier(void (*serve)(void*), void* context) {
  system_->barrier(serve, context);
}

Node bootstrap(Worker worker, Launch& launch, NodeOptions options,
               const std::function<void(Node&)>& prepare, const std::string& advertised_host) try {
  Node node(std::move(worker), launch.rank(), launch.ranks(), std::move(options));
  // Before any address goes out: no other rank can reach this one yet.
  if (prepare) prepare(node);
  // Hosts go round by name, so ranks compare them; the address to dial is the
  // advertised one, or loopback between ranks on one host.
  const std::string advertised = advertised_host.empty() ? launch.host() : advertised_host;
  const std::vector<std::string> hosts = launch.all_gather(launch.host());
  const std::vector<std::string> dial =
      launch.all_gather(advertised + ":" + std::to_string(node.port()));
  std::vector<NodeAddress> addresses;
  addresses.reserve(dial.size());
  for (std::size_t r = 0; r < dial.size(); ++r) {
    NodeAddress address = detail::parse_address(dial[r], static_cast<int64_t>(r));
    if (advertised_host.empty() && hosts[r] == launch.host()) address.host = "127.0.0.1";
    addresses.push_back(std::move(address));
  }
  node.connect(addresses);
  return node;
} catch (...) {
  detail::LaunchAccess::system(launch).abandon();
  throw;
}

void barrier(Launch& launch, Node& node) try {
  // An empty poll yields: the launcher's own daemons share these cores.
  launch.barrier(
      [](void* n) {
        if (static_cast<Node*>(n)->poll() == 0) std::this_thread::yield();
      },
      &node);
} catch (...) {
  detail::LaunchAccess::system(launch).abandon();
  throw;
}

}  // namespace threechains
