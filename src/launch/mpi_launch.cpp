// MPI_COMM_WORLD as a launcher, for programs that use MPI anyway (or sites
// without a PMIx launcher). MPI is initialised here unless the program did it;
// then it is finalised at exit, since MPI cannot be initialised twice in a
// process and a second Launch must still find it. A rank that failed in a
// collective step is aborted at exit instead: MPI_Finalize would wait for
// ranks that wait for it.
#include "launch/launch_system.hpp"

#include <threechains/error.hpp>

#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <numeric>

namespace threechains::detail {
namespace {

void check_mpi(int result, const char* call) {
  if (result != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    MPI_Error_string(result, text, &length);
    throw Error(errc::protocol, std::string(call) + " failed: " + text);
  }
}

std::atomic<bool> g_started_mpi{false};  // this library called MPI_Init
std::atomic<bool> g_abandoned{false};

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized != 0) return;
  if (g_abandoned.load()) {
    std::fprintf(stderr,
                 "threechains: this rank failed in bootstrap or a barrier; aborting the "
                 "MPI job (MPI_Finalize would wait for the other ranks forever)\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
}

class MpiLaunch final : public LaunchSystem {
 public:
  MpiLaunch() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized == 0) {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (finalized != 0) {
        throw Error(errc::invalid_argument, "MPI launch: MPI was finalised already");
      }
      check_mpi(MPI_Init(nullptr, nullptr), "MPI_Init");
      std::atexit(finalize_at_exit);
      g_started_mpi.store(true);
    }
    int rank = 0;
    int size = 0;
    check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
    rank_ = rank;
    ranks_ = size;
  }

  [[nodiscard]] Launcher kind() const noexcept override { return Launcher::mpi; }
  // A program that started MPI itself decides how it ends (it may MPI_Abort).
  void abandon() noexcept override {
    if (g_started_mpi.load()) g_abandoned.store(true);
  }
  [[nodiscard]] int64_t rank() const noexcept override { return rank_; }
  [[nodiscard]] int64_t ranks() const noexcept override { return ranks_; }

  std::vector<std::string> all_gather(const std::string& mine) override {
    const auto n = static_cast<std::size_t>(ranks_);
    int length = static_cast<int>(mine.size());
    std::vector<int> lengths(n);
    check_mpi(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD),
              "MPI_Allgather");
    std::vector<int> offsets(n);
    std::exclusive_scan(lengths.begin(), lengths.end(), offsets.begin(), 0);
    std::string joined(static_cast<std::size_t>(offsets.back() + lengths.back()), '\0');
    check_mpi(MPI_Allgatherv(mine.data(), length, MPI_CHAR, joined.data(), lengths.data(),
                             offsets.data(), MPI_CHAR, MPI_COMM_WORLD),
              "MPI_Allgatherv");
    std::vector<std::string> all;
    for (std::size_t r = 0; r < n; ++r) all.push_back(joined.substr(offsets[r], lengths[r]));
    return all;
  }

  void barrier(void (*serve)(void*), void* context) override {
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(MPI_Ibarrier(MPI_COMM_WORLD, &request), "MPI_Ibarrier");
    for (;;) {
      int done = 0;
      check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done != 0) return;
      serve(context);
    }
  }

 private:
  int64_t rank_ = 0;
  int64_t ranks_ = 0;
};

}  // namespace

std::unique_ptr<LaunchSystem> join_mpi() {
  return std::make_unique<MpiLaunch>();
}

}  // namespace threechains::detail
