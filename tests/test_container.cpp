// Code containers: packing, inspection, triple matching, and rejection of
// malformed or foreign containers, on real clang-22-built images.
#include <threechains/codec.hpp>
#include <threechains/container.hpp>
#include <threechains/ifunc.hpp>

#include <catch2/catch.hpp>

using namespace threechains;

TEST_CASE("a built container names its ifunc, codec and triples", "[container]") {
  const Ifunc bitcode = Ifunc::load(TC_COUNTER_BITCODE);
  CHECK(bitcode.name() == "counter");
  CHECK(bitcode.codec() == CodecId::bitcode);
  REQUIRE(bitcode.info().triples.size() == 2);
  CHECK(same_target(bitcode.info().triples[0], "x86_64-linux-gnu"));
  CHECK(same_target(bitcode.info().triples[1], "aarch64-linux-gnu"));
  CHECK(bitcode.id() == code_identity(bitcode.code()));

  const Ifunc binary = Ifunc::load(TC_COUNTER_BINARY);
  CHECK(binary.codec() == CodecId::binary);
  CHECK(binary.id() != bitcode.id());
}

TEST_CASE("triples match once normalised", "[container]") {
  CHECK(same_target("x86_64-pc-linux-gnu", "x86_64-linux-gnu"));
  CHECK(same_target("x86_64-unknown-linux-gnu", "x86_64-linux-gnu"));
  CHECK(same_target("x86_64-linux", "x86_64-unknown-linux-gnu"));
  CHECK_FALSE(same_target("aarch64-linux-gnu", "x86_64-linux-gnu"));
  CHECK_FALSE(same_target("x86_64-apple-darwin", "x86_64-linux-gnu"));
  CHECK(same_target(host_triple(), host_triple()));
}

TEST_CASE("pack and inspect round-trip", "[container]") {
  IfuncLibrary library{"demo", {}, {"libm.so.6", "libz.so.1"}};
  library.images.push_back(
      {"x86_64-linux-gnu", CodecId::binary, std::vector<std::byte>(13, std::byte{1})});
  library.images.push_back(
      {"aarch64-linux-gnu", CodecId::binary, std::vector<std::byte>(7, std::byte{2})});
  const auto container = BinaryCodec::encode(library);
  const ContainerInfo info = inspect_container(container);
  CHECK(info.name == "demo");
  CHECK(info.codec == CodecId::binary);
  CHECK(info.deps == std::vector<std::string>{"libm.so.6", "libz.so.1"});
  CHECK(info.image_sizes == std::vector<std::size_t>{13, 7});
  CHECK_THROWS_WITH(BitcodeCodec::encode(library), Catch::Contains("this codec ships bitcode"));
}

TEST_CASE("containers ship compressed and stripped", "[container]") {
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  const std::vector<std::byte> raw = unpacked_container(counter.code());
  CHECK(counter.code().size() < raw.size());  // the zstd frame is smaller
  // Fat x86_64 + aarch64 counter: at most 3 KiB (unoptimised IR, for the
  // target's pipeline: 2.7 KiB; clang-optimised: 2.5 KiB), plus the
  // signature's fixed 104-byte envelope (magic, key, signature) if signed.
  const std::size_t envelope = counter.info().claimed_signer.empty() ? 0 : 104;
  CHECK(counter.code().size() - envelope <= 3072);
  // Below 4 KiB a container ships as it is: inflating it would cost a cold
  // first call more than its bytes cost to send. The fat binary counter is one.
  const Ifunc binary = Ifunc::load(TC_COUNTER_BINARY);
  const std::size_t binary_envelope = binary.info().claimed_signer.empty() ? 0 : 104;
  CHECK(binary.code().size() - binary_envelope < 4096);
  CHECK(unpacked_container(binary.code()).size() == binary.code().size() - binary_envelope);
  // The unpacked form parses to the same ifunc.
  CHECK(inspect_container(raw).name == "counter");
  CHECK(inspect_container(raw).triples == counter.info().triples);
}

TEST_CASE("a corrupt or oversized compressed container is refused", "[container]") {
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  std::vector<std::byte> bytes(counter.code().begin(), counter.code().end());
  SECTION("truncated zstd frame") {
    bytes.resize(bytes.size() / 2);
    CHECK_THROWS_WITH(inspect_container(bytes), Catch::Contains("zstd"));
  }
  SECTION("a frame header claiming a huge size") {
    // zstd magic, then a frame header with an 8-byte content size of 2^40.
    std::vector<std::byte> bomb{std::byte{0x28}, std::byte{0xB5}, std::byte{0x2F}, std::byte{0xFD},
                                std::byte{0xC0}};
    for (int i = 0; i < 8; ++i) bomb.push_back(std::byte{uint8_t(i == 5 ? 1 : 0)});
    bomb.resize(bomb.size() + 16, std::byte{0});
    CHECK_THROWS_AS(inspect_container(bomb), Error);
  }
}

TEST_CASE("malformed containers are rejected with a clear error", "[container]") {
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  std::vector<std::byte> bytes = unpacked_container(counter.code());

  SECTION("empty") {
    CHECK_THROWS_WITH(inspect_container({}), Catch::Contains("empty"));
  }
  SECTION("truncated inside an image") {
    bytes.resize(bytes.size() - 100);
    CHECK_THROWS_WITH(inspect_container(bytes), Catch::Contains("only"));
  }
  SECTION("truncated inside a header") {
    bytes.resize(10);
    CHECK_THROWS_WITH(inspect_container(bytes), Catch::Contains("truncated header"));
  }
  SECTION("not an offload binary") {
    bytes[0] = std::byte{0};
    CHECK_THROWS_WITH(inspect_container(bytes), Catch::Contains("bad magic"));
  }
  SECTION("a string table larger than the image") {
    // Entry at EntryOffset; claim 2^40 strings (Entry::NumStrings, at +16).
    uint64_t entry_offset = 0;
    std::memcpy(&entry_offset, bytes.data() + 16, 8);
    const uint64_t far = 1ull << 40;
    std::memcpy(bytes.data() + entry_offset + 16, &far, 8);  // Entry::NumStrings
    CHECK_THROWS_WITH(inspect_container(bytes), Catch::Contains("string table out of bounds"));
  }
  // Found by tests/fuzz/fuzz_container: LLVM reads the entry through a typed
  // pointer, so a misaligned offset was undefined behaviour inside LLVM.
  SECTION("an entry at a misaligned offset") {
    uint64_t entry_offset = 0;
    std::memcpy(&entry_offset, bytes.data() + 16, 8);  // Header::EntryOffset
    entry_offset += 1;
    std::memcpy(bytes.data() + 16, &entry_offset, 8);
    CHECK_THROWS_WITH(inspect_container(bytes), Catch::Contains("misaligned entry"));
  }
  SECTION("a string table at a misaligned offset") {
    uint64_t entry_offset = 0;
    std::memcpy(&entry_offset, bytes.data() + 16, 8);
    uint64_t string_offset = 0;
    std::memcpy(&string_offset, bytes.data() + entry_offset + 8, 8);  // Entry::StringOffset
    string_offset += 4;
    std::memcpy(bytes.data() + entry_offset + 8, &string_offset, 8);
    CHECK_THROWS_WITH(inspect_container(bytes), Catch::Contains("misaligned string table"));
  }
}
