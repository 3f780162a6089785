/* The counter ifunc driven through the C API (<threechains/threechains.h>).
 *
 *   c_counter pair   TRANSPORT CONTAINER KEY PUBKEY FRAMES   (forks: target + source)
 *   c_counter pair-confined ...                              (the same, the code confined)
 *   c_counter target TRANSPORT PUBKEY FRAMES PORTFILE        (serves until FRAMES ran)
 *   c_counter source TRANSPORT CONTAINER KEY FRAMES PORT     (sends increments 1..FRAMES)
 *
 * The target trusts PUBKEY for peers and code; the source proves KEY. The
 * target checks the counter is 1 + 2 + ... + FRAMES, each frame run once. */
#include "c_support.h"

#include <dirent.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t errors_seen = 0;
static void on_error(void* user, threechains_status status, const char* message) {
  (void)user;
  ++errors_seen;
  fprintf(stderr, "target error (%s): %s\n", threechains_status_string(status), message);
}

/* The last CPU this process may run on, from /proc/self/status
 * ("Cpus_allowed_list:\t0-3,8"), and how many it may: -1 if unreadable. */
static int last_allowed_cpu(int* count) {
  FILE* status = fopen("/proc/self/status", "r");
  char line[4096];
  int last = -1;
  *count = 0;
  while (status != NULL && fgets(line, sizeof(line), status) != NULL) {
    if (strncmp(line, "Cpus_allowed_list:", 18) != 0) continue;
    for (char* range = strtok(line + 18, ",\n"); range != NULL; range = strtok(NULL, ",\n")) {
      char* dash = strchr(range, '-');
      const int first = atoi(range);
      last = dash != NULL ? atoi(dash + 1) : first;
      *count += last - first + 1;
    }
  }
  if (status != NULL) fclose(status);
  return last;
}

/* The thread of this process named `name` (prctl/pthread_setname_np), its
 * allowed CPUs as /proc writes them into `cpus`; 0 if there is none. */
static int thread_cpus(const char* name, char* cpus, size_t size) {
  DIR* tasks = opendir("/proc/self/task");
  char path[512];
  char line[4096];
  int found = 0;
  for (struct dirent* task = tasks != NULL ? readdir(tasks) : NULL; task != NULL && !found;
       task = readdir(tasks)) {
    if (task->d_name[0] == '.') continue;
    snprintf(path, sizeof(path), "/proc/self/task/%s/comm", task->d_name);
    FILE* comm = fopen(path, "r");
    if (comm == NULL) continue;
    const int named =
        fgets(line, sizeof(line), comm) != NULL && strncmp(line, name, strlen(name)) == 0;
    fclose(comm);
    if (!named) continue;
    snprintf(path, sizeof(path), "/proc/self/task/%s/status", task->d_name);
    FILE* status = fopen(path, "r");
    while (status != NULL && !found && fgets(line, sizeof(line), status) != NULL) {
      if (strncmp(line, "Cpus_allowed_list:\t", 19) != 0) continue;
      size_t length = strcspn(line + 19, "\n");
      if (length >= size) length = size - 1;
      memcpy(cpus, line + 19, length);
      cpus[length] = '\0';
      found = 1;
    }
    if (status != NULL) fclose(status);
  }
  if (tasks != NULL) closedir(tasks);
  return found;
}

/* Serves until `frames` frames ran and the source left; writes the port to
 * `port_fd` (a pipe) or `port_file`. Returns the exit code. */
/* `confined`: the key signs code that runs confined only, and the counter
 * lives in memory the receiver allocated for confined code, where the window
 * tier reaches it. */
