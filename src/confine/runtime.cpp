// The run-time half of confinement: the slow-path region check, traps, the
// fuel clock, checked imports, and the runner around each invocation.
#include "confine/runtime.hpp"

#include <threechains/runtime.h>
#include <threechains/error.hpp>

#include <dlfcn.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <ctime>
#include <string_view>

namespace threechains {

std::string_view to_string(TrapReason reason) noexcept {
  switch (reason) {
    case TrapReason::out_of_bounds:
      return "a memory access outside every region it may use";
    case TrapReason::read_only:
      return "a store into read-only memory";
    case TrapReason::bad_call:
      return "an indirect call to something that is not its own function or import";
    case TrapReason::out_of_time:
      return "it ran past its time budget (ConfinementOptions::time_budget)";
    case TrapReason::stack_exhausted:
      return "its stack ran out (recursion too deep, or locals too large)";
    case TrapReason::division:
      return "an integer division by zero or overflow";
    case TrapReason::unreachable:
      return "control reached code marked unreachable";
    case TrapReason::misaligned_atomic:
      return "an atomic access that is not naturally aligned";
    case TrapReason::bad_argument:
      return "a runtime call given a pointer outside its regions";
    case TrapReason::gpu_failed:
      return "its GPU kernel failed";
  }
  return "an unknown trap";
}

namespace confined {

static_assert(offsetof(State, payload_begin) == kPayloadBegin);
static_assert(offsetof(State, payload_size) == kPayloadSize);
static_assert(offsetof(State, stack_begin) == kStackBegin);
static_assert(offsetof(State, stack_size) == kStackSize);
static_assert(offsetof(State, stack_pointer) == kStackPointer);
static_assert(offsetof(State, native_limit) == kNativeLimit);
static_assert(offsetof(State, fuel) == kFuel);

namespace {

// The state of the confined invocation running on this thread: what the
// checked imports (which confined code calls with its own arguments only)
// check against.
// initial-exec: a load from the thread pointer, where the default model of a
// shared library calls __tls_get_addr on every confined invocation (3% of a
// confined counter call's samples in perf). Eight bytes of static TLS, which
// glibc keeps room for even when the library is dlopen'ed (Python).
[[gnu::tls_model("initial-exec")]] thread_local State* current = nullptr;

[[noreturn]] void trap(State* state, TrapReason reason, uintptr_t address) noexcept {
  state->trap = reason;
  state->trap_address = address;
  std::longjmp(state->jump, 1);
}

// The region of a sorted table that holds `address`, or nullptr.
const Region* find(const Region* table, std::size_t count, uintptr_t address) noexcept {
  const Region* end = table + count;
  const Region* it = std::upper_bound(table, end, address,
                                      [](uintptr_t a, const Region& r) { return a < r.begin; });
  if (it == table) return nullptr;
  --it;
  return address < it->end ? it : nullptr;
}

// Where `address` may be used, as [begin, end) and writable: nullopt if
// nowhere. `lasting`: a global or exposed region (not this invocation's
// payload or stack), which an access site may remember.
std::optional<Region> region_of(const State& s, uintptr_t address,
                                bool* lasting = nullptr) noexcept {
  if (lasting != nullptr) *lasting = false;
  if (address - s.payload_begin < s.payload_size)
    return Region{s.payload_begin, s.payload_begin + s.payload_size, 1};
  if (address - s.stack_begin < s.stack_size)
    return Region{s.stack_begin, s.stack_begin + s.stack_size, 1};
  if (lasting != nullptr) *lasting = true;
  if (const Region* r = find(s.globals, s.global_count, address)) return *r;
  if (const Region* r = find(s.exposed, s.exposed_count, address)) return *r;
  return std::nullopt;
}

// Traps unless [address, address + bytes) lies in one region (writable, if asked).
void require(State* s, uintptr_t address, uint64_t bytes, bool write,
             TrapReason reason = TrapReason::out_of_bounds) noexcept {
  if (bytes == 0) return;
  const std::optional<Region> region = region_of(*s, address);
  if (!region || bytes > region->end - address) trap(s, reason, address);
  if (write && region->writable == 0) trap(s, TrapReason::read_only, address);
}

std::size_t paid_strnlen(State* s, const char* text, std::size_t limit) noexcept;

// The length of the NUL-terminated string at `address`, which must end
// inside the region it starts in.
std::size_t require_string(State* s, const char* text, TrapReason reason) noexcept {
  const auto address = reinterpret_cast<uintptr_t>(text);
  const std::optional<Region> region = region_of(*s, address);
  if (!region) trap(s, reason, address);
  const std::size_t length = paid_strnlen(s, text, region->end - address);
  if (length == region->end - address) trap(s, reason, address);
  return length;
}

// The lowest address of this thread's stack (0 if it cannot be told).
uintptr_t thread_stack_bottom() noexcept {
  [[gnu::tls_model("initial-exec")]] thread_local const uintptr_t bottom = [] {
    pthread_attr_t attributes;
    if (pthread_getattr_np(pthread_self(), &attributes) != 0) return uintptr_t{0};
    void* address = nullptr;
    std::size_t size = 0;
    const int rc = pthread_attr_getstack(&attributes, &address, &size);
    pthread_attr_destroy(&attributes);
    return rc == 0 ? reinterpret_cast<uintptr_t>(address) : uintptr_t{0};
  }();
  return bottom;
}

State* running() noexcept {
  return current;  // set for as long as confined code runs on this thread
}

// --- what the pass calls ---

// The slow path of a checked access: traps, or returns and has the access
// site remember the region (for a store, only a writable one).
extern "C" void confined_check(State* s, uintptr_t address, uint64_t bytes, uint64_t write,
                               uint64_t* site) {
  if (bytes == 0) return;
  bool lasting = false;
  const std::optional<Region> region = region_of(*s, address, &lasting);
  if (!region || bytes > region->end - address) trap(s, TrapReason::out_of_bounds, address);
  if (write != 0 && region->writable == 0) trap(s, TrapReason::read_only, address);
  if (lasting) {
    site[0] = region->begin;
    site[1] = region->end - region->begin;
  }
}

extern "C" [[noreturn]] void confined_trap(State* s, uint64_t reason, uintptr_t address) {
  // Where the thread's stack is stays here: the source hears no stack address.
  const auto why = static_cast<TrapReason>(reason);
  trap(s, why, why == TrapReason::stack_exhausted ? 0 : address);
}

int64_t now_ns() noexcept {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

// The clock is first read when the first chunk of fuel is spent, not at
// the start of each invocation: a cached call that ends within one chunk
// (nearly all of them) reads no clock. What ran before that first look is
// at most one chunk, which Runner::Runner sizes to an eighth of the budget
// at kWorstUnitNs a unit: an invocation ends within the budget and two
// chunks (1.25x the budget) whatever it does.
extern "C" void confined_tick(State* s) {
  const int64_t now = now_ns();
  if (s->started_ns < 0) {
    s->started_ns = now;
  } else if (now - s->started_ns > s->budget_ns) {
    trap(s, TrapReason::out_of_time, 0);
  }
  s->fuel = s->chunk;
}

// Charges a checked import for `bytes` of work (a unit per 64 bytes).
void spend(State* s, std::size_t bytes) noexcept {
  s->fuel -= static_cast<int64_t>(bytes >> 6) + 1;
  if (s->fuel < 0) confined_tick(s);
}

// Works through `n` bytes in pieces of at most kImportPiece, paying for each
// before `work(offset, piece)` does it; stops early where `work` says false.
template <class Work>
void in_pieces(State* s, std::size_t n, Work work) noexcept {
  for (std::size_t done = 0; done < n;) {
    const std::size_t piece = std::min(n - done, kImportPiece);
    spend(s, piece);
    if (!work(done, piece)) return;
    done += piece;
  }
}

// strnlen, paid for as it goes.
std::size_t paid_strnlen(State* s, const char* text, std::size_t limit) noexcept {
  std::size_t length = 0;
  in_pieces(s, limit, [&](std::size_t at, std::size_t piece) {
    const std::size_t found = strnlen(text + at, piece);
    length += found;
    return found == piece;
  });
  return length;
}

// --- checked imports: the pointers confined code passes are its own ---

// Each does its work in pieces of kImportPiece bytes, paying fuel for each:
// the clock is looked at between pieces, so no call outlasts the budget by
// more than one piece (microseconds), however long its arguments.
extern "C" void* import_memmove(void* to, const void* from, std::size_t n) {
  State* s = running();
  require(s, reinterpret_cast<uintptr_t>(to), n, true);
  require(s, reinterpret_cast<uintptr_t>(from), n, false);
  auto* out = static_cast<std::byte*>(to);
  const auto* in = static_cast<const std::byte*>(from);
  // Pieces in the order that never reads a byte already overwritten.
  const bool backwards = out > in && out < in + n;
  in_pieces(s, n, [&](std::size_t done, std::size_t piece) {
    const std::size_t at = backwards ? n - done - piece : done;
    std::memmove(out + at, in + at, piece);
    return true;
  });
  return to;
}
extern "C" void* import_memcpy(void* to, const void* from, std::size_t n) {
  return import_memmove(to, from, n);  // overlap is the caller's bug, not a way out
}
extern "C" void* import_memset(void* to, int value, std::size_t n) {
  State* s = running();
  require(s, reinterpret_cast<uintptr_t>(to), n, true);
  auto* out = static_cast<std::byte*>(to);
  in_pieces(s, n, [&](std::size_t at, std::size_t piece) {
    std::memset(out + at, value, piece);
    return true;
  });
  return to;
}
extern "C" int import_memcmp(const void* a, const void* b, std::size_t n) {
  State* s = running();
  require(s, reinterpret_cast<uintptr_t>(a), n, false);
  require(s, reinterpret_cast<uintptr_t>(b), n, false);
  const auto* left = static_cast<const unsigned char*>(a);
  const auto* right = static_cast<const unsigned char*>(b);
  int order = 0;
  in_pieces(s, n, [&](std::size_t at, std::size_t piece) {
    order = std::memcmp(left + at, right + at, piece);
    return order == 0;
  });
  return order;
}
extern "C" int import_bcmp(const void* a, const void* b, std::size_t n) {
  return import_memcmp(a, b, n);  // what the optimiser makes of memcmp(...) == 0
}
extern "C" int import_strncmp(const char* a, const char* b, std::size_t n) {
  State* s = running();
  // n bytes, or up to a NUL inside the region: the bytes strncmp may read.
  const auto bounded = [&](const char* text) {
    const auto address = reinterpret_cast<uintptr_t>(text);
    const std::optional<Region> region = region_of(*s, address);
    if (!region) trap(s, TrapReason::out_of_bounds, address);
    const std::size_t room = region->end - address;
    if (paid_strnlen(s, text, std::min(n, room)) == room && n > room)
      trap(s, TrapReason::out_of_bounds, address);
  };
  bounded(a);
  bounded(b);
  return std::strncmp(a, b, n);  // within what was measured and paid for above
}
extern "C" std::size_t import_strlen(const char* text) {
  return require_string(running(), text, TrapReason::out_of_bounds);
}
extern "C" int import_strcmp(const char* a, const char* b) {
  State* s = running();
  (void)require_string(s, a, TrapReason::out_of_bounds);
  (void)require_string(s, b, TrapReason::out_of_bounds);
  return std::strcmp(a, b);
}
extern "C" int threechains_send_self_checked(int64_t rank, const void* payload, std::size_t n) {
  require(running(), reinterpret_cast<uintptr_t>(payload), n, false, TrapReason::bad_argument);
  return threechains_send_self(rank, payload, n);
}
extern "C" int threechains_send_named_checked(int64_t rank, const char* name, const void* payload,
                                              std::size_t n) {
  State* s = running();
  (void)require_string(s, name, TrapReason::bad_argument);
  require(s, reinterpret_cast<uintptr_t>(payload), n, false, TrapReason::bad_argument);
  return threechains_send_named(rank, name, payload, n);
}
// The object itself is reachable only if it was exposed with its size
// (ReceiverOptions::exposed); the pointer alone reaches nothing.
extern "C" void* threechains_lookup_checked(const char* name) {
  (void)require_string(running(), name, TrapReason::bad_argument);
  return threechains_lookup(name);
}

// Functions of libm and the runtime that take no pointer: bound as they are.
constexpr std::string_view kPointerFree[] = {"sin",
                                             "cos",
                                             "tan",
                                             "asin",
                                             "acos",
                                             "atan",
                                             "atan2",
                                             "sinh",
                                             "cosh",
                                             "tanh",
                                             "asinh",
                                             "acosh",
                                             "atanh",
                                             "exp",
                                             "exp2",
                                             "expm1",
                                             "log",
                                             "log2",
                                             "log10",
                                             "log1p",
                                             "pow",
                                             "sqrt",
                                             "cbrt",
                                             "hypot",
                                             "fabs",
                                             "floor",
                                             "ceil",
                                             "trunc",
                                             "round",
                                             "lround",
                                             "rint",
                                             "nearbyint",
                                             "fmod",
                                             "remainder",
                                             "fmin",
                                             "fmax",
                                             "fdim",
                                             "fma",
                                             "ldexp",
                                             "erf",
                                             "erfc",
                                             "tgamma",
                                             "copysign",
                                             "sinf",
                                             "cosf",
                                             "tanf",
                                             "asinf",
                                             "acosf",
                                             "atanf",
                                             "atan2f",
                                             "sinhf",
                                             "coshf",
                                             "tanhf",
                                             "expf",
                                             "exp2f",
                                             "expm1f",
                                             "logf",
                                             "log2f",
                                             "log10f",
                                             "log1pf",
                                             "powf",
                                             "sqrtf",
                                             "cbrtf",
                                             "hypotf",
                                             "fabsf",
                                             "floorf",
                                             "ceilf",
                                             "truncf",
                                             "roundf",
                                             "lroundf",
                                             "rintf",
                                             "nearbyintf",
                                             "fmodf",
                                             "fminf",
                                             "fmaxf",
                                             "fmaf",
                                             "ldexpf",
                                             "erff",
                                             "erfcf",
                                             "copysignf",
                                             "abs",
                                             "labs",
                                             "llabs",
                                             "threechains_rank",
                                             "threechains_ranks",
                                             "threechains_origin",
                                             "remainderf",
                                             "tgammaf",
                                             "exp10",
                                             "exp10f"};

struct Checked {
  std::string_view name;
  void* address;
};

std::array<Checked, 11> checked_imports() {
  return {{{"memcpy", reinterpret_cast<void*>(&import_memcpy)},
           {"bcmp", reinterpret_cast<void*>(&import_bcmp)},
           {"strncmp", reinterpret_cast<void*>(&import_strncmp)},
           {"memmove", reinterpret_cast<void*>(&import_memmove)},
           {"memset", reinterpret_cast<void*>(&import_memset)},
           {"memcmp", reinterpret_cast<void*>(&import_memcmp)},
           {"strlen", reinterpret_cast<void*>(&import_strlen)},
           {"strcmp", reinterpret_cast<void*>(&import_strcmp)},
           {"threechains_send_self", reinterpret_cast<void*>(&threechains_send_self_checked)},
           {"threechains_send_named", reinterpret_cast<void*>(&threechains_send_named_checked)},
           {"threechains_lookup", reinterpret_cast<void*>(&threechains_lookup_checked)}}};
}

void* pointer_free_address(std::string_view name) {
  if (name == "threechains_rank") return reinterpret_cast<void*>(&threechains_rank);
  if (name == "threechains_ranks") return reinterpret_cast<void*>(&threechains_ranks);
  if (name == "threechains_origin") return reinterpret_cast<void*>(&threechains_origin);
  return dlsym(RTLD_DEFAULT, std::string(name).c_str());
}

}  // namespace

bool is_confined_import(std::string_view name) {
  for (const Checked& c : checked_imports())
    if (c.name == name) return true;
  return std::find(std::begin(kPointerFree), std::end(kPointerFree), name) !=
         std::end(kPointerFree);
}

std::vector<Symbol> runtime_symbols(State* state) {
  std::vector<Symbol> out;
  out.push_back({kStateSymbol, state, false});
  out.push_back({kCheckSymbol, reinterpret_cast<void*>(&confined_check), true});
  out.push_back({kTrapSymbol, reinterpret_cast<void*>(&confined_trap), true});
  out.push_back({kTickSymbol, reinterpret_cast<void*>(&confined_tick), true});
  for (const Checked& c : checked_imports())
    out.push_back({kImportPrefix + std::string(c.name), c.address, true});
  for (const std::string_view name : kPointerFree) {
    if (void* address = pointer_free_address(name))
      out.push_back({kImportPrefix + std::string(name), address, true});
  }
  return out;
}

Runner::Runner(const ConfinementOptions& options)
    : state_(std::make_unique<State>()), options_(options) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  stack_mapped_ = std::max((options.stack_bytes + page - 1) / page * page, page);
  void* mapped = mmap(nullptr, stack_mapped_, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapped == MAP_FAILED)
    throw Error(errc::jit_failed, "cannot map a data stack of " + std::to_string(stack_mapped_) +
                                      " bytes for confined code");
  stack_ = static_cast<std::byte*>(mapped);
  State& s = *state_;
  s.stack_begin = reinterpret_cast<uintptr_t>(stack_);
  s.stack_size = options.stack_bytes & ~uintptr_t{63};
  s.budget_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(options.time_budget).count();
  // A chunk of fuel is at most an eighth of the budget at kWorstUnitNs a unit.
  s.chunk = std::clamp<int64_t>(s.budget_ns / 8 / kWorstUnitNs, kMinFuelChunk, kFuelChunk);
}

Runner::~Runner() {
  if (stack_ != nullptr) munmap(stack_, stack_mapped_);
}

void Runner::wipe_stack(uint64_t caller) noexcept {
  caller_ = caller;
  // MADV_DONTNEED on private anonymous memory: the pages read as zero next
  // time, and only the pages that were touched cost anything.
  if (madvise(stack_, stack_mapped_, MADV_DONTNEED) != 0) std::memset(stack_, 0, stack_mapped_);
}

void Code::remember_initial_globals() {
  initial.clear();
  for (const Region& global : globals) {
    std::vector<std::byte> bytes;
    if (global.writable != 0) {
      const auto* begin = reinterpret_cast<const std::byte*>(global.begin);
      const auto* end = reinterpret_cast<const std::byte*>(global.end);
      if (std::any_of(begin, end, [](std::byte b) { return b != std::byte{0}; }))
        bytes.assign(begin, end);
    }
    initial.push_back(std::move(bytes));
  }
}

void Runner::restore_globals(const Code& code, uint64_t caller) noexcept {
  code.caller = caller;
  for (std::size_t k = 0; k < code.globals.size() && k < code.initial.size(); ++k) {
    const Region& global = code.globals[k];
    if (global.writable == 0) continue;
    auto* begin = reinterpret_cast<std::byte*>(global.begin);
    const std::vector<std::byte>& initial = code.initial[k];
    if (initial.empty()) {
      std::memset(begin, 0, global.end - global.begin);
    } else {
      std::memcpy(begin, initial.data(), initial.size());
    }
  }
}

void Runner::clear_sites(const Code& code) noexcept {
  std::fill(code.sites, code.sites + 2 * code.site_count, uint64_t{0});
}

void Runner::expose(const std::vector<ExposedRegion>& regions) {
  exposed_.clear();
  for (const ExposedRegion& r : regions) {
    if (r.bytes.empty()) continue;
    const auto begin = reinterpret_cast<uintptr_t>(r.bytes.data());
    exposed_.push_back({begin, begin + r.bytes.size(), r.writable ? 1U : 0U});
  }
  std::sort(exposed_.begin(), exposed_.end(),
            [](const Region& a, const Region& b) { return a.begin < b.begin; });
  // One region per byte: the table search finds the one that starts last
  // before an address, and whether a byte is writable must not depend on it.
  for (std::size_t k = 1; k < exposed_.size(); ++k) {
    if (exposed_[k].begin < exposed_[k - 1].end) {
      exposed_.clear();
      state_->exposed = nullptr;
      state_->exposed_count = 0;
      throw Error(errc::invalid_argument,
                  "regions exposed to confined code overlap (target_args inside another "
                  "exposed region?): expose each byte once");
    }
  }
  state_->exposed = exposed_.data();
  state_->exposed_count = exposed_.size();
}

std::optional<ConfinedTrap> Runner::run(IfuncMain entry, const Code& code, void* payload,
                                        std::size_t size, void* target_args) noexcept {
  State& s = *state_;
  s.payload_begin = reinterpret_cast<uintptr_t>(payload);
  s.payload_size = size;
  s.stack_pointer = s.stack_begin + s.stack_size;
  // native_stack_bytes below here, and never within 64 KiB of the bottom of
  // this thread's stack (a thread may have less than that budget).
  const auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  const uintptr_t floor = thread_stack_bottom() + (uintptr_t{64} << 10);
  s.native_limit = std::max(here - std::min<uintptr_t>(here, options_.native_stack_bytes), floor);
  s.fuel = s.chunk;
  s.started_ns = -1;
  s.globals = code.globals.data();
  s.global_count = code.globals.size();
  State* const outer = current;
  current = &s;
  if (setjmp(s.jump) == 0) {
    entry(payload, size, target_args);
    current = outer;
    return std::nullopt;
  }
  current = outer;
  return ConfinedTrap{s.trap, s.trap_address};
}

}  // namespace confined
}  // namespace threechains
