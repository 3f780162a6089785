/* TSI, the counter program of the Two-Chains paper, written against the
 * prototype's ifunc API (<threechains/ucp_ifunc.h>) and plain UCX.
 *
 *   UCX_IFUNC_LIB_DIR=<dir with tsi.tcc> tsi TRANSPORT ROUNDS [SERVER_LIB_DIR]
 *
 * Two processes (forked here; the prototype exchanged addresses over a
 * socket, as this does over a socketpair) each map a heap with UCX and give
 * the other its worker address, the heap's address and its rkey. The client
 * sends the "tsi" ifunc with an increment into the server's heap with one put;
 * the server polls its heap, the ifunc adds the increment to the server's
 * counter, and the server sends the same ifunc back into the client's heap.
 * After ROUNDS round trips both counters must be 1 + 2 + ... + ROUNDS.
 * SERVER_LIB_DIR gives the server a library directory of its own (another
 * build of tsi there: the client's code is then not the server's own). */
#include <threechains/ucp_ifunc.h>

#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HEAP_SIZE (1u << 16)

struct tsi_target_args {
  uint64_t counter;
};

struct peer {
  ucp_context_h context;
  ucp_worker_h worker;
  ucp_mem_h heap_memh;
  void* heap;
  ucp_ep_h ep;
  ucp_rkey_h rkey;
  uint64_t remote_heap;
};

static void die(const char* what, ucs_status_t status) {
  fprintf(stderr, "tsi (pid %d): %s: %s\n", (int)getpid(), what, ucs_status_string(status));
  exit(1);
}

static void send_all(int fd, const void* data, size_t size) {
  if (write(fd, &size, sizeof(size)) != (ssize_t)sizeof(size) ||
      write(fd, data, size) != (ssize_t)size) {
    die("socket write", UCS_ERR_IO_ERROR);
  }
}

static void* receive_all(int fd, size_t* size) {
  if (read(fd, size, sizeof(*size)) != (ssize_t)sizeof(*size)) die("socket read", UCS_ERR_IO_ERROR);
  char* data = malloc(*size);
  size_t got = 0;
  while (got < *size) {
    const ssize_t n = read(fd, data + got, *size - got);
    if (n <= 0) die("socket read", UCS_ERR_IO_ERROR);
    got += (size_t)n;
  }
  return data;
}

/* Both sides wait for each other (the prototype's socket_p2p_sync), still
 * progressing the worker: over tcp, the other side's last flush completes
 * only when this side's worker acknowledges its put. */
static void sync_with(int fd, ucp_worker_h worker) {
  char byte = 's';
  if (write(fd, &byte, 1) != 1) die("socket sync", UCS_ERR_IO_ERROR);
  struct pollfd other = {fd, POLLIN, 0};
  while (poll(&other, 1, 0) == 0) {
    if (worker != NULL) ucp_worker_progress(worker);
  }
  if (read(fd, &byte, 1) != 1) die("socket sync", UCS_ERR_IO_ERROR);
}

static void flush(struct peer* p) {
  ucp_request_param_t param;
  memset(&param, 0, sizeof(param));
  void* request = ucp_ep_flush_nbx(p->ep, &param);
  if (UCS_PTR_IS_ERR(request)) die("ucp_ep_flush_nbx", UCS_PTR_STATUS(request));
  if (request == NULL) return;
  ucs_status_t status;
  do {
    ucp_worker_progress(p->worker);
    status = ucp_request_check_status(request);
  } while (status == UCS_INPROGRESS);
  ucp_request_free(request);
  if (status != UCS_OK) die("flush", status);
}

