// Waiting for a load JitCache::start_load began: what the tests of loads
// beside the caller (prepared, compiled, verified aside) share.
#pragma once

#include <threechains/jit_cache.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

namespace threechains::test {

// The load of `id`, as finish_loads hands it back; FAILs past `limit`.
// Other loads' results, taken meanwhile, are dropped.
inline JitCache::FinishedLoad finished_load(JitCache& cache, CodeId id,
                                            std::chrono::seconds limit = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    for (JitCache::FinishedLoad& done : cache.finish_loads())
      if (done.id == id) return std::move(done);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  FAIL("the load did not finish in " << limit.count() << " s");
  return {};
}

}  // namespace threechains::test
