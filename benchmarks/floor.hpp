// The physical floors a cached ifunc's latency is held against (issue 21,
// item 4), measured by the driver of threechains-bench before it starts any
// UCX process:
//   shm  one 64-byte cache line ping-ponged between two processes (a shared
//        mapping; each side spins on the other's store);
//   tcp  an 8-byte message ping-ponged over a loopback TCP connection with
//        plain sockets, TCP_NODELAY, each side spinning on a non-blocking
//        recv (as UCX's own progress spins).
// Both return one way (half the round trip), in microseconds, the median of
// `rounds` runs of `iterations` round trips.
//
// And the floor a streaming rate is held against over shm: a bare ring of
// `window` slots between two processes (a 64-byte line per slot: a commit
// word and an 8-byte payload; the consumer adds each payload up and stores
// its count after every frame; the producer waits while `window` frames are
// unconsumed), in million frames a second, the median of `rounds` runs.
#pragma once

#include <cstdint>

namespace bench {

[[nodiscard]] double cache_line_floor_us(uint64_t iterations, int rounds);
[[nodiscard]] double tcp_loopback_floor_us(uint64_t iterations, int rounds);
[[nodiscard]] double ring_rate_floor_mps(uint32_t window, uint64_t iterations, int rounds);

}  // namespace bench
