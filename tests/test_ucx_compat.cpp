// The version decisions of src/ucx/compat.hpp, each held here: the table
// itself, and that the UCX this test runs on takes what it decides. What
// each decision protects is proven by the attack suite (tests/attack/),
// which scripts/ucx-matrix.sh runs on every supported UCX.
#include "ucx/compat.hpp"

#include <threechains/ucx/context.hpp>
#include <threechains/ucx/memory.hpp>

#include <catch2/catch.hpp>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

using threechains::ucx_compat::Version;
namespace compat = threechains::ucx_compat;

TEST_CASE("the UCX this runs on is one this library supports, and says which", "[ucx][compat]") {
  const Version running = compat::running();
  INFO("UCX " << running.text());
  CHECK(running >= compat::kOldestSupported);
  // The soname promises that what it was built against still runs.
  CHECK(running >= Version{UCP_API_MAJOR, UCP_API_MINOR, 0});
  WARN("running on UCX " << running.text() << " (built against " << UCP_API_MAJOR << "."
                         << UCP_API_MINOR << ")");
}

TEST_CASE("tcp's PUT is turned off by the name each UCX matches", "[ucx][compat][security]") {
  // Before 1.17 a uct key is matched by its bare name; from 1.17
  // (bca427bea3) with its table's prefix, the bare name ignored until 1.21
  // (2af4ba642b) refuses it.
  CHECK(std::strcmp(compat::tcp_put_enable_key({1, 13, 1}), "PUT_ENABLE") == 0);
  CHECK(std::strcmp(compat::tcp_put_enable_key({1, 16, 0}), "PUT_ENABLE") == 0);
  CHECK(std::strcmp(compat::tcp_put_enable_key({1, 17, 0}), "TCP_PUT_ENABLE") == 0);
  CHECK(std::strcmp(compat::tcp_put_enable_key({1, 18, 1}), "TCP_PUT_ENABLE") == 0);
  CHECK(std::strcmp(compat::tcp_put_enable_key({1, 22, 0}), "TCP_PUT_ENABLE") == 0);
  CHECK(std::strcmp(compat::tcp_put_enable_key({2, 0, 0}), "TCP_PUT_ENABLE") == 0);

  // The running UCX takes the name chosen for it (1.21+ refuses one it
  // does not know), and a Context over tcp starts with it.
  ucp_config_t* config = nullptr;
  REQUIRE(ucp_config_read(nullptr, nullptr, &config) == UCS_OK);
  const ucs_status_t status =
      ucp_config_modify(config, compat::tcp_put_enable_key(compat::running()), "n");
  ucp_config_release(config);
  CHECK(status == UCS_OK);
  CHECK_NOTHROW(threechains::Context({.transport = threechains::Transport::tcp}));
}

TEST_CASE("every Context asks for the fence chosen for its UCX version", "[ucx][compat]") {
  // That it then never waits for an idle peer is shown on 1.16 by the two
  // tcp tests docs/ucx-versions.md names (they fail with the strong fence).
  // 1.13-1.15: UCX's own choice is weak. 1.16-1.18: auto is strong with the
  // new protocols, so weak (one RMA rail: one lane). 1.19+: ep_based.
  CHECK(compat::fence_mode({1, 13, 1}) == nullptr);
  CHECK(compat::fence_mode({1, 15, 0}) == nullptr);
  CHECK(std::strcmp(compat::fence_mode({1, 16, 0}), "weak") == 0);
  CHECK(std::strcmp(compat::fence_mode({1, 18, 1}), "weak") == 0);
  CHECK(std::strcmp(compat::fence_mode({1, 19, 0}), "ep_based") == 0);
  CHECK(std::strcmp(compat::fence_mode({1, 22, 0}), "ep_based") == 0);
  // The running UCX takes what is chosen for it: every Context starts.
  CHECK_NOTHROW(threechains::Context(
      {.transport = threechains::Transport::tcp, .remote_memory_access = true}));
  CHECK_NOTHROW(threechains::Context({.transport = threechains::Transport::tcp}));
  CHECK_NOTHROW(threechains::Context({.transport = threechains::Transport::shared_memory}));
}


