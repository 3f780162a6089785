// The persistent code cache (JitOptions::code_cache_directory): a restarted
// target (a new JitCache on the same directory) links what an earlier one
// compiled; corrupt, foreign and differently-built entries are not used.
#include "support/run_counter.hpp"
#include "support/temp_dir.hpp"

#include <threechains/error.hpp>
#include <threechains/ifunc.hpp>
#include <threechains/jit_cache.hpp>

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

using namespace threechains;
namespace fs = std::filesystem;
using test::run_counter;

namespace {

// The single entry in `dir` (the test stores one ifunc at a time).
fs::path only_entry(const fs::path& dir) {
  fs::path found;
  int count = 0;
  for (const auto& file : fs::directory_iterator(dir)) {
    found = file.path();
    ++count;
  }
  REQUIRE(count == 1);
  return found;
}

}  // namespace

TEST_CASE("a restarted target links the objects it compiled before", "[jit][code_cache]") {
  const test::TempDir dir("code-cache");
  const fs::path cache_dir = dir.path() / "objects";
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  const JitOptions options{.code_cache_directory = cache_dir.string()};

  LoadResult compiled;
  {
    JitCache first(options);
    compiled = first.load(counter.id(), counter.codec(), counter.code());
    CHECK_FALSE(compiled.from_code_cache);
    CHECK(run_counter(compiled.entry) == 8);
  }
  struct stat info {};
  REQUIRE(::stat(cache_dir.c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0700);
  const fs::path entry = only_entry(cache_dir);

  SECTION("the entry is linked, not compiled, and runs") {
    JitCache restarted(options);
    const LoadResult linked = restarted.load(counter.id(), counter.codec(), counter.code());
    CHECK(linked.from_code_cache);
    CHECK(run_counter(linked.entry) == 8);
    // Linking an object skips the middle end and code generation.
    CHECK(linked.compile_time < compiled.compile_time);
  }
  SECTION("a corrupt entry is ignored and replaced") {
    {
      std::fstream file(entry, std::ios::in | std::ios::out | std::ios::binary);
      file.seekp(-16, std::ios::end);
      file.put('\x5a');
    }
    JitCache restarted(options);
    const LoadResult again = restarted.load(counter.id(), counter.codec(), counter.code());
    CHECK_FALSE(again.from_code_cache);
    CHECK(run_counter(again.entry) == 8);
    JitCache third(options);
    CHECK(third.load(counter.id(), counter.codec(), counter.code()).from_code_cache);
  }
  SECTION("a truncated entry is ignored") {
    fs::resize_file(entry, fs::file_size(entry) / 2);
    JitCache restarted(options);
    CHECK_FALSE(restarted.load(counter.id(), counter.codec(), counter.code()).from_code_cache);
  }
  SECTION("an entry made for another CPU is foreign") {
    // The stored key names this host's CPU; another CPU's entry at the same
    // file name (a collision of names) must not be taken for ours.
    std::string bytes;
    {
      std::ifstream in(entry, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    const std::size_t cpu = bytes.find("\ncpu ");
    REQUIRE(cpu != std::string::npos);
    bytes[cpu + 5] = bytes[cpu + 5] == 'x' ? 'y' : 'x';
    {
      std::ofstream out(entry, std::ios::binary | std::ios::trunc);
      out << bytes;
    }
    JitCache restarted(options);
    CHECK_FALSE(restarted.load(counter.id(), counter.codec(), counter.code()).from_code_cache);
  }
  SECTION("another optimisation level does not use it") {
    JitOptions other = options;
    other.optimisation_level = 1;
    JitCache restarted(other);
    CHECK_FALSE(restarted.load(counter.id(), counter.codec(), counter.code()).from_code_cache);
  }
}

TEST_CASE("binary ifuncs are linked as shipped and not stored", "[jit][code_cache]") {
  const test::TempDir dir("code-cache-binary");
  JitCache cache({.code_cache_directory = (dir.path() / "objects").string()});
  const Ifunc counter = Ifunc::load(TC_COUNTER_BINARY);
  CHECK_FALSE(cache.load(counter.id(), counter.codec(), counter.code()).from_code_cache);
  CHECK(fs::is_empty(dir.path() / "objects"));
}

TEST_CASE("a code cache directory others can write to is refused", "[jit][code_cache]") {
  const test::TempDir dir("code-cache-open");
  const fs::path open = dir.path() / "objects";
  fs::create_directory(open);
  fs::permissions(open, fs::perms::owner_all | fs::perms::group_all | fs::perms::others_all);
  try {
    JitCache cache({.code_cache_directory = open.string()});
    FAIL("a world-writable code cache directory was accepted");
  } catch (const Error& e) {
    CHECK(e.is(errc::invalid_argument));
    CHECK_THAT(e.what(), Catch::Contains("writable by nobody else"));
  }
}

TEST_CASE("a code cache reached through a symbolic link, or open to the group, is refused",
          "[jit][code_cache]") {
  const test::TempDir dir("code-cache-links");
  const fs::path real = dir.path() / "real";
  fs::create_directory(real);
  fs::permissions(real, fs::perms::owner_all, fs::perm_options::replace);
  const fs::path link = dir.path() / "link";
  fs::create_directory_symlink(real, link);
  CHECK_THROWS_AS(JitCache({.code_cache_directory = link.string()}), Error);
  fs::permissions(real, fs::perms::owner_all | fs::perms::group_write, fs::perm_options::replace);
  CHECK_THROWS_AS(JitCache({.code_cache_directory = real.string()}), Error);
}

TEST_CASE("a code cache entry that is a symbolic link is not followed", "[jit][code_cache]") {
  const test::TempDir dir("code-cache-entry-link");
  const fs::path cache_dir = dir.path() / "objects";
  const Ifunc counter = Ifunc::load(TC_COUNTER_BITCODE);
  const JitOptions options{.code_cache_directory = cache_dir.string()};
  {
    JitCache first(options);
    (void)first.load(counter.id(), counter.codec(), counter.code());
  }
  // The entry moved elsewhere and a link left in its place: a link is never read.
  const fs::path entry = only_entry(cache_dir);
  const fs::path elsewhere = dir.path() / "elsewhere.tco";
  fs::rename(entry, elsewhere);
  fs::create_symlink(elsewhere, entry);
  JitCache restarted(options);
  CHECK_FALSE(restarted.load(counter.id(), counter.codec(), counter.code()).from_code_cache);
}
