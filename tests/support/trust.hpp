// The tests run secured, as a deployment would: the build's development key
// (keys/dev.key, made by threechains_add_key) proves every test source and
// signs every test ifunc; test Receivers trust it and nothing else.
#pragma once

#include <threechains/threechains.hpp>

namespace threechains::test {

[[nodiscard]] inline const KeyPair& test_identity() {
  static const KeyPair key = KeyPair::load(TC_DEV_KEY);
  return key;
}

[[nodiscard]] inline Trust test_trust() {
  const PublicKey key = test_identity().public_key();
  return Trust().allow_peer(key).allow_native_code_signer(key);
}

// Options a test left at the default (which refuses everyone) trust the test key.
[[nodiscard]] inline ReceiverOptions secured(ReceiverOptions options) {
  if (options.trust.refuses_every_peer()) options.trust = test_trust();
  return options;
}

[[nodiscard]] inline ChannelOptions identified(ChannelOptions options) {
  if (!options.identity) options.identity = test_identity();
  return options;
}

[[nodiscard]] inline NodeOptions secured(NodeOptions options) {
  options.receiver = secured(std::move(options.receiver));
  options.channel = identified(std::move(options.channel));
  return options;
}

}  // namespace threechains::test
