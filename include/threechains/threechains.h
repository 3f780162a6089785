/* ThreeChains from C (and from anything that calls C: Fortran through
 * iso_c_binding, Python through ctypes).
 *
 * The same library as the C++ API (<threechains/threechains.hpp>), behind
 * opaque handles. Rules that hold for every call:
 *
 *  - Every call that can fail returns a threechains_status; THREECHAINS_OK is 0.
 *    threechains_last_error() then holds a message saying what went wrong, for
 *    the calling thread, until its next failing call.
 *  - Handles come from a *_create / *_load / *_connect call and go back with the
 *    matching *_destroy, which accepts NULL and never fails. A handle holds
 *    what it needs alive (a worker holds its context, a channel its worker), so
 *    handles can be destroyed in any order.
 *  - Option structs start with a `size` member: call the *_init function, then
 *    set the fields you need. The library reads only the fields that fit in
 *    `size`, so a program built against this header keeps working with a
 *    later library that adds fields.
 *  - A worker is single-threaded: use one worker's handles from one thread at
 *    a time (as UCX's own UCS_THREAD_MODE_SINGLE workers). The last-error
 *    message is per thread.
 *
 * Injected code does not use this header: it calls <threechains/runtime.h>. */
#ifndef THREECHAINS_THREECHAINS_H
#define THREECHAINS_THREECHAINS_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define THREECHAINS_C_API __attribute__((visibility("default")))
#else
#define THREECHAINS_C_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status ------------------------------------------------------------ */

/* What went wrong. The values are those of threechains::errc (C++), plus
 * THREECHAINS_UCX_ERROR for a failure reported by UCX itself and
 * THREECHAINS_UNKNOWN_ERROR for anything else (out of memory, a C++ error). */
typedef enum threechains_status {
  THREECHAINS_OK = 0,
  THREECHAINS_BAD_MAGIC = 1,
  THREECHAINS_BAD_VERSION = 2,
  THREECHAINS_BAD_CODEC = 3,
  THREECHAINS_TRUNCATED_FRAME = 4,
  THREECHAINS_BAD_SEQUENCE = 5,
  THREECHAINS_CODE_IDENTITY_MISMATCH = 6,
  THREECHAINS_FRAME_TOO_LARGE = 7,
  THREECHAINS_BAD_CONTAINER = 8,
  THREECHAINS_NO_IMAGE_FOR_TARGET = 9,
  THREECHAINS_JIT_FAILED = 10,
  THREECHAINS_SYMBOL_NOT_FOUND = 11,
  THREECHAINS_DEPENDENCY_NOT_FOUND = 12,
  THREECHAINS_UNKNOWN_CODE = 13,
  THREECHAINS_PROTOCOL = 14,
  THREECHAINS_INVALID_ARGUMENT = 15,
  THREECHAINS_PEER_GONE = 16,
  THREECHAINS_TIMEOUT = 17,
  THREECHAINS_IO = 18,
  THREECHAINS_PEER_REFUSED = 19,
  THREECHAINS_CODE_REFUSED = 20,
  THREECHAINS_IMPORT_REFUSED = 21,
  THREECHAINS_LIMIT_EXCEEDED = 22,
  THREECHAINS_CODE_TRAPPED = 23, /* confined code broke a rule and was stopped */
  THREECHAINS_GPU_FAILED = 24,   /* GPU code could not run (no GPU, PTX JIT, kernel fault) */
  THREECHAINS_WOULD_BLOCK = 100, /* a non-blocking send found the ring full */
  THREECHAINS_UCX_ERROR = 200,   /* UCX failed; the message names its status */
  THREECHAINS_UNKNOWN_ERROR = 255
} threechains_status;

/* The calling thread's message for its last failing call ("" if none). Valid
 * until that thread's next call into the library. */
THREECHAINS_C_API const char* threechains_last_error(void);
/* A fixed description of a status ("timed out", ...). */
THREECHAINS_C_API const char* threechains_status_string(threechains_status status);
/* The library's version, "major.minor.patch". */
THREECHAINS_C_API const char* threechains_version(void);

/* ---- UCX context and worker -------------------------------------------- */

typedef struct threechains_context threechains_context;
typedef struct threechains_worker threechains_worker;

/* transport: "shm", "tcp" or "any" (NULL: "any", UCX_TLS decides). */
THREECHAINS_C_API threechains_status threechains_context_create(const char* transport,
                                                                threechains_context** out);