TEST_CASE("the components this UCX has are told apart from those it lacks", "[ucx][compat]") {
  // tcp (its transport and connection manager) is in every UCX we run on;
  // the answer for rdmacm depends on the build (Debian's has it, a UCX
  // built without rdma-core has not), so only its consistency is checked:
  // a Context with reuse_address sets the rdmacm variable exactly when the
  // component is there (or the user had set it).
  CHECK(compat::has_component("tcp"));
  CHECK_FALSE(compat::has_component("no-such-component"));
  const bool preset = std::getenv("UCX_RDMA_CM_REUSEADDR") != nullptr;
  {
    threechains::Context context({.transport = threechains::Transport::tcp, .reuse_address = true});
  }
  if (!preset) CHECK((std::getenv("UCX_RDMA_CM_REUSEADDR") != nullptr) == compat::has_component("rdmacm"));
}

// A peer maps its ring (a MemoryRegion): it must never show what this
// process freed, such as the ring of a peer that left. A Context leaves UCX
// only the allocation methods that map fresh pages (ALLOC_PRIO), so nothing
// is cleared page by page; where the user chose others (UCX_ALLOC_PRIO),
// MemoryRegion clears what it gets. Each region here is filled before it is
// freed, so a reused one would show it.
TEST_CASE("a MemoryRegion never holds what this process freed, whichever way UCX allocates it",
          "[ucx][compat][security]") {
  // Pages of the region in memory: a region cleared byte by byte has all
  // of them; one left as the kernel gave it, next to none.
  const auto resident_pages = [](const threechains::MemoryRegion& region) {
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t first = reinterpret_cast<uintptr_t>(region.data()) & ~(page - 1);
    const uintptr_t end = reinterpret_cast<uintptr_t>(region.data()) + region.size();
    std::vector<unsigned char> in_memory((end - first + page - 1) / page);
    REQUIRE(mincore(reinterpret_cast<void*>(first), end - first, in_memory.data()) == 0);
    return static_cast<std::size_t>(
        std::count_if(in_memory.begin(), in_memory.end(), [](unsigned char p) { return p & 1; }));
  };
  const auto fresh_each_time = [&](threechains::Transport transport, bool left_as_given) {
    threechains::Context context({.transport = transport});
    for (int round = 0; round < 4; ++round) {
      INFO("round " << round);
      threechains::MemoryRegion region(context, std::size_t{2} << 20);
      // 512 pages; fresh, only what UCX itself touched (its segment's head).
      if (left_as_given) CHECK(resident_pages(region) < 16);
      CHECK(std::all_of(region.data(), region.data() + region.size(),
                        [](std::byte b) { return b == std::byte{0}; }));
      std::memset(region.data(), 0xa5, region.size());
    }
  };
  // Here UCX allocates from SysV segments, fresh each time, on shm and tcp
  // Contexts alike; where it cannot (SysV's segment limit, a full /dev/shm)
  // UCX's own default would fall back to malloc, which this test cannot
  // bring about: what the library leaves UCX instead is read from UCX's
  // source (uct/base/uct_mem.c, 1.16, 1.18, 1.22), and the heap section
  // below shows the clearing that remains where a user chose malloc.
  SECTION("as the library leaves UCX to allocate: fresh pages, not cleared") {
    REQUIRE(std::getenv("UCX_ALLOC_PRIO") == nullptr);
    fresh_each_time(threechains::Transport::shared_memory, true);
    fresh_each_time(threechains::Transport::tcp, true);
  }
  SECTION("from the heap, as a user may choose") {
    REQUIRE(setenv("UCX_ALLOC_PRIO", "heap", 1) == 0);
    fresh_each_time(threechains::Transport::tcp, false);
    unsetenv("UCX_ALLOC_PRIO");
  }
}
