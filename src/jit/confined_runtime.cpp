// The run-time half of confinement: the slow-path region check, traps, the
// fuel clock, checked imports, and the runner around each invocation.
#include "jit/confined_runtime.hpp"

#include <threechains/runtime.h>
#include <threechains/error.hpp>

#include <dlfcn.h>
#include <pthread.h>

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
thread_local State* current = nullptr;

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

// The length of the NUL-terminated string at `address`, which must end
// inside the region it starts in.
std::size_t require_string(State* s, const char* text, TrapReason reason) noexcept {
  const auto address = reinterpret_cast<uintptr_t>(text);
  const std::optional<Region> region = region_of(*s, address);
  if (!region) trap(s, reason, address);
  const std::size_t length = strnlen(text, region->end - address);
  if (length == region->end - address) trap(s, reason, address);
  return length;
}

// The lowest address of this thread's stack (0 if it cannot be told).
uintptr_t thread_stack_bottom() noexcept {
  thread_local const uintptr_t bottom = [] {
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

extern "C" void confined_tick(State* s) {
  const int64_t now = now_ns();
  if (s->started_ns < 0) {
    s->started_ns = now;
  } else if (now - s->started_ns > s->budget_ns) {
    trap(s, TrapReason::out_of_time, 0);
  }
  s->fuel = kFuelChunk;
}

// --- checked imports: the pointers confined code passes are its own ---

extern "C" void* import_memcpy(void* to, const void* from, std::size_t n) {
  State* s = running();
  require(s, reinterpret_cast<uintptr_t>(to), n, true);
  require(s, reinterpret_cast<uintptr_t>(from), n, false);
  return std::memmove(to, from, n);  // overlap is the caller's bug, not a way out
}
extern "C" void* import_memmove(void* to, const void* from, std::size_t n) {
  State* s = running();
  require(s, reinterpret_cast<uintptr_t>(to), n, true);
  require(s, reinterpret_cast<uintptr_t>(from), n, false);
  return std::memmove(to, from, n);
}
extern "C" void* import_memset(void* to, int value, std::size_t n) {
  require(running(), reinterpret_cast<uintptr_t>(to), n, true);
  return std::memset(to, value, n);
}
extern "C" int import_memcmp(const void* a, const void* b, std::size_t n) {
  State* s = running();
  require(s, reinterpret_cast<uintptr_t>(a), n, false);
  require(s, reinterpret_cast<uintptr_t>(b), n, false);
  return std::memcmp(a, b, n);
}
extern "C" int import_bcmp(const void* a, const void* b, std::size_t n) {
  return import_memcmp(a, b, n);  // what the optimiser makes of memcmp(...) == 0
}
extern "C" int import_strncmp(const char* a, const char* b, std::size_t n) {
  State* s = running();
  const auto bounded = [&](const char* text) {
    const auto address = reinterpret_cast<uintptr_t>(text);
    const std::optional<Region> region = region_of(*s, address);
    if (!region) trap(s, TrapReason::out_of_bounds, address);
    // n bytes, or up to a NUL inside the region
    const std::size_t room = region->end - address;
    if (n <= room) return;
    if (strnlen(text, room) == room) trap(s, TrapReason::out_of_bounds, address);
  };
  bounded(a);
  bounded(b);
  return std::strncmp(a, b, n);
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
    : state_(std::make_unique<State>()),
      stack_(std::make_unique_for_overwrite<std::byte[]>(options.stack_bytes)),
      options_(options) {
  State& s = *state_;
  s.stack_begin = reinterpret_cast<uintptr_t>(stack_.get());
  s.stack_size = options.stack_bytes & ~uintptr_t{63};
  s.budget_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(options.time_budget).count();
}

Runner::~Runner() = default;

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
  s.fuel = kFuelChunk;
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