static int run_target(const char* transport, const char* public_key, uint64_t frames, int port_fd,
                      const char* port_file, int expect_refusal, int confined) {
  threechains_context* context = NULL;
  threechains_worker* worker = NULL;
  threechains_receiver* receiver = NULL;
  CHECK(threechains_context_create(transport, &context));
  CHECK(threechains_worker_create(context, &worker));
  threechains_trust* trust = NULL;
  if (confined) {
    threechains_public_key* key = NULL;
    CHECK(threechains_public_key_load(public_key, &key));
    CHECK(threechains_trust_create(&trust));
    CHECK(threechains_trust_allow_peer(trust, key));
    CHECK(threechains_trust_allow_code_signer(trust, key));
    threechains_public_key_destroy(key);
  } else {
    trust = trust_of_key_file(public_key);
  }

  volatile uint64_t own_counter = 0;
  volatile uint64_t* counter = &own_counter;
  threechains_receiver_options options;
  threechains_receiver_options_init(&options);
  options.trust = trust;
  if (!confined) options.target_args = (void*)counter;
  options.on_error = on_error;
  /* Confined, the helpers (the compile worker, the window verifier) run on
   * the one CPU named: the last this process may use. First what is
   * refused: an id that names no CPU, and a count with no ids. */
  int allowed_cpus = 0;
  const int helper_cpu = last_allowed_cpu(&allowed_cpus);
  if (confined) {
    const int not_a_cpu = -1;
    const int* refused_ids[] = {&not_a_cpu, NULL};
    for (size_t i = 0; i < 2; ++i) {
      threechains_receiver* refused = NULL;
      options.helper_cpus = refused_ids[i];
      options.helper_cpu_count = 1;
      if (threechains_receiver_create(worker, &options, &refused) != THREECHAINS_INVALID_ARGUMENT ||
          strstr(threechains_last_error(), "helper_cpus") == NULL) {
        fprintf(stderr, "c target: helper_cpus %s was not refused: %s\n",
                i == 0 ? "{-1}" : "NULL with a count", threechains_last_error());
        return 1;
      }
    }
    options.helper_cpus = &helper_cpu;
    options.helper_cpu_count = helper_cpu >= 0 ? 1 : 0;
  }
  CHECK(threechains_receiver_create(worker, &options, &receiver));
  if (confined) {
    void* exposed = NULL;
    CHECK(
        threechains_receiver_allocate_exposed(receiver, "counter", sizeof(uint64_t), 1, &exposed));
    counter = (volatile uint64_t*)exposed;
    CHECK(threechains_receiver_set_target_args_sized(receiver, exposed, sizeof(uint64_t)));
  }

  const uint16_t port = threechains_receiver_port(receiver);
  if (port_fd >= 0) {
    if (write(port_fd, &port, sizeof(port)) != (ssize_t)sizeof(port)) return 1;
    close(port_fd);
  } else {
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", port_file);
    FILE* f = fopen(tmp, "w");
    if (f == NULL) return 1;
    fprintf(f, "%u\n", (unsigned)port);
    fclose(f);
    rename(tmp, port_file); /* appears whole */
  }

  threechains_receiver_stats stats;
  memset(&stats, 0, sizeof(stats));
  stats.size = sizeof(stats);
  const double deadline = seconds() + 60.0;
  do {
    CHECK(threechains_receiver_poll(receiver, NULL));
    CHECK(threechains_receiver_stats_get(receiver, &stats));
  } while ((stats.frames_dispatched < frames || stats.peers_closed < 1) && seconds() < deadline);

  const uint64_t expected = frames * (frames + 1) / 2;
  printf("c target: counter %" PRIu64 " (expected %" PRIu64 "), %" PRIu64 " frames run, %" PRIu64
         " rejected, %" PRIu64 " code load(s), %" PRIu64 " error(s)\n",
         *counter, expected, stats.frames_dispatched, stats.frames_rejected, stats.code_loads,
         errors_seen);
  /* Every error is a refused peer, and each refusal reached on_error. */
  const int ok = *counter == expected && stats.frames_dispatched == frames &&
                 stats.frames_rejected == 0 && stats.code_loads == 1 &&
                 errors_seen == stats.peers_refused &&
                 (!expect_refusal || stats.peers_refused >= 1);

  /* Per ifunc: the counter, every frame's call and its 8-byte payload. */
  threechains_ifunc_stats per_ifunc[4];
  size_t ifuncs = 0;
  CHECK(threechains_receiver_ifunc_stats(receiver, per_ifunc, 4, sizeof(per_ifunc[0]), &ifuncs));
  const int counted = ifuncs == 1 && strcmp(per_ifunc[0].name, "counter") == 0 &&
                      per_ifunc[0].loaded == 1 && per_ifunc[0].calls == frames &&
                      per_ifunc[0].payload_bytes == frames * sizeof(uint64_t) &&
                      per_ifunc[0].timed_calls >= 1 && per_ifunc[0].refusals == 0 &&
                      per_ifunc[0].in_window == (uint32_t)confined;
  printf("c target: ifunc '%s': %" PRIu64 " calls, %" PRIu64 " payload bytes, %" PRIu64
         " timed in %" PRIu64 " ns, %s %s\n",
         ifuncs >= 1 ? per_ifunc[0].name : "?", ifuncs >= 1 ? per_ifunc[0].calls : 0,
         ifuncs >= 1 ? per_ifunc[0].payload_bytes : 0, ifuncs >= 1 ? per_ifunc[0].timed_calls : 0,
         ifuncs >= 1 ? per_ifunc[0].timed_ns : 0,
         ifuncs >= 1 && per_ifunc[0].in_window ? "in a window" : "not in a window",
         counted ? "OK" : "MISMATCH");

  /* A stats struct from an older header (only the first two counters) gets
   * only those written: nothing past its size. */
  struct {
    threechains_receiver_stats head;
    uint64_t guard;
  } older;
  memset(&older, 0xAB, sizeof(older));
  older.head.size = offsetof(threechains_receiver_stats, frames_rejected);
  CHECK(threechains_receiver_stats_get(receiver, &older.head));
  const int sized = older.head.frames_dispatched == frames &&
                    older.head.frames_rejected == UINT64_C(0xABABABABABABABAB);
  if (!sized) fprintf(stderr, "c target: a short stats struct was written past its size\n");

  /* While the progress thread serves, it writes the statistics: reading them
   * is refused with a reason, and allowed again after stop. */
  CHECK(threechains_receiver_start(receiver));
  const threechains_status threaded = threechains_receiver_stats_get(receiver, &stats);
  threechains_receiver_stop(receiver);
  CHECK(threechains_receiver_stats_get(receiver, &stats));
  const int guarded = threaded == THREECHAINS_INVALID_ARGUMENT;
  if (!guarded) fprintf(stderr, "c target: statistics were read under the progress thread\n");

  /* Confined over shared memory, the counter ran in the window tier: frames
   * run there several to one way in (over tcp each arrives on its own). */
  int windowed = 1;
  if (confined && strcmp(transport, "shm") == 0) {
    windowed = stats.frames_in_window_runs > 0 && stats.frames_in_window_runs <= frames;
    printf("c target: %" PRIu64 " frames ran in window runs %s\n", stats.frames_in_window_runs,
           windowed ? "OK" : "MISMATCH");
  }

  /* The window verifier, which checked the counter's code, runs where
   * helper_cpus said. */
  int placed = 1;
  if (confined && allowed_cpus >= 2) {
    char cpus[256] = "";
    char wanted[32];
    snprintf(wanted, sizeof(wanted), "%d", helper_cpu);
    placed = thread_cpus("tc-verify", cpus, sizeof(cpus)) && strcmp(cpus, wanted) == 0;
    printf("c target: the window verifier runs on CPUs '%s' (helper_cpus {%d}) %s\n", cpus,
           helper_cpu, placed ? "OK" : "MISMATCH");
  } else if (confined) {
    printf(
        "c target: this process may use %d CPU(s): where helper_cpus put the helpers is "
        "not checked\n",
        allowed_cpus);
  }

  threechains_receiver_destroy(receiver);
  threechains_trust_destroy(trust);
  threechains_worker_destroy(worker);
  threechains_context_destroy(context);
  return ok && counted && sized && guarded && windowed && placed ? 0 : 1;
}

