// libFuzzer target: every control message of the protocol, as a peer could
// send it. Each input is an Active Message — its id chosen among the
// protocol's (HELLO, PROOF, CODE, BYE, FRAME, WELCOME, CHALLENGE, NEED_CODE,
// CREDIT, CODE_REFUSED), its header and data from the input — sent on an
// authenticated connection to a real Receiver, or (the first byte's top bit)
// on a fresh connection that never proved a key, so every pre-authentication
// path is reached (HELLO with any fields and rkey, PROOF, frames, code, goodbyes
// before the handshake). With the top two bits, the input is instead a
// proven peer's credit word (rkey bytes and an address shift): its rkey
// checks and UCX's unpack, reachable only after a proof. The source runs in a child process (see
// forked_source.hpp for why); this process polls the Receiver meanwhile.
// Whatever the input does (a second HELLO, a forged PROOF, a goodbye), the
// source reconnects and the next input finds a Receiver that still serves.
#include "engine/protocol.hpp"
#include "forked_source.hpp"

#include <array>
#include <cstring>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace threechains::detail;
  static threechains::fuzz::ForkedSource link;
  static constexpr std::array kIds = {kAmHello,  kAmProof,       kAmCode,      kAmBye,
                                      kAmFrame,  kAmWelcome,     kAmChallenge, kAmNeedCode,
                                      kAmCredit, kAmCodeRefused, kAmDoorbell};
  if (size < 2) return 0;
  const unsigned id = kIds[(data[0] & 0x7f) % kIds.size()];
  const std::size_t header_length = std::min<std::size_t>(data[1], size - 2);
  const std::span<const uint8_t> header(data + 2, header_length);
  const std::span<const uint8_t> body(data + 2 + header_length, size - 2 - header_length);
  if ((data[0] & 0xc0) == 0xc0) {  // a proven peer's credit word: rkey and address shift
    int64_t shift = 0;
    std::memcpy(&shift, header.data(), std::min(header.size(), sizeof(shift)));
    link.deliver_credit(body, shift);
    return 0;
  }
  const bool unauthenticated = (data[0] & 0x80) != 0;
  link.deliver(unauthenticated, id, header, body);
  return 0;
}
