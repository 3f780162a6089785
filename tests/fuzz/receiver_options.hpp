// The Receiver the live-connection fuzzers aim at: it trusts `key` for peers
// and code, stays quiet about the refusals that are the point, and drops a
// handshake after 200 ms so dead inputs do not pile up.
#pragma once

#include <threechains/threechains.hpp>

#include <chrono>

namespace threechains::fuzz {

inline ReceiverOptions fuzz_receiver_options(const KeyPair& key) {
  ReceiverOptions options;
  options.trust = Trust().allow_peer(key.public_key()).allow_code_signer(key.public_key());
  options.on_error = [](const Error&) {};  // rejections are the point; stay quiet
  options.limits.handshake_timeout = std::chrono::milliseconds(200);
  return options;
}

}  // namespace threechains::fuzz
