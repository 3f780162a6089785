/* The C side of <threechains/ucp_ifunc.h>: in C11 the two prototypes' forms
 * of ucp_register_ifunc (by name, by ucp_ifunc_reg_param_t) and of
 * ucp_poll_ifunc (4 and 5 arguments) are picked by the call's shape. One
 * process: both registrations of b must give the same handle, both polls of
 * an empty buffer must say there is nothing, and a library with a refused
 * import must be refused as a policy decision, so must one needing libz
 * unless THREECHAINS_IFUNC_ALLOW_LIBRARIES names it, and a failed message
 * must free safely. Built with the same -include
 * as the C++ programs; includes only <ucp/api/ucp.h>. */
#include <ucp/api/ucp.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

static void expect(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "FAILED: %s\n", what);
    ++failures;
  }
}

int main(void) {
  ucp_params_t params;
  memset(&params, 0, sizeof(params));
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA;
  ucp_context_h context;
  if (ucp_init(&params, NULL, &context) != UCS_OK) return 1;
  ucp_worker_params_t wp;
  memset(&wp, 0, sizeof(wp));
  ucp_worker_h worker;
  if (ucp_worker_create(context, &wp, &worker) != UCS_OK) return 1;

  ucp_ifunc_h by_name = NULL, by_param = NULL;
  expect(ucp_register_ifunc(context, "b", &by_name) == UCS_OK, "register b by name");
  ucp_ifunc_reg_param_t param = {"b", 0, 1};
  expect(ucp_register_ifunc(context, param, &by_param) == UCS_OK, "register b by parameters");
  expect(by_name != NULL && by_name == by_param, "one library, one handle");
  ucp_ifunc_h by_literal = NULL; /* a compound literal goes in parentheses, as to any macro */
  expect(
      ucp_register_ifunc(context, ((ucp_ifunc_reg_param_t){.name = "b", .pure = 0, .llvm_bc = 1}),
                         &by_literal) == UCS_OK &&
          by_literal == by_name,
      "register b by a compound literal");

  static _Alignas(16) unsigned char buffer[4096];
  size_t counter = 0;
  expect(ucp_poll_ifunc(context, buffer, sizeof(buffer), &counter) == UCS_ERR_NO_MESSAGE,
         "4-argument poll of an empty buffer");
  expect(ucp_poll_ifunc(context, buffer, sizeof(buffer), &counter, worker) == UCS_ERR_NO_MESSAGE,
         "5-argument poll of an empty buffer");

  ucp_ifunc_reg_param_t importer = {"importer", 0, 1};
  ucp_ifunc_h refused = NULL;
  expect(ucp_register_ifunc(context, importer, &refused) == UCS_ERR_REJECTED && refused == NULL,
         "a library importing getpid is refused as a policy decision");
  expect(ucp_register_ifunc(context, "no-such-library", &refused) == UCS_ERR_IO_ERROR,
         "a missing library is an I/O error");

  /* A library that needs libz loads only where the operator allows it. */
  ucp_ifunc_h zver = NULL;
  const char* libraries = getenv("THREECHAINS_IFUNC_ALLOW_LIBRARIES");
  if (libraries != NULL && strstr(libraries, "libz.so.1") != NULL) {
    expect(ucp_register_ifunc(context, "zver", &zver) == UCS_OK && zver != NULL,
           "a library needing libz registers where libz is allowed");
    if (zver != NULL) ucp_deregister_ifunc(context, zver);
  } else {
    expect(ucp_register_ifunc(context, "zver", &zver) == UCS_ERR_REJECTED && zver == NULL,
           "a library needing libz is refused as a policy decision");
  }

  /* The prototypes' programs free a message whose create failed, often an
   * uninitialised local: a failed create leaves it empty, and the free of an
   * empty message does nothing. */
  ucp_ifunc_msg_t failed;
  memset(&failed, 0xa5, sizeof(failed));
  expect(ucp_ifunc_msg_create(NULL, NULL, 8, &failed) == UCS_ERR_INVALID_PARAM,
         "a message of no ifunc is refused");
  expect(failed.frame == NULL && failed.ifunc_h == NULL && failed.frame_size == 0,
         "a failed create leaves the message empty");
  ucp_ifunc_msg_free(failed);

  ucp_deregister_ifunc(context, by_name);
  ucp_deregister_ifunc(context, by_param);
  ucp_deregister_ifunc(context, by_literal);
  ucp_worker_destroy(worker);
  ucp_ifunc_context_release(context);
  ucp_cleanup(context);
  if (failures == 0) printf("c11 forms: OK\n");
  return failures == 0 ? 0 : 1;
}
