// Context's set-up: the UCX settings ThreeChains depends on, in the names the
// running UCX understands (compat.hpp).
#include <threechains/ucx/context.hpp>

#include "ucx/compat.hpp"

#include <cstdlib>
#include <string>
#include <string_view>

namespace threechains {

Context::Context(const ContextOptions& options)
    : transport_(options.transport), remote_memory_access_(options.remote_memory_access) {
  const ucx_compat::Version ucx = ucx_compat::running();
  if (ucx < ucx_compat::kOldestSupported) {
    throw Error(errc::invalid_argument, "UCX " + ucx.text() + " is older than " +
                                            ucx_compat::kOldestSupported.text() +
                                            ", the oldest this library supports");
  }
  ucp_config_t* config = nullptr;
  check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
  const auto modify = [&](const char* name, const char* value) {
    const ucs_status_t status = ucp_config_modify(config, name, value);
    if (status != UCS_OK) {
      ucp_config_release(config);
      check(status, (std::string("ucp_config_modify(") + name + "=" + value + ") on UCX " +
                     ucx.text())
                        .c_str());
    }
  };
  if (const char* tls = transport_tls(options.transport)) modify("TLS", tls);
  // Endpoints ask for peer error handling (a peer that goes away is reported,
  // not fatal). UCX 1.13 then leaves shared-memory transports out
  // of client/server endpoints unless they are told to take part in it.
  if (options.transport != Transport::tcp) modify("MM_ERROR_HANDLING", "y");
  // Without RMA, tcp interfaces also stop advertising their native put
  // (uct/tcp: a PUT request writes wherever its header says, rkey unseen),
  // so a peer's unmodified UCX never picks it as a lane to us. Its name
  // depends on the UCX (compat.hpp: on 1.17-1.20 the old one is ignored).
  if (!options.remote_memory_access) modify(ucx_compat::tcp_put_enable_key(ucx), "n");
  // A worker's async context (its connection set-up, run by UCX's async
  // thread and by ucp_ep_create/progress) is guarded by a spinlock unless
  // this is set (ucp_worker.c: UCS_ASYNC_MODE_THREAD_MUTEX). With a lock
  // that sleeps, a progress thread that meets the async thread mid-wire-up
  // gives its core back instead of spinning it away: on 2 cores a serial
  // tcp connect fell from ~7 to ~1.4 ms (docs/performance.md). The hot path
  // (eager AMs, direct rings) never takes this lock; going to sleep
  // (ucp_worker_arm) does, once per sleep. A value the user set in the
  // environment wins.
  if (std::getenv("UCX_USE_MT_MUTEX") == nullptr) modify("USE_MT_MUTEX", "y");
  // Every fence we ask for orders, never waits: put delivery fences between
  // a frame and its commit word (a source), and a target fences a code
  // refusal ahead of the credit behind it. UCX 1.16+ would make that fence a
  // flush of the whole worker, which waits for every peer's endpoint: a
  // source waited for its target, and a target for whichever peer was not
  // progressing (compat.hpp). `ep_based` needs the new protocols, which a
  // user may have turned off (then UCX's own choice is the weak fence
  // anyway). A fence mode the user set wins (docs/ucx-versions.md says what
  // `strong` then costs).
  if (std::getenv("UCX_FENCE_MODE") == nullptr) {
    const char* fence = ucx_compat::fence_mode(ucx);
    const char* protocols = std::getenv("UCX_PROTO_ENABLE");
    const bool protocols_off = protocols != nullptr && (protocols[0] == 'n' || protocols[0] == 'N' ||
                                                        protocols[0] == '0');
    if (fence != nullptr && !(protocols_off && std::string_view(fence) == "ep_based"))
      modify("FENCE_MODE", fence);
  }
  // ucp_mem_map(ALLOCATE) takes memory by ALLOC_PRIO (ucp_context.c: by
  // default "md:sysv,md:posix,thp,md:*,mmap,heap" in 1.16, 1.18, 1.22, 1.13 with
  // "huge" after posix; the methods: uct/base/uct_mem.c). Shared-memory
  // segments come first, but where they cannot be had (SysV's segment
  // limit, a full /dev/shm) "thp" and "heap" take memory from malloc,
  // which hands back what this process freed: a departed peer's ring, for
  // one. Only the methods that map fresh pages (zero, by the kernel) are
  // left, so a MemoryRegion need not clear every page before a peer maps
  // it: with a 2 MiB ring cleared, connecting one peer over shm took
  // 12.9-13.5 ms on the 2-core VM, 4.6-4.9 ms without (docs/performance.md,
  // "Connecting many channels"), and the whole ring stayed resident. A
  // list the user set in the environment wins (and a MemoryRegion then
  // clears what it gets).
  if (std::getenv("UCX_ALLOC_PRIO") == nullptr) {
    modify("ALLOC_PRIO", "md:sysv,md:posix,mmap");
    allocates_zeroed_ = true;
  }
  if (options.reuse_address) {
    // UCX (1.13 to 1.22: uct_cm.c's REUSEADDR) reads its connection
    // managers' settings from the environment when a worker opens them
    // (ucp_config_modify does not reach them). overwrite = 0: a value the
    // user set explicitly wins. rdmacm's only where this UCX has it: a
    // build without it warns of the variable as unused, in every process.
    setenv("UCX_TCP_CM_REUSEADDR", "y", 0);
    static const bool has_rdma_cm = ucx_compat::has_component("rdmacm");
    if (has_rdma_cm) setenv("UCX_RDMA_CM_REUSEADDR", "y", 0);
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  // WAKEUP: an idle serving loop sleeps on the worker's event fd
  // (ProgressOptions). UCX 1.13 asks transports for event support only where TAG
  // is requested too, so lane choice is unchanged.
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP |
                    (options.remote_memory_access ? UCP_FEATURE_RMA : 0);
  params.name = options.name.c_str();
  ucp_context_h handle = nullptr;
  const ucs_status_t status = ucp_init(&params, config, &handle);
  ucp_config_release(config);
  check(status, "ucp_init");
  handle_ = std::shared_ptr<ucp_context>(handle, [](ucp_context_h h) { ucp_cleanup(h); });
}

}  // namespace threechains
