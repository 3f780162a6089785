// Small pieces several benchmark programs share.
#pragma once

#include <threechains/threechains.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

namespace bench {

// The median of `v` (0 for none): what every figure reports, on a noisy machine.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Streams the cached counter (an 8-byte 1) in batches of 256 until `done()`;
// frames per second over the whole time, flushed (every frame ran). `sent`
// counts them for the check against the target's counter.
template <class Done>
double stream_counter(threechains::Channel& channel, const threechains::Ifunc& counter,
                      uint64_t& sent, Done&& done) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  uint64_t frames = 0;
  const uint64_t one = 1;
  do {
    for (int i = 0; i < 256; ++i)
      (void)channel.send_bytes(counter, std::as_bytes(std::span(&one, 1)));
    frames += 256;
  } while (!done());
  channel.flush();
  sent += frames;
  return static_cast<double>(frames) / std::chrono::duration<double>(Clock::now() - start).count();
}

// A `done` for stream_counter: true once `seconds` have passed.
inline auto for_seconds(double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  return [end] { return std::chrono::steady_clock::now() >= end; };
}

}  // namespace bench