THREECHAINS_C_API void threechains_context_destroy(threechains_context* context);
THREECHAINS_C_API threechains_status threechains_worker_create(threechains_context* context,
                                                               threechains_worker** out);
THREECHAINS_C_API void threechains_worker_destroy(threechains_worker* worker);
/* One round of UCX progress; returns the events handled. */
THREECHAINS_C_API unsigned threechains_worker_progress(threechains_worker* worker);

/* ---- keys and trust (docs/security.md) --------------------------------- */

typedef struct threechains_keypair threechains_keypair;
typedef struct threechains_public_key threechains_public_key;
typedef struct threechains_trust threechains_trust;

/* A key pair from a secret-key file (threechains-key generate), or a new one. */
THREECHAINS_C_API threechains_status threechains_keypair_load(const char* secret_path,
                                                              threechains_keypair** out);
THREECHAINS_C_API threechains_status threechains_keypair_generate(threechains_keypair** out);
THREECHAINS_C_API void threechains_keypair_destroy(threechains_keypair* key);
THREECHAINS_C_API threechains_status threechains_public_key_load(const char* path,
                                                                 threechains_public_key** out);
/* The public half of a key pair (a new handle). */
THREECHAINS_C_API threechains_status threechains_keypair_public(const threechains_keypair* key,
                                                                threechains_public_key** out);
THREECHAINS_C_API void threechains_public_key_destroy(threechains_public_key* key);

/* Who may connect and whose code runs. A new trust refuses everyone; allow
 * peers and code signers by key. threechains_trust_anyone() accepts every
 * peer and all code: for development only. */
THREECHAINS_C_API threechains_status threechains_trust_create(threechains_trust** out);
THREECHAINS_C_API threechains_status threechains_trust_anyone(threechains_trust** out);
THREECHAINS_C_API threechains_status
threechains_trust_allow_peer(threechains_trust* trust, const threechains_public_key* key);
/* Code signed by `key` runs confined (bitcode only, checked; see
 * <threechains/confinement.hpp>). */
THREECHAINS_C_API threechains_status
threechains_trust_allow_code_signer(threechains_trust* trust, const threechains_public_key* key);
/* Code signed by `key` runs as it is, machine code included: fully trusted. */
THREECHAINS_C_API threechains_status threechains_trust_allow_native_code_signer(
    threechains_trust* trust, const threechains_public_key* key);
THREECHAINS_C_API void threechains_trust_destroy(threechains_trust* trust);

/* ---- ifuncs (source side) ---------------------------------------------- */

typedef struct threechains_ifunc threechains_ifunc;

/* An ifunc from a container file (.tcc: threechains_add_ifunc, threechains-pack). */
THREECHAINS_C_API threechains_status threechains_ifunc_load(const char* path,
                                                            threechains_ifunc** out);
/* An ifunc from a container in memory (copied). */
THREECHAINS_C_API threechains_status threechains_ifunc_from_memory(const void* container,
                                                                   size_t size,
                                                                   threechains_ifunc** out);
THREECHAINS_C_API void threechains_ifunc_destroy(threechains_ifunc* ifunc);
/* The ifunc's name, valid as long as the handle. */
THREECHAINS_C_API const char* threechains_ifunc_name(const threechains_ifunc* ifunc);
/* The 64-bit identity of its code (what a target caches it by). */
THREECHAINS_C_API uint64_t threechains_ifunc_id(const threechains_ifunc* ifunc);

/* ---- receiver (target side) -------------------------------------------- */

typedef struct threechains_receiver threechains_receiver;

/* Called for each rejected frame or failed load (default: printed to stderr). */
typedef void (*threechains_error_fn)(void* user, threechains_status status, const char* message);

