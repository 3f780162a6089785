// The JIT cache on real LLVM: compile bitcode and link objects for this host,
// cache by identity, evict, and reject what cannot run here.
#include <threechains/codec.hpp>
#include <threechains/ifunc.hpp>
#include <threechains/jit_cache.hpp>

#include <catch2/catch.hpp>

using namespace threechains;

namespace {

struct NotACodec {  // has every member but never opts in
  static constexpr CodecId id = CodecId::bitcode;
  static std::vector<std::byte> encode(const IfuncLibrary&) { return {}; }
  static LoadResult decode(JitCache&, CodeId, std::span<const std::byte>) { return {}; }
};

struct CodecWithoutDecode {
  using codec_concept = codec_tag;
  static constexpr CodecId id = CodecId::bitcode;
  static std::vector<std::byte> encode(const IfuncLibrary&) { return {}; }
};

template <class C>
const char* counter_container() {
  return C::id == CodecId::bitcode ? TC_COUNTER_BITCODE : TC_COUNTER_BINARY;
}

}  // namespace

TEST_CASE("Codec is modelled by both codecs and by nothing that does not opt in", "[codec]") {
  STATIC_REQUIRE(Codec<BitcodeCodec>);
  STATIC_REQUIRE(Codec<BinaryCodec>);
  STATIC_REQUIRE_FALSE(Codec<NotACodec>);
  STATIC_REQUIRE_FALSE(Codec<CodecWithoutDecode>);
  STATIC_REQUIRE_FALSE(Codec<int>);
}

TEMPLATE_TEST_CASE("the counter ifunc runs after decoding", "[jit]", BitcodeCodec, BinaryCodec) {
  const Ifunc counter = Ifunc::load(counter_container<TestType>());
  REQUIRE(counter.codec() == TestType::id);
  JitCache cache;
  CHECK(cache.find(counter.id()) == nullptr);
  const LoadResult loaded = TestType::decode(cache, counter.id(), counter.code());
  REQUIRE(loaded.entry != nullptr);
  CHECK(same_target(loaded.triple, host_triple()));
  CHECK(cache.find(counter.id()) == loaded.entry);

  uint64_t total = 0;
  uint64_t increment = 5;
  loaded.entry(&increment, sizeof(increment), &total);
  loaded.entry(nullptr, 0, &total);
  CHECK(total == 6);

  SECTION("loading again hits the cache") {
    CHECK(cache.load(counter.id(), TestType::id, counter.code()).entry == loaded.entry);
    CHECK(cache.size() == 1);
  }
  SECTION("its instructions are named after its function, until it is evicted") {
    std::uintptr_t offset = 99;
    const auto* entry = reinterpret_cast<const std::byte*>(loaded.entry);
    const std::string* name = cache.function_at(entry, offset);
    REQUIRE(name != nullptr);
    CHECK(*name == "counter_main");
    CHECK(offset == 0);
    REQUIRE(cache.function_at(entry + 3, offset) != nullptr);
    CHECK(offset == 3);
    CHECK(cache.function_at(&total, offset) == nullptr);  // not code at all
    CHECK(cache.evict(counter.id()));
    CHECK(cache.function_at(entry, offset) == nullptr);
  }
  SECTION("eviction frees the code and a reload works") {
    CHECK(cache.evict(counter.id()));
    CHECK_FALSE(cache.evict(counter.id()));
    CHECK(cache.find(counter.id()) == nullptr);
    const LoadResult again = cache.load(counter.id(), TestType::id, counter.code());
    again.entry(nullptr, 0, &total);
    CHECK(total == 7);
  }
}

TEST_CASE("two ifuncs with the same helper names load side by side", "[jit]") {
  const Ifunc one = Ifunc::load(TC_COUNTER_BITCODE);
  const Ifunc two = Ifunc::load(TC_COUNTER_BY_TWO);
  REQUIRE(one.name() == two.name());
  REQUIRE(one.id() != two.id());
  JitCache cache;
  const IfuncMain a = cache.load(one.id(), CodecId::bitcode, one.code()).entry;
  const IfuncMain b = cache.load(two.id(), CodecId::bitcode, two.code()).entry;
  REQUIRE(a != b);
  uint64_t total = 0;
  a(nullptr, 0, &total);
  b(nullptr, 0, &total);
  CHECK(total == 3);
}

