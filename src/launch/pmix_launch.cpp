// The PMIx client: what Open MPI's mpirun, Slurm's srun --mpi=pmix and prrte
// give every process they start. Addresses go through PMIx_Put/Commit, a
// collecting fence, and PMIx_Get; barriers are non-blocking fences, so a rank
// keeps serving while it waits.
#include "launch/launch_system.hpp"

#include <threechains/error.hpp>

#include <pmix.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>

namespace threechains::detail {
namespace {

std::string pmix_error(const char* call, pmix_status_t status) {
  return std::string(call) + " failed: " + PMIx_Error_string(status);
}

class PmixLaunch final : public LaunchSystem {
 public:
  PmixLaunch() {
    PMIX_PROC_CONSTRUCT(&me_);
    const pmix_status_t status = PMIx_Init(&me_, nullptr, 0);
    if (status != PMIX_SUCCESS) {
      throw Error(errc::invalid_argument,
                  pmix_error("PMIx_Init", status) +
                      " (this process was not started by a PMIx launcher: run it under "
                      "mpirun or srun --mpi=pmix)");
    }
    PMIX_PROC_CONSTRUCT(&job_);
    PMIX_LOAD_PROCID(&job_, me_.nspace, PMIX_RANK_WILDCARD);
    pmix_value_t* size = nullptr;
    const pmix_status_t got = PMIx_Get(&job_, PMIX_JOB_SIZE, nullptr, 0, &size);
    if (got != PMIX_SUCCESS || size == nullptr) {
      PMIx_Finalize(nullptr, 0);
      throw Error(errc::protocol, pmix_error("PMIx_Get(PMIX_JOB_SIZE)", got));
    }
    ranks_ = size->data.uint32;
    PMIX_VALUE_RELEASE(size);
  }
  PmixLaunch(const PmixLaunch&) = delete;
  PmixLaunch& operator=(const PmixLaunch&) = delete;
  ~PmixLaunch() override { PMIx_Finalize(nullptr, 0); }

  [[nodiscard]] Launcher kind() const noexcept override { return Launcher::pmix; }
  [[nodiscard]] int64_t rank() const noexcept override { return me_.rank; }
  [[nodiscard]] int64_t ranks() const noexcept override { return ranks_; }

  std::vector<std::string> all_gather(const std::string& mine) override {
    // A key per exchange in this process, across Launch objects: a later one
    // never reads an earlier one's values (every rank runs the same sequence).
    static std::atomic<uint64_t> exchanges{0};
    const std::string key = "threechains.gather." + std::to_string(++exchanges);
    pmix_value_t value;
    PMIX_VALUE_CONSTRUCT(&value);
    value.type = PMIX_STRING;
    value.data.string = const_cast<char*>(mine.c_str());  // PMIx_Put copies it
    pmix_status_t status = PMIx_Put(PMIX_GLOBAL, key.c_str(), &value);
    if (status != PMIX_SUCCESS) throw Error(errc::protocol, pmix_error("PMIx_Put", status));
    status = PMIx_Commit();
    if (status != PMIX_SUCCESS) throw Error(errc::protocol, pmix_error("PMIx_Commit", status));
    pmix_info_t collect;
    PMIX_INFO_CONSTRUCT(&collect);
    bool yes = true;
    PMIX_INFO_LOAD(&collect, PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
    status = PMIx_Fence(&job_, 1, &collect, 1);
    PMIX_INFO_DESTRUCT(&collect);
    if (status != PMIX_SUCCESS) throw Error(errc::protocol, pmix_error("PMIx_Fence", status));
    std::vector<std::string> all;
    all.reserve(static_cast<std::size_t>(ranks_));
    for (uint32_t r = 0; r < ranks_; ++r) {
      pmix_proc_t peer;
      PMIX_PROC_CONSTRUCT(&peer);
      PMIX_LOAD_PROCID(&peer, me_.nspace, r);
      pmix_value_t* got = nullptr;
      status = PMIx_Get(&peer, key.c_str(), nullptr, 0, &got);
      if (status != PMIX_SUCCESS || got == nullptr || got->type != PMIX_STRING) {
        if (got != nullptr) PMIX_VALUE_RELEASE(got);
        throw Error(errc::protocol,
                    pmix_error(("PMIx_Get(rank " + std::to_string(r) + ")").c_str(), status));
      }
      all.emplace_back(got->data.string);
      PMIX_VALUE_RELEASE(got);
    }
    return all;
  }

  void barrier(void (*serve)(void*), void* context) override {
    // The callback runs on PMIx's own progress thread.
    struct Done {
      std::atomic<bool> done{false};
      pmix_status_t status = PMIX_SUCCESS;
    } done;
    const pmix_status_t status = PMIx_Fence_nb(
        &job_, 1, nullptr, 0,
        [](pmix_status_t result, void* data) {
          auto* d = static_cast<Done*>(data);
          d->status = result;
          d->done.store(true, std::memory_order_release);
        },
        &done);
    if (status == PMIX_OPERATION_SUCCEEDED) return;  // done at once: no callback comes
    if (status != PMIX_SUCCESS) throw Error(errc::protocol, pmix_error("PMIx_Fence_nb", status));
    try {
      while (!done.done.load(std::memory_order_acquire)) serve(context);
    } catch (...) {
      // PMIx's thread still writes `done`: it must outlive the callback.
      while (!done.done.load(std::memory_order_acquire)) std::this_thread::yield();
      throw;
    }
    if (done.status != PMIX_SUCCESS) {
      throw Error(errc::protocol, pmix_error("PMIx_Fence_nb", done.status));
    }
  }

 private:
  pmix_proc_t me_{};
  pmix_proc_t job_{};
  uint32_t ranks_ = 0;
};

}  // namespace

std::unique_ptr<LaunchSystem> join_pmix() {
  return std::make_unique<PmixLaunch>();
}

}  // namespace threechains::detail