typedef struct threechains_receiver_options {
  size_t size;                         /* sizeof(threechains_receiver_options) */
  uint16_t port;                       /* 0: the OS picks (threechains_receiver_port) */
  const threechains_trust* trust;      /* NULL: refuse every peer (the secure default) */
  const threechains_keypair* identity; /* NULL: a key made at start */
  void* target_args;                   /* third argument of every ifunc's main */
  uint32_t max_slots;                  /* ring slots per source */
  size_t max_slot_size;                /* bytes per slot */
  int unrestricted_imports;            /* nonzero: injected code may import anything */
  threechains_error_fn on_error;       /* NULL: print to stderr */
  void* on_error_user;
  /* appended later (read only if size covers it): how many bytes of
   * *target_args confined code may use; 0: none (it gets the pointer only,
   * or null in the window tier) */
  size_t target_args_bytes;
  /* appended later: nonzero runs GPU ifuncs on CUDA device gpu_device
   * (docs/gpu.md); a GPU that cannot be opened is reported, not fatal */
  int gpu;
  int gpu_device;
  /* appended later: what confined code (from signers trusted for confined
   * code only) may cost this Receiver (docs/security.md, "What one frame can
   * cost"); 0 keeps each default. */
  uint64_t confined_time_budget_us; /* per invocation (10000) */
  uint64_t compile_time_limit_ms;   /* per compile, in its worker process (2000) */
  size_t compile_memory_limit;      /* address space a compile may add (2 GiB) */
  size_t max_code_bytes_per_key;    /* code and globals one key may hold loaded (128 MiB) */
  /* appended later: the CPUs the library's helpers run on (the compile
   * workers of confined code, the threads beside the one that serves):
   * helper_cpu_count ids, copied at create. 0 (the default) leaves them
   * where they start, on the CPUs of the thread that creates the receiver;
   * a rank bound to one core should name a spare one (docs/bindings.md).
   * An id outside 0..1023: THREECHAINS_INVALID_ARGUMENT; where none of the
   * ids is a CPU this process may use, the helpers stay where they start. */
  const int* helper_cpus;
  size_t helper_cpu_count;
} threechains_receiver_options;

typedef struct threechains_receiver_stats {
  size_t size; /* set by the caller: sizeof(threechains_receiver_stats) */
  uint64_t frames_dispatched;
  uint64_t frames_rejected;
  uint64_t code_loads;
  uint64_t cache_misses;
  uint64_t peers_connected;
  uint64_t peers_closed;
  uint64_t peers_lost;
  uint64_t peers_refused;
  uint64_t code_refused;
  uint64_t evictions;
  uint64_t last_load_ns;
  /* appended later: a caller built against an older header sets a smaller size */
  uint64_t code_trapped; /* confined invocations stopped for breaking a rule */
  uint64_t sleeps;       /* times the serving loop slept, idle */
  uint64_t doorbells;    /* frames that found their ring cold and woke it */
  /* appended later: frames of a shared-memory ring run through the window
   * tier's runs, one way into the window each (docs/performance.md, "Runs of
   * frames in one window entry"); frames that arrive by Active Message
   * (tcp) run one by one and are not counted */
  uint64_t frames_in_window_runs;
} threechains_receiver_stats;

THREECHAINS_C_API void threechains_receiver_options_init(threechains_receiver_options* options);
/* Listens for sources. A worker has one receiver (or one node). */
THREECHAINS_C_API threechains_status
threechains_receiver_create(threechains_worker* worker, const threechains_receiver_options* options,
                            threechains_receiver** out);
THREECHAINS_C_API void threechains_receiver_destroy(threechains_receiver* receiver);
THREECHAINS_C_API uint16_t threechains_receiver_port(const threechains_receiver* receiver);
/* Non-blocking: progresses once, runs what is committed; *dispatched (may be
 * NULL) gets the number of frames run. */
THREECHAINS_C_API threechains_status threechains_receiver_poll(threechains_receiver* receiver,
                                                               unsigned* dispatched);
/* Serves on a progress thread of the library's own until stop (the
 * prototype's daemon); ifuncs then run on that thread. */
THREECHAINS_C_API threechains_status threechains_receiver_start(threechains_receiver* receiver);
THREECHAINS_C_API void threechains_receiver_stop(threechains_receiver* receiver);
/* Confined code may use none of *target_args: see ..._set_target_args_sized. */
THREECHAINS_C_API threechains_status
threechains_receiver_set_target_args(threechains_receiver* receiver, void* target_args);
/* The same, and confined code may read and write `bytes` of it. */
THREECHAINS_C_API threechains_status threechains_receiver_set_target_args_sized(
    threechains_receiver* receiver, void* target_args, size_t bytes);
/* Memory confined code may use, the window tier without a copy: `bytes` of
 * zeroed memory (whole pages) in *out, writable by confined code if
 * `writable`, owned by the receiver and valid while it lives (never freed
 * before). Pass it (or part of it) to ..._set_target_args_sized before
 * peers send code, and point payloads into it: confined code that needs no
 * import then runs in the
 * window tier, near native speed (docs/security.md, "The window tier"); a
 * target_args of the application's own keeps it in the checked tier.
 * Every confined ifunc may use every piece (`name` is for reports).
 * THREECHAINS_INVALID_ARGUMENT while the progress thread serves;
 * THREECHAINS_LIMIT_EXCEEDED past 2 GiB in all. */
