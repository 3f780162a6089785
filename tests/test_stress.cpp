// Invariants 1 and 3 under load: 100,000 frames of random sizes (1 B .. 64 KiB)
// through a 4-slot ring between two real processes. The checker ifunc verifies
// every payload byte at the target, so a torn, partial, overwritten, lost or
// reordered frame shows up as a bad or missing frame.
#include "support/pattern.h"
#include "support/two_process.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

using namespace threechains;
using namespace threechains::test;

namespace {

constexpr uint64_t kSeed = 0x7c0ffee5eed5ULL;
constexpr std::size_t kMaxPayload = 64 * 1024;

uint64_t frame_count() {
  // THREECHAINS_STRESS_FRAMES lets a developer run a longer soak.
  if (const char* env = std::getenv("THREECHAINS_STRESS_FRAMES"))
    return std::strtoull(env, nullptr, 10);
  return 100000;
}

void fill_pattern(std::byte* out, uint64_t index, std::size_t size) {
  std::size_t at = 0;
  for (; at + 8 <= size; at += 8) {
    const uint64_t word = pattern_word(kSeed, index, at / 8);
    std::memcpy(out + at, &word, 8);
  }
  if (at < size) {
    const uint64_t last = pattern_word(kSeed, index, at / 8);
    std::memcpy(out + at, &last, size - at);  // little-endian: low bytes first
  }
}

}  // namespace

TEMPLATE_TEST_CASE("100,000 random-size frames through a 4-slot ring arrive whole and in order",
                   "[ucx][stress]", Shm, Tcp, TcpPut, ShmPut, ShmAm) {
  const uint64_t frames = frame_count();
  ChildTarget<pattern_state> target(context_for<TestType>(), [](ChildContext& context) {
    static pattern_state state{kSeed, kMaxPayload, 0, 0, 0, 0};
    context.receiver.set_target_args(&state);
    ChildTarget<pattern_state>::serve_until_closed(context.receiver, 1, std::chrono::seconds(600));
    if (!context.errors.empty()) throw std::runtime_error(context.errors.front());
    return state;
  });
  const Ifunc checker = Ifunc::load(TC_CHECKER_BITCODE);
  TestSource source(
      context_for<TestType>(), target.port(),
      options_for<TestType>({.slots = 4, .slot_size = kMaxPayload + 64 + checker.code().size()}));
  REQUIRE(source.channel.slots() == 4);
  // Odd frames go from one reused buffer through send(span): over tcp, those
  // of Channel::kGatherBytes or more travel from it without a copy, so a send
  // that returned before UCX let go of the buffer would tear the next frame.
  // Now and then one of them carries the code as well (three pieces).
  std::vector<std::byte> buffer(kMaxPayload);
  for (uint64_t i = 0; i < frames; ++i) {
    const std::size_t size = pattern_size(kSeed, i, kMaxPayload);
    if (i % 2 == 0) {
      (void)source.channel.send_with(checker, size,
                                     [&](std::byte* payload) { fill_pattern(payload, i, size); });
    } else {
      if (i % 1001 == 0) source.channel.forget_held_code();
      fill_pattern(buffer.data(), i, size);
      (void)send(source.channel, checker, std::span<const std::byte>(buffer.data(), size));
    }
  }
  // Over AM delivery the large odd frames took the gathered path.
  if (source.channel.delivery() == Delivery::active_message) {
    CHECK(source.channel.stats().frames_gathered > frames / 8);
  } else {
    CHECK(source.channel.stats().frames_gathered == 0);
  }
  source.channel.close();

  const pattern_state result = target.result(std::chrono::seconds(600));
  INFO("first bad frame: " << result.first_bad);
  CHECK(result.bad == 0);
  CHECK(result.good == frames);
  CHECK(result.next_index == frames);
}
