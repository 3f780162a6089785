/* What the import allowlist exists for: an ifunc that asks the target's libc
 * to run a shell command. Signed by a trusted key, it is still refused at link,
 * before any of it runs. */
#include <threechains/ifunc.h>

#include <stdlib.h>

void evil_main(void* payload, size_t payload_size, void* target_args) {
  (void)payload_size;
  (void)target_args;
  system((const char*)payload); /* the payload names a command, e.g. "touch /tmp/x" */
}