static int run_source(const char* transport, const char* container, const char* secret_key,
                      uint16_t port, uint64_t frames) {
  threechains_context* context = NULL;
  threechains_worker* worker = NULL;
  threechains_keypair* key = NULL;
  threechains_source* source = NULL;
  threechains_channel* channel = NULL;
  threechains_ifunc* ifunc = NULL;

  /* Bad input is a status and a message, never a crash. */
  if (threechains_ifunc_load("/nonexistent/counter.tcc", &ifunc) != THREECHAINS_IO ||
      strstr(threechains_last_error(), "/nonexistent/counter.tcc") == NULL) {
    fprintf(stderr, "c source: a missing container was not reported: %s\n",
            threechains_last_error());
    return 1;
  }
  if (threechains_context_create("carrier-pigeon", &context) != THREECHAINS_INVALID_ARGUMENT) {
    fprintf(stderr, "c source: an unknown transport was accepted\n");
    return 1;
  }

  CHECK(threechains_context_create(transport, &context));
  CHECK(threechains_worker_create(context, &worker));
  CHECK(threechains_keypair_load(secret_key, &key));
  CHECK(threechains_source_create(worker, &source));
  CHECK(threechains_ifunc_load(container, &ifunc));

  threechains_channel_options options;
  threechains_channel_options_init(&options);
  options.identity = key;
  options.slots = 8;

  /* An options struct from an older header ends before `identity`: the
   * library must not read past its size, so this channel proves a key of its
   * own making, which the target refuses (and reports to its on_error). */
  threechains_channel_options older = options;
  older.size = offsetof(threechains_channel_options, identity);
  const threechains_status refused =
      threechains_source_connect(source, "127.0.0.1", port, &older, &channel);
  if (refused != THREECHAINS_PEER_REFUSED) {
    fprintf(stderr, "c source: a channel without the trusted key was not refused (%s: %s)\n",
            threechains_status_string(refused), threechains_last_error());
    return 1;
  }
  CHECK(threechains_source_connect(source, "127.0.0.1", port, &options, &channel));

  /* Half blocking sends, half non-blocking ones that wait on a full ring. */
  for (uint64_t i = 1; i <= frames; ++i) {
    if (i % 2 == 0) {
      CHECK(threechains_channel_send(channel, ifunc, &i, sizeof(i)));
      continue;
    }
    threechains_status status;
    while ((status = threechains_channel_try_send(channel, ifunc, &i, sizeof(i))) ==
           THREECHAINS_WOULD_BLOCK) {
      threechains_channel_progress(channel);
    }
    CHECK(status);
  }
  CHECK(threechains_channel_flush(channel));
  const uint64_t sent = threechains_channel_frames_sent(channel);
  CHECK(threechains_channel_close(channel));
  printf("c source: %" PRIu64 " frames of '%s' sent\n", sent, threechains_ifunc_name(ifunc));

  /* Handles go in any order: each holds what it needs. */
  threechains_context_destroy(context);
  threechains_worker_destroy(worker);
  threechains_channel_destroy(channel);
  threechains_source_destroy(source);
  threechains_ifunc_destroy(ifunc);
  threechains_keypair_destroy(key);
  return sent == frames ? 0 : 1;
}

