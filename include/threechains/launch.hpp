// Launch: this process's place in a job that a cluster's process manager
// started (mpirun, srun --mpi=pmix), and bootstrap(), which builds a Node of
// that job: rank and size from the launcher, every rank's listening address
// exchanged through it, every pair connected. UCX carries all the traffic
// after that; the launcher is only asked again for barriers.
//
// Both launchers are optional when ThreeChains is built: `pmix` needs
// libpmix-dev, `mpi` an MPI (libopenmpi-dev). Launch::available() tells which
// this build has.
#pragma once

#include <threechains/node.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace threechains {

namespace detail {
class LaunchSystem;
struct LaunchAccess;
}  // namespace detail

enum class Launcher {
  automatic,  // PMIx if this process was started by a PMIx launcher, else MPI
  pmix,       // the PMIx client: Open MPI's mpirun, Slurm's srun --mpi=pmix, prrte
  mpi,        // MPI_COMM_WORLD (initialises MPI unless the program did)
};

class Launch {
 public:
  // Joins the job. Throws errc::invalid_argument naming what is missing if
  // the launcher was not built in or this process was not started by one.
  [[nodiscard]] static Launch join(Launcher launcher = Launcher::automatic);
  // Whether this build has the launcher.
  [[nodiscard]] static bool available(Launcher launcher) noexcept;

  Launch(Launch&&) noexcept;
  Launch& operator=(Launch&&) noexcept;
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;
  // Leaves the job (PMIx_Finalize; MPI is finalised at exit if we started it).
  ~Launch();

  [[nodiscard]] int64_t rank() const noexcept;
  [[nodiscard]] int64_t ranks() const noexcept;
  [[nodiscard]] Launcher launcher() const noexcept;
  // The name of this process's host, as the other ranks compare it.
  [[nodiscard]] const std::string& host() const noexcept;

  // Every rank's `mine`, indexed by rank. Collective: every rank calls it.
  [[nodiscard]] std::vector<std::string> all_gather(const std::string& mine);
  // Waits until every rank has entered, calling `serve` meanwhile (a rank
  // that waits must keep answering the others' frames and credits).
  void barrier(void (*serve)(void*), void* context);

 private:
  friend struct detail::LaunchAccess;
  explicit Launch(std::unique_ptr<detail::LaunchSystem> system) noexcept;
  std::unique_ptr<detail::LaunchSystem> system_;
};

// A Node for this rank of `launch`'s job, connected to every other rank.
// `prepare(node)` runs before this rank connects: expose what injected code
// looks up there, since frames from other ranks can run as soon as the
// connections are being made (inside bootstrap). Each rank advertises
// `advertised_host` (empty: its host name; ranks on the same host reach each
// other over loopback) and its Receiver's port. Collective: every rank calls it.
// If it (or barrier) throws, this rank has left the others waiting: a job
// whose MPI the library started is then aborted at exit (MPI_Abort), not
// finalised, since MPI_Finalize would wait for them forever.
[[nodiscard]] Node bootstrap(Worker worker, Launch& launch, NodeOptions options = {},
                             const std::function<void(Node&)>& prepare = {},
                             const std::string& advertised_host = {});

// Serves `node` until every rank of `launch` has entered the barrier.
void barrier(Launch& launch, Node& node);

}  // namespace threechains
