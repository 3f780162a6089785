/* The smallest body an ifunc has: add to a counter the caller names. What
 * an invocation costs besides its work shows against it undiluted
 * (threechains-bench-window). */
#include <stdint.h>

void bump(uint64_t* counter, uint64_t by) { *counter += by; }
