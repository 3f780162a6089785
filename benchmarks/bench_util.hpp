// Small pieces several benchmark programs share.
#pragma once

#include <threechains/threechains.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
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

// The counter of a threechains-attack-target (its "report" line's fourth
// field), which is then told to quit; 0 if it did not report in 10 s.
template <class Target>
uint64_t attack_target_counter(Target& target) {
  using namespace std::chrono_literals;
  target.write_line("report");
  const std::optional<std::string> report = target.read_line_starting("report ", 10s);
  target.write_line("quit");
  uint64_t counted = 0;
  if (report) {
    char c0[32], c1[32], c2[32];
    unsigned long long value = 0;
    if (std::sscanf(report->c_str(), "report %31s %31s %31s %llu", c0, c1, c2, &value) == 4)
      counted = value;
  }
  return counted;
}

// A `done` for stream_counter: true once `seconds` have passed.
inline auto for_seconds(double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  return [end] { return std::chrono::steady_clock::now() >= end; };
}

}  // namespace bench