THREECHAINS_C_API threechains_status threechains_receiver_allocate_exposed(
    threechains_receiver* receiver, const char* name, size_t bytes, int writable, void** out);
/* Fills the fields of *stats that fit in stats->size. THREECHAINS_INVALID_ARGUMENT
 * while the progress thread serves (it writes them): stop it first. */
THREECHAINS_C_API threechains_status threechains_receiver_stats_get(
    const threechains_receiver* receiver, threechains_receiver_stats* stats);
/* What one ifunc (one code id) did at a receiver. */
typedef struct threechains_ifunc_stats {
  uint64_t code;          /* its code identity */
  char name[64];          /* NUL-terminated, cut if longer; "" for code refused unread */
  uint32_t loaded;        /* 1: in the cache now (statistics outlive an eviction) */
  uint32_t in_window;     /* 1: loaded confined in the window tier (was `reserved`, 0) */
  uint64_t calls;         /* invocations, trapped ones included */
  uint64_t payload_bytes; /* what those calls were given */
  uint64_t refusals;      /* loads of it refused: trust, signature, imports, limits */
  uint64_t traps;         /* confined invocations stopped for breaking a rule */
  uint64_t timed_calls;   /* calls timed: its first, then one call in 1024 of all */
  uint64_t timed_ns;      /* time inside the ifunc over those calls */
} threechains_ifunc_stats;
/* Per-ifunc statistics, most called first: fills out[0..capacity) and sets
 * *count to how many there are (more than capacity: call again with room).
 * entry_size is the caller's sizeof(threechains_ifunc_stats): fields a later
 * header appends are left out for an older caller, and a newer caller's
 * extra bytes are zeroed (an array of entries cannot carry a size member
 * each, as threechains_receiver_stats does). THREECHAINS_INVALID_ARGUMENT
 * while the progress thread serves. */
THREECHAINS_C_API threechains_status threechains_receiver_ifunc_stats(
    const threechains_receiver* receiver, threechains_ifunc_stats* out, size_t capacity,
    size_t entry_size, size_t* count);
/* Sources connected now (0 while the progress thread serves). */
THREECHAINS_C_API size_t threechains_receiver_peers(const threechains_receiver* receiver);
/* GPU ifuncs' device memory (options.gpu): allocated by the receiver and
 * exposed to them (*device_address: its address on the GPU), or memory of
 * the application's (cudaMalloc) exposed; and copies to and from it.
 * THREECHAINS_GPU_FAILED where the receiver has no GPU (the message says why). */
THREECHAINS_C_API threechains_status threechains_receiver_allocate_device(
    threechains_receiver* receiver, const char* name, size_t bytes, void** device_address);
THREECHAINS_C_API threechains_status threechains_receiver_expose_device(
    threechains_receiver* receiver, const char* name, void* device_address, size_t bytes);
THREECHAINS_C_API threechains_status threechains_receiver_copy_to_device(
    threechains_receiver* receiver, void* device_address, const void* host, size_t bytes);
THREECHAINS_C_API threechains_status threechains_receiver_copy_from_device(
    threechains_receiver* receiver, void* host, const void* device_address, size_t bytes);

/* ---- source and channels ----------------------------------------------- */

typedef struct threechains_source threechains_source;
typedef struct threechains_channel threechains_channel;

typedef struct threechains_channel_options {
  size_t size;      /* sizeof(threechains_channel_options) */
  uint32_t slots;   /* ring slots asked for */
  size_t slot_size; /* bytes per slot asked for */
  uint32_t connect_timeout_ms;
  uint32_t timeout_ms;                      /* send on a full ring, flush, close */
  const threechains_keypair* identity;      /* the key this source proves it holds */
  const threechains_public_key* target_key; /* if set: the target must prove it */
} threechains_channel_options;

THREECHAINS_C_API void threechains_channel_options_init(threechains_channel_options* options);
THREECHAINS_C_API threechains_status threechains_source_create(threechains_worker* worker,
                                                               threechains_source** out);
THREECHAINS_C_API void threechains_source_destroy(threechains_source* source);
/* Connects to the receiver at host:port (options may be NULL: defaults). */
THREECHAINS_C_API threechains_status
threechains_source_connect(threechains_source* source, const char* host, uint16_t port,
                           const threechains_channel_options* options, threechains_channel** out);