TEST_CASE("the JIT cache rejects what it cannot run and stays usable", "[jit]") {
  JitCache cache;
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);

  SECTION("a container without this host's triple names the triples it has") {
    const Ifunc foreign = Ifunc::load(TC_COUNTER_AARCH64_ONLY);
    try {
      (void)cache.load(foreign.id(), CodecId::bitcode, foreign.code());
      FAIL("loaded an aarch64-only container on " << host_triple());
    } catch (const Error& e) {
      CHECK(e.is(errc::no_image_for_target));
      CHECK_THAT(e.what(),
                 Catch::Contains("aarch64-unknown-linux-gnu") && Catch::Contains(host_triple()));
    }
  }
  SECTION("code that does not hash to its identity") {
    CHECK_THROWS_MATCHES(
        cache.load(counter.id() + 1, CodecId::bitcode, counter.code()), Error,
        Catch::Predicate<Error>([](const Error& e) { return e.is(errc::code_identity_mismatch); }));
  }
  SECTION("a frame whose codec disagrees with the container") {
    CHECK_THROWS_MATCHES(
        cache.load(counter.id(), CodecId::binary, counter.code()), Error,
        Catch::Predicate<Error>([](const Error& e) { return e.is(errc::bad_codec); }));
  }
  SECTION("an unresolved external symbol is named") {
    const Ifunc missing = Ifunc::load(TC_NEEDS_MISSING_SYMBOL);
    try {
      (void)cache.load(missing.id(), CodecId::bitcode, missing.code());
      FAIL("linked an ifunc with an undefined symbol");
    } catch (const Error& e) {
      CHECK(e.is(errc::symbol_not_found));
      CHECK_THAT(e.what(), Catch::Contains("threechains_test_no_such_function"));
    }
  }
  SECTION("an object with native ELF thread-local storage is refused, saying why") {
    const Ifunc native_tls = Ifunc::load(TC_NATIVE_TLS);
    try {
      (void)cache.load(native_tls.id(), CodecId::binary, native_tls.code());
      FAIL("linked native TLS without the ORC runtime");
    } catch (const Error& e) {
      CHECK(e.is(errc::jit_failed));
      CHECK_THAT(e.what(),
                 Catch::Contains("thread-local storage") && Catch::Contains("-femulated-tls"));
    }
  }
  SECTION("a dependency the import policy does not allow is refused, named") {
    IfuncLibrary library{"counter", {}, {"/tmp/libm.so.6"}};
    library.images.push_back({host_triple(), CodecId::bitcode, {}});
    const auto container = BitcodeCodec::encode(library);
    try {
      (void)cache.load(code_identity(container), CodecId::bitcode, container);
      FAIL("loaded an ifunc whose dependency the policy does not allow");
    } catch (const Error& e) {
      CHECK(e.is(errc::import_refused));
      CHECK_THAT(e.what(), Catch::Contains("/tmp/libm.so.6") && Catch::Contains("allow_library"));
    }
  }
  SECTION("a dependency that cannot be loaded is named") {
    IfuncLibrary library{"counter", {}, {"libthreechains-no-such-library.so.9"}};
    // The dependency is loaded before the image is even parsed, so an empty
    // image is enough to show which library is missing.
    library.images.push_back({host_triple(), CodecId::bitcode, {}});
    const auto container = BitcodeCodec::encode(library);
    JitCache allowing({.imports = ImportPolicy().allow_library("libthreechains-no-such-library.so.9")});
    try {
      (void)allowing.load(code_identity(container), CodecId::bitcode, container);
      FAIL("loaded an ifunc whose dependency does not exist");
    } catch (const Error& e) {
      CHECK(e.is(errc::dependency_not_found));
      CHECK_THAT(e.what(), Catch::Contains("libthreechains-no-such-library.so.9"));
    }
  }
  // Whatever was rejected above, the cache still loads and runs good code.
  const IfuncMain entry = cache.load(counter.id(), CodecId::bitcode, counter.code()).entry;
  uint64_t total = 0;
  entry(nullptr, 0, &total);
  CHECK(total == 1);
}