static void setup(struct peer* p, const char* transport, int fd) {
  ucp_config_t* config;
  ucs_status_t s = ucp_config_read(NULL, NULL, &config);
  if (s != UCS_OK) die("ucp_config_read", s);
  s = ucp_config_modify(config, "TLS", strcmp(transport, "tcp") == 0 ? "tcp,self" : "sm,self");
  if (s != UCS_OK) die("ucp_config_modify", s);
  ucp_params_t params;
  memset(&params, 0, sizeof(params));
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA;
  s = ucp_init(&params, config, &p->context);
  ucp_config_release(config);
  if (s != UCS_OK) die("ucp_init", s);

  ucp_worker_params_t wparams;
  memset(&wparams, 0, sizeof(wparams));
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
  s = ucp_worker_create(p->context, &wparams, &p->worker);
  if (s != UCS_OK) die("ucp_worker_create", s);

  ucp_mem_map_params_t mparams;
  memset(&mparams, 0, sizeof(mparams));
  mparams.field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  mparams.length = HEAP_SIZE;
  mparams.flags = UCP_MEM_MAP_ALLOCATE;
  s = ucp_mem_map(p->context, &mparams, &p->heap_memh);
  if (s != UCS_OK) die("ucp_mem_map", s);
  ucp_mem_attr_t attr;
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
  s = ucp_mem_query(p->heap_memh, &attr);
  if (s != UCS_OK) die("ucp_mem_query", s);
  p->heap = attr.address;
  memset(p->heap, 0, HEAP_SIZE);

  /* Tell the other side how to reach our heap; learn how to reach theirs. */
  ucp_address_t* address;
  size_t address_size;
  s = ucp_worker_get_address(p->worker, &address, &address_size);
  if (s != UCS_OK) die("ucp_worker_get_address", s);
  void* rkey_buffer;
  size_t rkey_size;
  s = ucp_rkey_pack(p->context, p->heap_memh, &rkey_buffer, &rkey_size);
  if (s != UCS_OK) die("ucp_rkey_pack", s);
  const uint64_t heap_address = (uint64_t)(uintptr_t)p->heap;
  send_all(fd, address, address_size);
  send_all(fd, rkey_buffer, rkey_size);
  send_all(fd, &heap_address, sizeof(heap_address));
  ucp_rkey_buffer_release(rkey_buffer);
  ucp_worker_release_address(p->worker, address);

  size_t size;
  void* remote_address = receive_all(fd, &size);
  void* remote_rkey = receive_all(fd, &size);
  uint64_t* remote_heap = receive_all(fd, &size);
  p->remote_heap = *remote_heap;
  free(remote_heap);

  ucp_ep_params_t eparams;
  memset(&eparams, 0, sizeof(eparams));
  eparams.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  eparams.address = remote_address;
  s = ucp_ep_create(p->worker, &eparams, &p->ep);
  if (s != UCS_OK) die("ucp_ep_create", s);
  s = ucp_ep_rkey_unpack(p->ep, remote_rkey, &p->rkey);
  if (s != UCS_OK) die("ucp_ep_rkey_unpack", s);
  free(remote_address);
  free(remote_rkey);
}

static void teardown(struct peer* p, int fd) {
  sync_with(fd, p->worker); /* neither side leaves while the other may still put */
  ucp_rkey_destroy(p->rkey);
  ucp_ifunc_forget_ep(p->context, p->ep); /* a later endpoint there gets the code again */
  ucp_request_param_t param;
  memset(&param, 0, sizeof(param));
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void* request = ucp_ep_close_nbx(p->ep, &param);
  if (UCS_PTR_IS_PTR(request)) {
    while (ucp_request_check_status(request) == UCS_INPROGRESS) ucp_worker_progress(p->worker);
    ucp_request_free(request);
  }
  sync_with(fd, NULL);
  ucp_mem_unmap(p->context, p->heap_memh);
  ucp_worker_destroy(p->worker);
  ucp_ifunc_context_release(p->context); /* before UCX can reuse its address */
  ucp_cleanup(p->context);
}

/* Polls the heap until one frame ran there (or 30 s pass, or the other side
 * closed the socket: it failed). */
