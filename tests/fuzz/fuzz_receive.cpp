// libFuzzer target: the whole receive path. Each input becomes the bytes of
// one frame in a real ring slot (shared memory, a real authenticated
// connection), then the Receiver polls: frame validation, the code path up to
// the signature check (unsigned or forged code never reaches LLVM), cache
// misses and their answers, credits. The first byte chooses whether the
// harness makes the sequence right (so inputs get past the sequence check).
#include "live_link.hpp"

#include <cstring>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static threechains::fuzz::LiveLink link;
  if (size < 1) return 0;
  const bool fix_sequence = (data[0] & 1) != 0;
  std::vector<std::byte> frame(size - 1);
  if (!frame.empty()) std::memcpy(frame.data(), data + 1, frame.size());
  threechains::Channel& channel = link.channel();
  if (frame.size() > channel.slot_size() - 8) return 0;  // the source refuses those itself
  if (fix_sequence && frame.size() >= sizeof(threechains::FrameHeader)) {
    const auto sequence = static_cast<uint32_t>(channel.stats().frames_sent + 1);
    std::memcpy(frame.data() + offsetof(threechains::FrameHeader, sequence), &sequence,
                sizeof(sequence));
  }
  try {
    threechains::ChannelAccess::send_raw_frame(channel, frame);
  } catch (const threechains::Error&) {
    link.ensure_connected();
    return 0;
  }
  link.settle();
  link.ensure_connected();
  return 0;
}
