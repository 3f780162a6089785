// The seam between Launch and a process manager's client library. One
// implementation per launcher, each in its own file and built only when its
// library is found (src/CMakeLists.txt); the rest of the library sees only this.
#pragma once

#include <threechains/launch.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace threechains::detail {

class LaunchSystem {
 public:
  virtual ~LaunchSystem() = default;
  [[nodiscard]] virtual Launcher kind() const noexcept = 0;
  [[nodiscard]] virtual int64_t rank() const noexcept = 0;
  [[nodiscard]] virtual int64_t ranks() const noexcept = 0;
  [[nodiscard]] virtual std::vector<std::string> all_gather(const std::string& mine) = 0;
  virtual void barrier(void (*serve)(void*), void* context) = 0;
  // This rank failed inside a collective step (bootstrap, barrier): the other
  // ranks may wait for it forever, so it must not leave the job politely.
  virtual void abandon() noexcept {}
};

// The library's way to the LaunchSystem behind a Launch.
struct LaunchAccess {
  [[nodiscard]] static LaunchSystem& system(Launch& launch) noexcept { return *launch.system_; }
};

// Each returns nullptr if this build has no such launcher; throws
// errc::invalid_argument if the process was not started by one.
[[nodiscard]] std::unique_ptr<LaunchSystem> join_pmix();
[[nodiscard]] std::unique_ptr<LaunchSystem> join_mpi();
// Whether the environment says a PMIx server started this process.
[[nodiscard]] bool started_by_pmix() noexcept;

}  // namespace threechains::detail
