// Trust between real processes: who may connect (Ed25519 handshake), whose
// code runs (signed containers), what it may import (the allowlist). Every
// refusal is checked on both sides: the target counts and reports it, the
// source sees why.
#include "engine/testing.hpp"
#include "ucx/remote_checks.hpp"
#include "support/counter_target.hpp"
#include "support/two_process.hpp"

#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <fstream>

using namespace threechains;
using namespace threechains::test;

namespace {

auto error_with(errc code, std::string text) {
  return Catch::Predicate<Error>(
      [code, text](const Error& e) {
        return e.is(code) && std::string(e.what()).find(text) != std::string::npos;
      },
      "an Error of the expected code, saying \"" + text + "\"");
}

// A target that counts, trusting what `options` says (the test key if nothing).
ChildTarget<CounterResult> trusting_target(Transport transport, ReceiverOptions options,
                                           uint64_t sources = 1) {
  return counter_target(transport, nullptr, std::move(options), sources);
}

}  // namespace

TEST_CASE("keys and signatures round-trip through their files", "[trust]") {
  const KeyPair key = KeyPair::generate();
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("threechains-keys-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  key.save(dir + "/k.key", dir + "/k.pub");
  CHECK((std::filesystem::status(dir + "/k.key").permissions() & std::filesystem::perms::group_read) ==
        std::filesystem::perms::none);
  CHECK(KeyPair::load(dir + "/k.key").public_key() == key.public_key());
  CHECK(PublicKey::load(dir + "/k.pub") == key.public_key());
  // A secret saved over a readable file ends up owner-only all the same.
  std::filesystem::permissions(dir + "/k.key", std::filesystem::perms::all);
  key.save(dir + "/k.key", "");
  CHECK((std::filesystem::status(dir + "/k.key").permissions() & std::filesystem::perms::all) ==
        (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));
  // A symlink planted where the secret goes is replaced, never written
  // through: the file it points at keeps its bytes (std::ofstream followed it).
  {
    const std::string canary = dir + "/canary";
    std::ofstream(canary) << "canary\n";
    std::filesystem::create_symlink(canary, dir + "/planted.key");
    key.save(dir + "/planted.key", "");
    std::ifstream in(canary);
    const std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(kept == "canary\n");
    CHECK(std::filesystem::is_regular_file(std::filesystem::symlink_status(dir + "/planted.key")));
    CHECK(KeyPair::load(dir + "/planted.key").public_key() == key.public_key());
  }
  // Into a directory that is not there: the error names the directory.
  CHECK_THROWS_MATCHES(key.save(dir + "/missing/k.key", ""), Error,
                       error_with(errc::io, "its directory '" + dir + "/missing' does not exist"));
  CHECK_THROWS_MATCHES(PublicKey::load(dir + "/k.key"), Error,
                       error_with(errc::invalid_argument, "not a threechains-ed25519-public"));
  const std::vector<std::byte> message{std::byte{1}, std::byte{2}};
  const KeyPair::Signature signature = key.sign(message);
  CHECK(verify_signature(key.public_key(), message, signature));
  CHECK_FALSE(verify_signature(KeyPair::generate().public_key(), message, signature));
  std::filesystem::remove_all(dir);

  // A signed container names its signer; tampering is caught, unsigned is not signed.
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  REQUIRE(container_signer(counter.code()) == test_identity().public_key());
  std::vector<std::byte> tampered(counter.code().begin(), counter.code().end());
  tampered[tampered.size() / 2] ^= std::byte{0x40};
  CHECK_THROWS_MATCHES(container_signer(tampered), Error,
                       error_with(errc::code_refused, "does not verify"));
  const std::vector<std::byte> resigned = sign_container(counter.code(), key);
  CHECK(container_signer(resigned) == key.public_key());
  CHECK(inspect_container(resigned).name == "counter");
}

TEST_CASE("a Receiver with no trust configured refuses every peer and says how to configure",
          "[trust][ucx]") {
  Worker target_worker(Context({.transport = Transport::tcp}));
  std::vector<std::string> errors;
  ReceiverOptions options;  // no trust: the secure default
  Receiver receiver(target_worker, options);
  receiver.start();
  Worker source_worker(Context({.transport = Transport::tcp}));
  Source source(source_worker);
  CHECK_THROWS_MATCHES(
      source.connect("127.0.0.1", receiver.port(), {.identity = test_identity()}), Error,
      error_with(errc::peer_refused, "Trust::anyone()"));
  receiver.stop();
  CHECK(receiver.stats().peers_refused == 1);
  CHECK(receiver.peers() == 0);
}

TEMPLATE_TEST_CASE("only sources that prove a trusted key get a ring; the others do not stop it",
                   "[trust][ucx]", Shm, Tcp) {
  // Three sources come: a stranger, one with no key, and ours, which sends.
  auto target = trusting_target(TestType::transport, {}, 1);
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  Worker worker(Context({.transport = TestType::transport}));
  Source source(worker);
  CHECK_THROWS_MATCHES(
      source.connect("127.0.0.1", target.port(), {.identity = KeyPair::generate()}), Error,
      error_with(errc::peer_refused, "not one this Receiver trusts"));
  CHECK_THROWS_MATCHES(source.connect("127.0.0.1", target.port()), Error,
                       error_with(errc::peer_refused, "ChannelOptions::identity"));
  Channel channel = source.connect("127.0.0.1", target.port(), identified(options_for<TestType>()));
  for (int i = 0; i < 100; ++i) (void)send(channel, counter, uint64_t{1});
  channel.close();
  const CounterResult result = target.result();
  INFO(result.first_error);
  CHECK(result.counter == 100);
  CHECK(result.dispatched == 100);
  CHECK(result.errors == 2);  // the two refusals, reported
  CHECK_THAT(result.first_error, Catch::Contains("refused"));
}

TEST_CASE("a source that insists on the target's key sends only to that target",
          "[trust][ucx]") {
  ReceiverOptions options;
  options.identity = test_identity();
  auto target = trusting_target(Transport::tcp, options, 1);
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  Worker worker(Context({.transport = Transport::tcp}));
  Source source(worker);
  ChannelOptions wrong = identified({});
  wrong.target_key = KeyPair::generate().public_key();
  CHECK_THROWS_MATCHES(source.connect("127.0.0.1", target.port(), wrong), Error,
                       error_with(errc::peer_refused, "did not prove"));
  ChannelOptions right = identified({});
  right.target_key = test_identity().public_key();
  Channel channel = source.connect("127.0.0.1", target.port(), right);
  (void)send(channel, counter, uint64_t{5});
  channel.close();
  const CounterResult result = target.result();
  CHECK(result.counter == 5);
}

TEMPLATE_TEST_CASE("a signed ifunc that calls system() is refused at link, naming the symbol",
                   "[trust][imports][ucx]", Shm, Tcp) {
  for (const char* path : {TC_EVIL_SYSTEM_BITCODE, TC_EVIL_SYSTEM_BINARY}) {
    const Ifunc evil = Ifunc::load(path);
    const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
    REQUIRE(container_signer(evil.code()) == test_identity().public_key());
    const std::string witness = "/tmp/threechains-evil-" + std::to_string(getpid());
    std::filesystem::remove(witness);
    auto target = counter_target(TestType::transport);
    TestSource source(TestType::transport, target.port(), options_for<TestType>());
    char command[128];
    std::snprintf(command, sizeof(command), "touch %s", witness.c_str());
    (void)send(source.channel, evil, command);
    for (int i = 0; i < 10; ++i) (void)send(source.channel, counter, uint64_t{1});
    CHECK_THROWS_MATCHES(source.channel.close(), Error,
                         error_with(errc::import_refused, "imports 'system'"));
    const CounterResult result = target.result();
    INFO(path << ": " << result.first_error);
    CHECK_THAT(result.first_error, Catch::Contains("'system'") && Catch::Contains("ImportPolicy"));
    CHECK(result.rejected == 1);
    CHECK(result.counter == 10);  // the target kept serving
    CHECK_FALSE(std::filesystem::exists(witness));
  }
}

TEST_CASE("inline assembly in bitcode is refused before it is compiled", "[trust][imports]") {
  const Ifunc evil = Ifunc::load(TC_EVIL_ASM);
  JitCache cache;
  CHECK_THROWS_MATCHES(cache.load(evil.id(), evil.codec(), evil.code()), Error,
                       error_with(errc::import_refused, "inline assembly"));
  // Development: the unrestricted policy lets it run (a getpid system call).
  JitCache open({.imports = ImportPolicy::unrestricted()});
  long result = 0;
  open.load(evil.id(), evil.codec(), evil.code()).entry(nullptr, 0, &result);
  CHECK(result == getpid());
}

TEST_CASE("symbols come from a dependency only if that library defines them", "[trust][imports]") {
  // libm is allowed, and libm links libc: dlsym on libm's handle would find
  // libc's system(). The dependency resolves only what libm itself defines.
  const Ifunc evil = Ifunc::load(TC_EVIL_SYSTEM_VIA_LIBM);
  REQUIRE(evil.info().deps == std::vector<std::string>{"libm.so.6"});
  JitCache cache;
  CHECK_THROWS_MATCHES(cache.load(evil.id(), evil.codec(), evil.code()), Error,
                       error_with(errc::import_refused, "imports 'system'"));
}

TEST_CASE("a peer that names a trusted key but cannot sign for it gets no ring", "[trust][ucx]") {
  auto target = trusting_target(Transport::tcp, {}, 1);
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  Worker worker(Context({.transport = Transport::tcp}));
  Source source(worker);
  HandshakeAccess::forge_proofs(true);
  CHECK_THROWS_MATCHES(source.connect("127.0.0.1", target.port(), identified({})), Error,
                       error_with(errc::peer_refused, "does not verify"));
  HandshakeAccess::forge_proofs(false);
  Channel channel = source.connect("127.0.0.1", target.port(), identified({}));
  (void)send(channel, counter, uint64_t{3});
  channel.close();
  const CounterResult result = target.result();
  CHECK(result.counter == 3);
  CHECK(result.errors == 1);
  CHECK_THAT(result.first_error, Catch::Contains("does not verify"));
}

TEST_CASE("a source that pins the target's key refuses a target that never proves it",
          "[trust][ucx]") {
  // Trust::anyone() grants without a challenge: nothing proves the key. (The
  // source that refuses the ring leaves: two sources close in all.)
  auto target = trusting_target(Transport::shared_memory, {.trust = Trust::anyone()}, 2);
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  Worker worker(Context({.transport = Transport::shared_memory}));
  Source source(worker);
  ChannelOptions pinned = identified({});
  pinned.target_key = test_identity().public_key();
  CHECK_THROWS_MATCHES(source.connect("127.0.0.1", target.port(), pinned), Error,
                       error_with(errc::peer_refused, "did not prove"));
  Channel channel = source.connect("127.0.0.1", target.port(), identified({}));
  (void)send(channel, counter, uint64_t{4});
  channel.close();
  CHECK(target.result().counter == 4);
}

// Issue 19: the rkey a peer hands over is checked before UCX parses it (UCX
// 1.13's unpack takes no length and trusts the blob's own sizes).
TEST_CASE("a packed rkey whose framing does not fit its bytes is refused before UCX sees it",
          "[trust][ucx]") {
  const Context context({.transport = Transport::shared_memory});
  const MemoryRegion region(context, 64);
  const std::vector<std::byte> packed = region.pack_rkey();
  // Where its memory domains end (u64 map, u8 memory type, per domain a u8
  // size and its blob); what follows is the memory's system device (UCX
  // 1.14+: unknown, 0xff, for host memory) or nothing.
  uint64_t md_map = 0;
  std::memcpy(&md_map, packed.data(), sizeof(md_map));
  std::size_t domains_end = 9;
  for (int domain = 0; domain < std::popcount(md_map); ++domain)
    domains_end += 1 + static_cast<std::size_t>(packed.at(domains_end));
  REQUIRE(domains_end <= packed.size());
  const std::vector<std::byte> checked = detail::checked_packed_rkey(packed);
  CHECK(std::equal(packed.begin(), packed.begin() + static_cast<std::ptrdiff_t>(domains_end),
                   checked.begin()));
  // Then our own tail: device unknown, a run of 0xff, zeros.
  REQUIRE(checked.size() == domains_end + 1 + detail::kRkeyPadding);
  for (std::size_t i = domains_end; i < checked.size(); ++i) {
    INFO("byte " << i);
    CHECK(checked[i] == (i <= domains_end + detail::kRkeyTerminators ? std::byte{0xff} : std::byte{0}));
  }
  // A tail that claims distances (UCX 1.20+ would read them without a
  // length) is cut off after "unknown device".
  std::vector<std::byte> distances(packed.begin(), packed.begin() + static_cast<std::ptrdiff_t>(domains_end));
  for (const int byte : {0xff, 0x00, 0x10, 0x20, 0x01, 0x10, 0x20})
    distances.push_back(static_cast<std::byte>(byte));
  CHECK(detail::checked_packed_rkey(distances) == checked);

  const auto refused = [](std::vector<std::byte> bytes, const std::string& why) {
    CHECK_THROWS_MATCHES(detail::checked_packed_rkey(bytes), Error,
                         error_with(errc::protocol, why));
  };
  refused({}, "shorter than its header");
  refused(std::vector<std::byte>(packed.begin(), packed.begin() + 8), "shorter than its header");
  refused(std::vector<std::byte>(packed.begin(), packed.begin() + static_cast<std::ptrdiff_t>(domains_end) - 1),
          "run past its end");
  std::vector<std::byte> on_a_device(packed.begin(), packed.begin() + static_cast<std::ptrdiff_t>(domains_end));
  for (const int byte : {0x00, 0x00, 0x10, 0x20})  // device 0, then a distance with no end
    on_a_device.push_back(static_cast<std::byte>(byte));
  refused(on_a_device, "names a system device");
  std::vector<std::byte> no_domain = packed;
  std::fill(no_domain.begin(), no_domain.begin() + 8, std::byte{0});
  refused(no_domain, "names no memory domain");
  std::vector<std::byte> device = packed;
  device[8] = std::byte{1};  // UCS_MEMORY_TYPE_CUDA
  refused(device, "not host memory");
  std::vector<std::byte> every_domain = packed;
  std::fill(every_domain.begin(), every_domain.begin() + 8, std::byte{0xff});
  refused(every_domain, "run past its end");
}

// What a source does with a target's ring rkey, in one process: two workers
// on shared memory, one maps a region, the other unpacks its rkey. The range
// it names must come back as a fresh view of that region; a range the offset
// arithmetic puts in a mapping that was already there (here one we made;
// in life our heap, our own ring, another peer's ring) must not.
namespace {
// Checks rkeys as a kernel without PROCMAP_QUERY would, while it lives.
struct RkeysCheckedFromText {
  explicit RkeysCheckedFromText(bool on) { detail::check_rkeys_from_text_for_testing(on); }
  ~RkeysCheckedFromText() { detail::check_rkeys_from_text_for_testing(false); }
  RkeysCheckedFromText(const RkeysCheckedFromText&) = delete;
  RkeysCheckedFromText& operator=(const RkeysCheckedFromText&) = delete;
};
}  // namespace

TEST_CASE("an rkey's direct range is a fresh view of the segment it names, never a mapping we had",
          "[trust][ucx]") {
  const bool from_text = GENERATE(false, true);
  INFO((from_text ? "as without PROCMAP_QUERY" : "with PROCMAP_QUERY"));
  const RkeysCheckedFromText text_mode(from_text);
  const Context owner_context({.transport = Transport::shared_memory});
  const Context user_context({.transport = Transport::shared_memory});
  const Worker owner(owner_context);
  const Worker user(user_context);
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const MemoryRegion region(owner_context, 4 * page);
  const std::vector<std::byte> checked = detail::checked_packed_rkey(region.pack_rkey());
  ucp_address_t* owner_address = nullptr;
  std::size_t owner_address_size = 0;
  REQUIRE(ucp_worker_get_address(owner.handle(), &owner_address, &owner_address_size) == UCS_OK);
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  params.address = owner_address;
  ucp_ep_h endpoint = nullptr;
  REQUIRE(ucp_ep_create(user.handle(), &params, &endpoint) == UCS_OK);
  ucp_worker_release_address(owner.handle(), owner_address);
  const auto base = reinterpret_cast<uint64_t>(region.data());
  // A shared, writable mapping that is there before any unpack (below, the
  // offset UCX adds is aimed at it).
  void* had = mmap(nullptr, 4 * page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(had != MAP_FAILED);
  std::memset(had, 0x11, 4 * page);
  const auto unpacked = [&](uint64_t address, std::size_t size) {
    ucp_rkey_h rkey = nullptr;
    const detail::DirectRange range = detail::unpack_rkey(endpoint, checked, address, size, &rkey);
    return std::pair{range, rkey};
  };

  // The region itself, and a part of it: a view the unpack attached, of the
  // same memory (a store through it shows in the region).
  auto [whole, whole_rkey] = unpacked(base, region.size());
  REQUIRE(whole.pointer != nullptr);
  CHECK_FALSE(whole.outside);
  CHECK(whole.pointer != region.data());
  static_cast<std::byte*>(whole.pointer)[page + 7] = std::byte{0x5a};
  CHECK(region.data()[page + 7] == std::byte{0x5a});
  const auto attached_at = reinterpret_cast<uintptr_t>(whole.pointer);
  ucp_rkey_destroy(whole_rkey);
  auto [part, part_rkey] = unpacked(base + page, page);
  CHECK(part.pointer != nullptr);
  ucp_rkey_destroy(part_rkey);
  // Past its end: refused.
  auto [beyond, beyond_rkey] = unpacked(base + 3 * page, 2 * page);
  CHECK(beyond.pointer == nullptr);
  CHECK(beyond.outside);
  ucp_rkey_destroy(beyond_rkey);

  // The mapping we had, aimed at through the offset UCX adds: the segment is
  // attached where it was last time, unless something else mapped memory
  // meanwhile (then aim again; a true aim is what the test needs).
  const auto attached_now = [&] {
    void* at = nullptr;
    ucp_rkey_h probe = nullptr;
    REQUIRE(ucp_ep_rkey_unpack(endpoint, checked.data(), &probe) == UCS_OK);
    REQUIRE(ucp_rkey_ptr(probe, base, &at) == UCS_OK);
    ucp_rkey_destroy(probe);
    return reinterpret_cast<uintptr_t>(at);
  };
  bool aim_was_true = false;
  for (int attempt = 0; attempt < 5 && !aim_was_true; ++attempt) {
    const uintptr_t attach = attempt == 0 ? attached_at : attached_now();
    const uint64_t aimed = base + (reinterpret_cast<uintptr_t>(had) - attach);
    auto [stolen, stolen_rkey] = unpacked(aimed, page);
    CHECK(stolen.pointer == nullptr);
    CHECK(stolen.outside);
    ucp_rkey_destroy(stolen_rkey);
    aim_was_true = attached_now() == attach;  // the unpack's attach was there too
  }
  CHECK(aim_was_true);
  CHECK(static_cast<unsigned char*>(had)[0] == 0x11);
  munmap(had, 4 * page);

  ucp_request_param_t close{};
  close.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  close.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void* closing = ucp_ep_close_nbx(endpoint, &close);
  if (UCS_PTR_IS_PTR(closing)) {
    while (ucp_request_check_status(closing) == UCS_INPROGRESS) (void)user.progress();
    ucp_request_free(closing);
  }
}

// The range check of kernels without PROCMAP_QUERY (memory.hpp): a range
// counts only inside a shared, writable mapping made after the snapshot. And
// the lookup by address that unpack_rkey uses where the kernel has it; a
// forked child asks both about its own mappings, not its parent's.
TEST_CASE("a direct range must lie in one shared mapping made after the snapshot", "[trust][ucx]") {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const auto mapped = [&](int protection, int flags) {
    void* at = mmap(nullptr, 3 * page, protection, flags | MAP_ANONYMOUS, -1, 0);
    REQUIRE(at != MAP_FAILED);
    return static_cast<std::byte*>(at);
  };
  const auto listed = [&](const std::vector<detail::SharedMapping>& list, const std::byte* at) {
    return std::any_of(list.begin(), list.end(), [&](const detail::SharedMapping& m) {
      return m.low == reinterpret_cast<uintptr_t>(at) &&
             m.high == reinterpret_cast<uintptr_t>(at) + 3 * page;
    });
  };
  std::byte* const older = mapped(PROT_READ | PROT_WRITE, MAP_SHARED);
  const std::vector<detail::SharedMapping> before = detail::shared_mappings();
  CHECK(listed(before, older));
  CHECK(listed(detail::shared_mappings(), older));

  std::byte* const fresh = mapped(PROT_READ | PROT_WRITE, MAP_SHARED);
  std::byte* const private_one = mapped(PROT_READ | PROT_WRITE, MAP_PRIVATE);
  std::byte* const read_only = mapped(PROT_READ, MAP_SHARED);
  const std::vector<std::byte> heap(64);
  CHECK(detail::in_new_shared_mapping(before, fresh, 3 * page));
  CHECK(detail::in_new_shared_mapping(before, fresh + page, page));
  CHECK_FALSE(detail::in_new_shared_mapping(before, fresh, 3 * page + 1));  // runs past it
  CHECK_FALSE(detail::in_new_shared_mapping(before, fresh + page, 0));      // names nothing
  CHECK_FALSE(detail::in_new_shared_mapping(before, fresh, SIZE_MAX));      // wraps
  CHECK_FALSE(detail::in_new_shared_mapping(before, older, page));          // there before
  CHECK_FALSE(detail::in_new_shared_mapping(before, private_one, page));    // not shared
  CHECK_FALSE(detail::in_new_shared_mapping(before, read_only, page));      // not writable
  CHECK_FALSE(detail::in_new_shared_mapping(before, heap.data(), heap.size()));
  CHECK(listed(detail::shared_mappings(), fresh));
  CHECK_FALSE(listed(detail::shared_mappings(), read_only));
  // The lookup: the same mapping, nothing for what is not shared and
  // writable (nullopt for all where the kernel has no PROCMAP_QUERY).
  const bool lookups = detail::shared_mapping_at(fresh + page).has_value();
  if (lookups) {
    const std::optional<detail::SharedMapping> at = detail::shared_mapping_at(fresh + page);
    CHECK((at->low == reinterpret_cast<uintptr_t>(fresh) &&
           at->high == reinterpret_cast<uintptr_t>(fresh) + 3 * page));
    CHECK_FALSE(detail::shared_mapping_at(private_one).has_value());
    CHECK_FALSE(detail::shared_mapping_at(read_only).has_value());
  } else {
    WARN("this kernel has no PROCMAP_QUERY (before 6.11): its lookup is not tested here");
  }

  // A child: what it maps is new to it; the parent's snapshot is not its own.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const std::vector<detail::SharedMapping> mine = detail::shared_mappings();
    void* own = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    const bool sees_own = own != MAP_FAILED && detail::in_new_shared_mapping(mine, own, page);
    const bool inherited_is_old = !detail::in_new_shared_mapping(mine, fresh, page);
    // The lookup's descriptor, opened by the parent, would name its mappings.
    const bool looks_up_own = !lookups || detail::shared_mapping_at(own).has_value();
    _exit(sees_own && inherited_is_old && looks_up_own ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  for (std::byte* at : {older, fresh, private_one, read_only}) munmap(at, 3 * page);
}

// A trusted peer that asks for credits by put (both contexts do RMA) with a
// credit word UCX cannot or must not reach: refused with the reason, after
// its proof, and the Receiver goes on serving.
TEST_CASE("a trusted peer's broken or out-of-segment credit word is refused, not used",
          "[trust][ucx]") {
  const ContextOptions rma{.transport = Transport::shared_memory, .remote_memory_access = true};
  auto target = counter_target(rma, nullptr, {}, 1);
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  Worker worker{Context(rma)};
  Source source(worker);
  struct Restore {
    ~Restore() { HandshakeAccess::clear_hello_credit(); }
  } restore;

  HandshakeAccess::override_hello_credit(std::vector<std::byte>(40, std::byte{0x5a}));
  CHECK_THROWS_MATCHES(source.connect("127.0.0.1", target.port(), identified({})), Error,
                       error_with(errc::peer_refused, "refused before UCX saw it"));
  // A real rkey, but the credit word 1 GiB past the segment it maps: over
  // shared memory the target's put would land in its own memory elsewhere.
  HandshakeAccess::override_hello_credit(std::nullopt, int64_t{1} << 30);
  CHECK_THROWS_MATCHES(source.connect("127.0.0.1", target.port(), identified({})), Error,
                       error_with(errc::peer_refused, "outside the memory its rkey maps"));

  HandshakeAccess::clear_hello_credit();
  Channel channel = source.connect("127.0.0.1", target.port(), identified({}));
  for (int i = 0; i < 5; ++i) (void)send(channel, counter, uint64_t{1});
  channel.close();
  const CounterResult result = target.result();
  CHECK(result.counter == 5);
  CHECK(result.errors == 2);
}