/* Sends `ifunc` with a copy of `payload` (blocks while the ring is full, up to
 * the channel's timeout). The first send of an ifunc on a channel carries its
 * code; later ones only the payload. */
THREECHAINS_C_API threechains_status threechains_channel_send(threechains_channel* channel,
                                                              const threechains_ifunc* ifunc,
                                                              const void* payload, size_t size);
/* As threechains_channel_send, but returns THREECHAINS_WOULD_BLOCK on a full ring. */
THREECHAINS_C_API threechains_status threechains_channel_try_send(threechains_channel* channel,
                                                                  const threechains_ifunc* ifunc,
                                                                  const void* payload, size_t size);
/* Waits until the target has run every frame sent so far. */
THREECHAINS_C_API threechains_status threechains_channel_flush(threechains_channel* channel);
/* Flushes, says goodbye and closes; the handle stays valid (destroy it). */
THREECHAINS_C_API threechains_status threechains_channel_close(threechains_channel* channel);
/* Without close: says goodbye without waiting (committed frames still run). */
THREECHAINS_C_API void threechains_channel_destroy(threechains_channel* channel);
THREECHAINS_C_API unsigned threechains_channel_progress(threechains_channel* channel);
THREECHAINS_C_API size_t threechains_channel_max_payload(const threechains_channel* channel);
THREECHAINS_C_API uint64_t threechains_channel_frames_sent(const threechains_channel* channel);

/* ---- node: one rank of a mesh (X-RDMA) --------------------------------- */

typedef struct threechains_node threechains_node;

typedef struct threechains_node_options {
  size_t size; /* sizeof(threechains_node_options) */
  /* By pointer, so that each struct can grow at its end on its own (NULL:
   * defaults). Read only during threechains_node_create/_bootstrap. */
  const threechains_receiver_options* receiver; /* this rank's receiver */
  const threechains_channel_options* channel;   /* the channels to other ranks */
  /* Objects injected code finds with threechains_lookup(name), exposed before
   * the node connects (frames can run while it connects): exposed_count
   * names, each with its object. */
  const char* const* exposed_names;
  void* const* exposed_objects;
  size_t exposed_count;
} threechains_node_options;

THREECHAINS_C_API void threechains_node_options_init(threechains_node_options* options);
/* Rank `rank` of `ranks`; connect it with threechains_node_connect. */
THREECHAINS_C_API threechains_status
threechains_node_create(threechains_worker* worker, int64_t rank, int64_t ranks,
                        const threechains_node_options* options, threechains_node** out);
/* Rank, size and every rank's address from the process manager that started
 * this process, connected to every other rank. launcher: "pmix" (mpirun,
 * srun --mpi=pmix), "mpi" (initialises MPI if the program has not), or NULL /
 * "auto" (PMIx if this process was started by one, else MPI). */
THREECHAINS_C_API threechains_status
threechains_node_bootstrap(threechains_worker* worker, const char* launcher,
                           const threechains_node_options* options, threechains_node** out);
THREECHAINS_C_API void threechains_node_destroy(threechains_node* node);
THREECHAINS_C_API int64_t threechains_node_rank(const threechains_node* node);
THREECHAINS_C_API int64_t threechains_node_ranks(const threechains_node* node);
THREECHAINS_C_API uint16_t threechains_node_port(const threechains_node* node);
/* hosts[r], ports[r]: rank r's receiver (this rank's entry is ignored). */
THREECHAINS_C_API threechains_status threechains_node_connect(threechains_node* node,
                                                              const char* const* hosts,
                                                              const uint16_t* ports);
/* Makes `object` reachable from injected code: threechains_lookup(name). */
THREECHAINS_C_API threechains_status threechains_node_expose(threechains_node* node,
                                                             const char* name, void* object);
THREECHAINS_C_API threechains_status threechains_node_send(threechains_node* node, int64_t rank,
                                                           const threechains_ifunc* ifunc,
                                                           const void* payload, size_t size);
THREECHAINS_C_API threechains_status threechains_node_poll(threechains_node* node,
                                                           unsigned* dispatched);
/* Serves until every rank of a bootstrapped node has entered the barrier. */
THREECHAINS_C_API threechains_status threechains_node_barrier(threechains_node* node);
/* Finishes queued sends and closes every channel. */
THREECHAINS_C_API threechains_status threechains_node_close(threechains_node* node);

#ifdef __cplusplus
}
#endif

#endif /* THREECHAINS_THREECHAINS_H */