int main(int argc, char** argv) {
  const int confined = argc == 7 && strcmp(argv[1], "pair-confined") == 0;
  if (argc == 7 && (strcmp(argv[1], "pair") == 0 || confined)) {
    const uint64_t frames = strtoull(argv[6], NULL, 10);
    int fds[2];
    if (pipe(fds) != 0) return 1;
    /* Fork before any UCX state exists: each process makes its own. */
    const pid_t child = fork();
    if (child == 0) {
      close(fds[0]);
      /* its source tries first */
      const int rc = run_target(argv[2], argv[5], frames, fds[1], NULL, 1, confined);
      fflush(stdout);
      _exit(rc);
    }
    close(fds[1]);
    uint16_t port = 0;
    if (read(fds[0], &port, sizeof(port)) != (ssize_t)sizeof(port)) {
      fprintf(stderr, "c_counter: the target did not start\n");
      return 1;
    }
    const int source_rc = run_source(argv[2], argv[3], argv[4], port, frames);
    int status = 0;
    waitpid(child, &status, 0);
    const int target_rc = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    printf("c_counter pair over %s: source %s, target %s\n", argv[2], source_rc ? "FAILED" : "ok",
           target_rc ? "FAILED" : "ok");
    return source_rc || target_rc;
  }
  if (argc == 6 && strcmp(argv[1], "target") == 0) {
    return run_target(argv[2], argv[3], strtoull(argv[4], NULL, 10), -1, argv[5], 0, 0);
  }
  if (argc == 7 && strcmp(argv[1], "source") == 0) {
    return run_source(argv[2], argv[3], argv[4], (uint16_t)atoi(argv[6]),
                      strtoull(argv[5], NULL, 10));
  }
  fprintf(stderr,
          "usage: c_counter pair[-confined] TRANSPORT CONTAINER KEY PUBKEY FRAMES\n"
          "       c_counter target TRANSPORT PUBKEY FRAMES PORTFILE\n"
          "       c_counter source TRANSPORT CONTAINER KEY FRAMES PORT\n");
  return 2;
}
