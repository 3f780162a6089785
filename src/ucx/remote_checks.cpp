// What a peer's rkey must pass before we use it (memory.hpp: RemoteBuffer).
//
// 1. The packed rkey, before UCX parses it.
//
// UCX 1.13's ucp_ep_rkey_unpack takes no length: it walks the md map and the
// per-transport blobs as the bytes say (src/ucp/core/ucp_rkey.c), and each
// transport's unpack reads its own fixed struct, posix a NUL-terminated path
// after it (src/uct/sm/mm/posix/mm_posix.c). So a short or lying blob reads
// past the buffer. Here: the framing must fit the bytes we were given
// (u64 md map, u8 memory type, then per md a u8 size and that many bytes),
// the memory must be host memory, and UCX gets a copy followed by zeros, so
// whatever a transport reads past its blob is ours and ends any string.
// What follows the blobs (a system device, from 1.14; distances that 1.20+
// reads without a length) is replaced by "unknown device" and a run of
// 0xff that ends UCX's distance list wherever it starts reading.
//
// 2. A direct pointer, before we store through it. Over shared memory UCX
// turns (rkey, remote address) into a local pointer by adding an offset and
// checks no bounds (uct_mm_rkey_ptr), so a peer that names an address outside
// the segment it registered points us at our own heap, or at another peer's
// ring. The range must lie in the one shared mapping that unpacking this
// rkey attached (UCX 1.13 attaches a segment afresh on every unpack, shmat
// or mmap, and detaches it with the rkey): unpack_rkey says how we know.
#include "ucx/remote_checks.hpp"

