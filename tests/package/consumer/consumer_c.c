/* The package from C: the C API and the prototype-compatible API link from an
 * installed (or added) ThreeChains, and load the consumer's own container. */
#include <threechains/threechains.h>
#include <threechains/ucp_ifunc.h>

#include <stdio.h>
#include <string.h>

int main(void) {
  threechains_ifunc* adder = NULL;
  if (threechains_ifunc_load(ADDER_CONTAINER, &adder) != THREECHAINS_OK) {
    fprintf(stderr, "threechains_ifunc_load: %s\n", threechains_last_error());
    return 1;
  }
  const int named = strcmp(threechains_ifunc_name(adder), "adder") == 0;
  threechains_ifunc_destroy(adder);

  ucp_params_t params;
  memset(&params, 0, sizeof(params));
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA;
  ucp_context_h context;
  if (ucp_init(&params, NULL, &context) != UCS_OK) return 1;
  ucp_ifunc_h registered = NULL;
  ucs_status_t status = ucp_ifunc_set_lib_dir(context, ADDER_DIR);
  if (status == UCS_OK) status = ucp_register_ifunc(context, "adder", &registered);
  if (status == UCS_OK) ucp_deregister_ifunc(context, registered);
  ucp_cleanup(context);
  printf("consumer_c: ThreeChains %s, ifunc '%s' loaded, registered through ucp_ifunc: %s\n",
         threechains_version(), named ? "adder" : "?", ucs_status_string(status));
  return named && status == UCS_OK ? 0 : 1;
}
