/* The ifunc's own static data: .data, .rodata string literals, .bss and a
 * table of function pointers, all of which must survive from call to call. */
#include <string.h>
#include <threechains/ifunc.h>

#include "matrix.h"

static int64_t in_data = 40;
static int64_t in_bss;
static const char greeting[] = "rodata survives";

static int64_t twice(int64_t x) { return 2 * x; }
static int64_t thrice(int64_t x) { return 3 * x; }
static int64_t (*const table[])(int64_t) = {twice, thrice};

void static_data_main(void *payload, size_t payload_size, void *target_args) {
  struct matrix_result *r = (struct matrix_result *)target_args;
  (void)payload;
  (void)payload_size;
  r->values[0] = in_data++;
  r->values[1] = ++in_bss;
  r->values[2] = table[0](5) + table[1](5);
  r->values[3] = table[in_bss & 1](10);
  memcpy(r->text, greeting, sizeof(greeting));
  r->calls++;
}
