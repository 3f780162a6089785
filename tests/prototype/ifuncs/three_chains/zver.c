/* An ifunc that needs a shared library beyond the safe set: libz (it reads
 * zlib's version). Built with DEPS libz.so.1; a target loads it only where the
 * operator allows it (THREECHAINS_IFUNC_ALLOW_LIBRARIES=libz.so.1). */
#include <stddef.h>

const char* zlibVersion(void); /* zlib.h's, declared here: no headers needed */

void zver_main(void* payload, size_t payload_size, void* target_args) {
  (void)payload;
  (void)payload_size;
  *(const char**)target_args = zlibVersion();
}