static void await_frame(struct peer* p, struct tsi_target_args* args, int fd) {
  const time_t deadline = time(NULL) + 30;
  for (unsigned polls = 1;; ++polls) {
    const ucs_status_t s = ucp_poll_ifunc(p->context, p->heap, HEAP_SIZE, args, p->worker);
    if (s == UCS_OK) return;
    if (s != UCS_ERR_NO_MESSAGE) die("ucp_poll_ifunc", s);
    if (polls % 4096 == 0) {
      struct pollfd other = {fd, POLLIN, 0};
      if (poll(&other, 1, 0) == 1) die("the other side left", UCS_ERR_CONNECTION_RESET);
      if (time(NULL) > deadline) die("waiting for a frame", UCS_ERR_TIMED_OUT);
    }
  }
}

static int run(int client, const char* transport, uint64_t rounds, const char* lib_dir, int fd) {
  struct peer p;
  memset(&p, 0, sizeof(p));
  setup(&p, transport, fd);
  if (lib_dir != NULL) {
    const ucs_status_t s = ucp_ifunc_set_lib_dir(p.context, lib_dir);
    if (s != UCS_OK) die("ucp_ifunc_set_lib_dir", s);
  }

  ucp_ifunc_h tsi;
  ucs_status_t s = ucp_register_ifunc(p.context, "tsi", &tsi);
  if (s != UCS_OK) die("ucp_register_ifunc(tsi)", s);
  uint64_t increment = 1;
  ucp_ifunc_msg_t msg;
  s = ucp_ifunc_msg_create(tsi, &increment, sizeof(increment), &msg);
  if (s != UCS_OK) die("ucp_ifunc_msg_create", s);
  if (msg.frame_size > HEAP_SIZE) die("the message does not fit the heap", UCS_ERR_EXCEEDS_LIMIT);
  uint64_t* payload;
  s = ucp_ifunc_msg_get_payload_ptr(&msg, (void**)&payload, NULL);
  if (s != UCS_OK) die("ucp_ifunc_msg_get_payload_ptr", s);

  struct tsi_target_args args = {0};
  sync_with(fd, p.worker);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (uint64_t i = 1; i <= rounds; ++i) {
    if (!client) await_frame(&p, &args, fd); /* the server receives first, then sends */
    *payload = i;
    s = ucp_ifunc_send_nbix(p.ep, msg, p.remote_heap, p.rkey);
    if (UCS_STATUS_IS_ERR(s)) die("ucp_ifunc_send_nbix", s);
    flush(&p);
    if (client) await_frame(&p, &args, fd);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  const double us =
      ((double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3);
  const uint64_t expected = rounds * (rounds + 1) / 2;
  printf("tsi %s over %s: counter %" PRIu64 " (expected %" PRIu64 "), %.2f us per round trip\n",
         client ? "client" : "server", transport, args.counter, expected, us / (double)rounds);
  fflush(stdout);

  /* Either order is fine: a message keeps its ifunc's handle alive. */
  ucp_deregister_ifunc(p.context, tsi);
  ucp_ifunc_msg_free(msg);
  teardown(&p, fd);
  return args.counter == expected ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    fprintf(stderr,
            "usage: UCX_IFUNC_LIB_DIR=<dir with tsi.tcc> tsi TRANSPORT(shm|tcp) ROUNDS "
            "[SERVER_LIB_DIR]\n");
    return 2;
  }
  const char* server_lib_dir = argc == 4 ? argv[3] : NULL;
  const uint64_t rounds = strtoull(argv[2], NULL, 10);
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return 1;
  const pid_t server = fork(); /* before any UCX state exists */
  if (server == 0) {
    close(fds[0]);
    const int rc = run(0, argv[1], rounds, server_lib_dir, fds[1]);
    fflush(stdout);
    _exit(rc);
  }
  close(fds[1]);
  const int client_rc = run(1, argv[1], rounds, NULL, fds[0]);
  int status = 0;
  waitpid(server, &status, 0);
  const int server_rc = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  return client_rc || server_rc;
}
