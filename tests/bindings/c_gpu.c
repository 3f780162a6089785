/* The GPU calls of the C API: a receiver asked for a GPU either has one
 * (then device memory it allocates takes bytes in and gives them back) or
 * says why not, with THREECHAINS_GPU_FAILED, and serves on. Python does the
 * same through its binding (py_gpu.py). Prints which case it checked. */
#include "c_support.h"

#include <string.h>

int main(void) {
  threechains_context* context = NULL;
  threechains_worker* worker = NULL;
  threechains_receiver* receiver = NULL;
  CHECK(threechains_context_create("tcp", &context));
  CHECK(threechains_worker_create(context, &worker));
  threechains_receiver_options options;
  threechains_receiver_options_init(&options);
  options.gpu = 1;
  options.gpu_device = 0;
  options.on_error = NULL;
  CHECK(threechains_receiver_create(worker, &options, &receiver));
  void* device = NULL;
  const threechains_status status =
      threechains_receiver_allocate_device(receiver, "field", 64, &device);
  int rc = 0;
  if (status == THREECHAINS_OK) {
    char in[64];
    char out[64];
    for (int i = 0; i < 64; ++i) in[i] = (char)(i * 7);
    memset(out, 0, sizeof(out));
    CHECK(threechains_receiver_copy_to_device(receiver, device, in, sizeof(in)));
    CHECK(threechains_receiver_copy_from_device(receiver, out, device, sizeof(out)));
    rc = memcmp(in, out, sizeof(in)) == 0 ? 0 : 1;
    printf("GPU: 64 bytes to the device and back: %s\n", rc == 0 ? "same" : "DIFFERENT");
  } else {
    const char* why = threechains_last_error();
    rc = status == THREECHAINS_GPU_FAILED && strstr(why, "no GPU") != NULL ? 0 : 1;
    printf("no GPU: %s (%s)\n", threechains_status_string(status), why);
  }
  unsigned ran = 0;
  CHECK(threechains_receiver_poll(receiver, &ran)); /* it serves on */
  threechains_receiver_destroy(receiver);
  threechains_worker_destroy(worker);
  threechains_context_destroy(context);
  return rc;
}