#include <threechains/ucx/memory.hpp>

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace threechains::detail {

namespace {
// UCS_SYS_DEVICE_ID_UNKNOWN (ucs/sys/topo/base/topo.h), UINT8_MAX in 1.13 to 1.22.
constexpr uint8_t kUnknownDevice = 0xff;
}  // namespace

std::vector<std::byte> checked_packed_rkey(std::span<const std::byte> packed) {
  const auto refuse = [&](const std::string& why) {
    return Error(errc::protocol, "a packed rkey of " + std::to_string(packed.size()) +
                                     " bytes refused before UCX saw it: " + why);
  };
  uint64_t md_map = 0;
  if (packed.size() < sizeof(md_map) + 1) throw refuse("shorter than its header");
  std::memcpy(&md_map, packed.data(), sizeof(md_map));
  if (md_map == 0) throw refuse("it names no memory domain");
  const auto memory_type = static_cast<uint8_t>(packed[sizeof(md_map)]);
  if (memory_type != UCS_MEMORY_TYPE_HOST) throw refuse("not host memory");
  std::size_t at = sizeof(md_map) + 1;
  for (int domains = std::popcount(md_map); domains > 0; --domains) {
    if (at >= packed.size()) throw refuse("its memory domains run past its end");
    at += 1 + static_cast<std::size_t>(packed[at]);
    if (at > packed.size()) throw refuse("its memory domains run past its end");
  }
  // What follows the memory domains: nothing, or the system device the
  // memory sits on and (UCX 1.20+) device distances up to a terminator. For
  // host memory every UCX packs "unknown" (0xff) there, and that is all we
  // take: UCX 1.20+ reads distances past it without a length, stopping only
  // at a record that starts with 0xff (ucp_rkey.c,
  // ucp_rkey_unpack_lanes_distance; src/ucx/compat.hpp), so a peer's lying
  // tail would have it read on into our heap.
  if (at < packed.size() && static_cast<uint8_t>(packed[at]) != kUnknownDevice)
    throw refuse("it names a system device (only host memory is taken)");
  std::vector<std::byte> copy(at + 1 + kRkeyPadding, std::byte{0});
  std::memcpy(copy.data(), packed.data(), at);
  // The device, unknown, then a run of 0xff that any record UCX might read
  // starts in, then zeros that end any string a transport reads.
  std::fill_n(copy.begin() + static_cast<std::ptrdiff_t>(at), 1 + kRkeyTerminators,
              std::byte{kUnknownDevice});
  return copy;
}

namespace {

// Linux 6.11's PROCMAP_QUERY (include/uapi/linux/fs.h; Debian 12's headers
// predate it): one VMA by address, or the next one with the asked-for
// permissions, without formatting the whole of /proc/self/maps as text
// (with a thousand peers connected that text is thousands of lines: reading
// it twice per connect was 19 % of a shm connect's CPU).
struct ProcmapQuery {
  uint64_t size;
  uint64_t query_flags;
  uint64_t query_addr;
  uint64_t vma_start;
  uint64_t vma_end;
  uint64_t vma_flags;
  uint64_t vma_page_size;
  uint64_t vma_offset;
  uint64_t inode;
  uint32_t dev_major;
  uint32_t dev_minor;
  uint32_t vma_name_size;
  uint32_t build_id_size;
  uint64_t vma_name_addr;
  uint64_t build_id_addr;
};
static_assert(sizeof(ProcmapQuery) == 104);
constexpr unsigned long kProcmapQuery = 0xC0686611;  // _IOWR('f', 17, struct procmap_query)
constexpr uint64_t kReadable = 0x01, kWritable = 0x02, kShared = 0x08;
constexpr uint64_t kSharedWritable = kReadable | kWritable | kShared;

// A mapping as the kernel names it: where, and which bytes of which file.
struct Vma {
  uintptr_t low;
  uintptr_t high;
  uint64_t offset;  // in the file, of `low`
  uint64_t inode;
  uint32_t dev_major;
  uint32_t dev_minor;
  bool operator==(const Vma&) const = default;
  // Where `address` (in this mapping) lies in the file it maps.
  [[nodiscard]] uint64_t file_offset(uintptr_t address) const noexcept {
    return address - low + offset;
  }
  [[nodiscard]] bool same_file(const Vma& other) const noexcept {
    return inode == other.inode && dev_major == other.dev_major && dev_minor == other.dev_minor;
  }
};

// This process's /proc/self/maps, open for queries. A descriptor inherited
// across fork() still names the parent's mappings, so it is reopened when
// the process is not the one that opened it.
class MapsQuery {
 public:
  // The readable, writable, shared VMA that holds `address`; nullopt when
  // none. Throws when the kernel has no PROCMAP_QUERY (supported()).
  [[nodiscard]] std::optional<Vma> find(uintptr_t address) {
    refresh();
    ProcmapQuery query{};
    query.size = sizeof(query);
    query.query_flags = kSharedWritable;
    query.query_addr = address;
    if (::ioctl(fd_, kProcmapQuery, &query) == 0)
      return Vma{query.vma_start, query.vma_end,   query.vma_offset,
                 query.inode,     query.dev_major, query.dev_minor};
    if (errno == ENOENT) return std::nullopt;
    throw Error(errc::io, std::string("PROCMAP_QUERY on /proc/self/maps: ") + std::strerror(errno));
  }
  // Whether this kernel answers PROCMAP_QUERY (6.11 and later).
  [[nodiscard]] bool supported() {
    refresh();
    if (fd_ < 0) return false;
    ProcmapQuery query{};
    query.size = sizeof(query);
    query.query_addr = reinterpret_cast<uintptr_t>(&query);  // a stack address: always mapped
    return ::ioctl(fd_, kProcmapQuery, &query) == 0 || errno == ENOENT;
  }
  ~MapsQuery() {
    if (fd_ >= 0) ::close(fd_);
  }

 private:
  void refresh() {
    const pid_t pid = ::getpid();
    if (pid == owner_ && fd_ >= 0) return;
    if (fd_ >= 0) ::close(fd_);
    fd_ = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    owner_ = pid;
  }
  int fd_ = -1;
  pid_t owner_ = 0;
};

// One per thread that checks rkeys (a Source's, a Receiver's progress thread):
// each keeps its own descriptor, reopened after a fork.
MapsQuery& maps_query() {
  thread_local MapsQuery query;
  return query;
}

std::atomic<bool> text_for_testing{false};

bool procmap_query_supported() {
  static const bool supported = maps_query().supported();
  return supported && !text_for_testing.load(std::memory_order_relaxed);
}

// One unpack_rkey at a time in this process. Its verdict rests on what
// happens to our mappings between its lookups; another thread's unpack
// (a second Source, a Receiver checking a credit rkey) attaches and
// detaches segments too, and could re-attach, between our lookups, the very
// file our range was aimed at. A child forked while another thread holds
// the lock gets it unlocked (pthread_atfork).
std::mutex& unpack_mutex() {
  static std::mutex mutex;
  static const bool registered = [] {
    (void)pthread_atfork([] { mutex.lock(); }, [] { mutex.unlock(); }, [] { mutex.unlock(); });
    return true;
  }();
  (void)registered;
  return mutex;
}

}  // namespace

void check_rkeys_from_text_for_testing(bool on) noexcept {
  text_for_testing.store(on, std::memory_order_relaxed);
}

// Kernels before 6.11 (and unpack_rkey with the test hook): the text of
// /proc/self/maps, read in large pieces and parsed by hand (no streams, no
// scanf: this runs on every connect there).
std::vector<SharedMapping> shared_mappings() {
  std::vector<SharedMapping> mappings;
  const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return mappings;
  std::string text;
  char chunk[1 << 16];
  for (ssize_t got; (got = ::read(fd, chunk, sizeof(chunk))) != 0;) {
    if (got < 0) {
      if (errno == EINTR) continue;
      break;
    }
    text.append(chunk, static_cast<std::size_t>(got));
  }
  ::close(fd);
  // Each line: "low-high perms offset dev inode [path]"; perms "rw?s".
  std::string_view rest(text);
  while (!rest.empty()) {
    const std::size_t end_of_line = std::min(rest.find('\n'), rest.size());
    const std::string_view line = rest.substr(0, end_of_line);
    rest.remove_prefix(std::min(end_of_line + 1, rest.size()));
    unsigned long low = 0, high = 0;
    const char* const last = line.data() + line.size();
    auto [after_low, low_error] = std::from_chars(line.data(), last, low, 16);
    if (low_error != std::errc{} || after_low == last || *after_low != '-') continue;
    auto [after_high, high_error] = std::from_chars(after_low + 1, last, high, 16);
    if (high_error != std::errc{} || last - after_high < 5 || *after_high != ' ') continue;
    const std::string_view permissions(after_high + 1, 4);
    if (permissions[0] == 'r' && permissions[1] == 'w' && permissions[3] == 's')
      mappings.push_back({low, high});
  }
  return mappings;
}

bool in_new_shared_mapping(std::span<const SharedMapping> before, const void* start,
                           std::size_t size) {
  const auto first = reinterpret_cast<uintptr_t>(start);
  if (size == 0 || first + size < first) return false;
  std::optional<SharedMapping> holder;
  for (const SharedMapping& now : shared_mappings())
    if (first >= now.low && first < now.high) holder = now;
  if (!holder) return false;
  // The mapping that holds the start must hold the end, and must be the one
  // this unpack attached: not there before it.
  const bool existed = std::any_of(before.begin(), before.end(), [&](const SharedMapping& m) {
    return m.low == holder->low && m.high == holder->high;
  });
  return first + size <= holder->high && !existed;
}

std::optional<SharedMapping> shared_mapping_at(const void* address) {
  if (!procmap_query_supported()) return std::nullopt;
  const std::optional<Vma> vma = maps_query().find(reinterpret_cast<uintptr_t>(address));
  if (!vma) return std::nullopt;
  return SharedMapping{vma->low, vma->high};
}

DirectRange unpack_rkey(ucp_ep_h endpoint, std::span<const std::byte> checked, uint64_t address,
                        std::size_t size, ucp_rkey_h* rkey) {
  const auto unpack = [&] {
    check(ucp_ep_rkey_unpack(endpoint, checked.data(), rkey), "ucp_ep_rkey_unpack");
  };
  const std::lock_guard one_at_a_time(unpack_mutex());
  if (!procmap_query_supported()) {
    // Kernels before 6.11: the shared mappings before and after the unpack.
    const std::vector<SharedMapping> before = shared_mappings();
    unpack();
    void* pointer = nullptr;
    if (ucp_rkey_ptr(*rkey, address, &pointer) != UCS_OK) return {};  // no direct access here
    if (in_new_shared_mapping(before, pointer, size)) return {pointer, false};
    return {nullptr, true};
  }
  // With PROCMAP_QUERY, nothing is listed: find the mapping that holds the
  // range, let the rkey go, and look again. UCX 1.13 detaches a segment when
  // its rkey goes (and attaches it afresh on each unpack), so a mapping that
  // is still there was not this unpack's: it is our heap, our own ring, or
  // another peer's. Then unpack again and check that the range lies at the
  // same place of the same file. Each step costs a lookup by address, not
  // a walk over every mapping of the process (which grows with the peers).
  unpack();
  void* first = nullptr;
  if (ucp_rkey_ptr(*rkey, address, &first) != UCS_OK) return {};  // no direct access here
  const auto start = reinterpret_cast<uintptr_t>(first);
  if (size == 0 || start + size < start) return {nullptr, true};
  const std::optional<Vma> held = maps_query().find(start);
  if (!held || start + size > held->high) return {nullptr, true};
  ucp_rkey_destroy(*rkey);
  *rkey = nullptr;
  // Still the same bytes of the same file there: not the unpack's (compared
  // by file and offset, not by bounds, which a split or merge of that
  // mapping would change meanwhile).
  const std::optional<Vma> after = maps_query().find(start);
  const bool attached_by_unpack =
      !after || !after->same_file(*held) || after->file_offset(start) != held->file_offset(start);
  unpack();
  void* pointer = nullptr;
  if (!attached_by_unpack || ucp_rkey_ptr(*rkey, address, &pointer) != UCS_OK)
    return {nullptr, true};
  const auto at = reinterpret_cast<uintptr_t>(pointer);
  const std::optional<Vma> now = maps_query().find(at);
  if (!now || at + size < at || at + size > now->high || !now->same_file(*held) ||
      now->file_offset(at) != held->file_offset(start))
    return {nullptr, true};
  return {pointer, false};
}

}  // namespace threechains::detail
