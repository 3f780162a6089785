/* A library whose code imports what the ucp_ifunc policy refuses (getpid):
 * its registration must fail as a policy decision (UCS_ERR_REJECTED), naming
 * the symbol. */
#include <stddef.h>
#include <unistd.h>

void importer_main(void* payload, size_t payload_size, void* target_args) {
  (void)payload;
  (void)payload_size;
  *(long*)target_args = (long)getpid();
}
