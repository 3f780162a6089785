// BackgroundCompiler: tier 1 of tiered code. One thread compiles IR images for
// this host (the same checks, host pipeline and code generation as a
// synchronous bitcode load) into relocatable objects; the JitCache links them
// on its own thread, between dispatches. The thread touches no JIT state: it
// has its own TargetMachines, and hands back bytes.
#pragma once

#include "jit/container_images.hpp"
#include "jit/host_optimiser.hpp"
#include "jit/job_thread.hpp"
#include "jit/object_store.hpp"

#include <threechains/import_policy.hpp>

#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace threechains {

class BackgroundCompiler {
 public:
  struct Job {
    uint64_t serial = 0;  // tells a result from one for an evicted, reloaded ifunc
    CodeId id = 0;
    ParsedImage image;      // the IR image for this host
    std::string store_key;  // non-empty: also store the object under it
  };
  struct Result {
    uint64_t serial = 0;
    CodeId id = 0;
    std::vector<std::byte> object;  // empty on failure
    std::string error;              // why it failed
    // Not an error: why this code stays at tier 0 (tier 1 would start with
    // fresh copies of the module's writable globals, losing tier 0's state).
    std::string stays_at_tier0;
  };

  // `host` describes this host exactly as the JIT's compiler does; `calls`,
  // the library functions `policy` lets optimised code call (the JIT's own);
  // `store` (may be null, outlives this) keeps what is compiled for a restart.
  BackgroundCompiler(llvm::orc::JITTargetMachineBuilder host, int optimisation_level,
                     ImportPolicy policy, LibraryCalls calls, const ObjectStore* store,
                     detail::HelperCpus cpus);
  // Stops the thread (~JobThread): a compile under way finishes first
  // (milliseconds).
  BackgroundCompiler(const BackgroundCompiler&) = delete;
  BackgroundCompiler& operator=(const BackgroundCompiler&) = delete;

  void submit(Job job) { thread_.submit(std::move(job)); }
  // Cheap enough for every poll: whether take_finished() has anything.
  [[nodiscard]] bool has_finished() const noexcept { return thread_.has_finished(); }
  [[nodiscard]] std::vector<Result> take_finished() { return thread_.take_finished(); }

 private:
  [[nodiscard]] Result compile_and_store(Job& job);  // on the thread only
  [[nodiscard]] Result compile(Job& job);            // on the thread only: uses host_

  llvm::orc::JITTargetMachineBuilder host_;
  int optimisation_level_;
  ImportPolicy policy_;
  LibraryCalls calls_;
  const ObjectStore* store_;

  JobThread<Job, Result> thread_;  // last: started after, and stopped before, what it uses
};

}  // namespace threechains
