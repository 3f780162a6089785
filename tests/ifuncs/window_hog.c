/* window_hog: what a compromised compile worker, or a writer of the code
 * store, could hand a target as a window object: zero-initialised data that
 * takes nearly all of a window's 2 GiB (2047 MiB less 8 KiB), and an
 * import, so that its link into the window fails after the memory was
 * given to it. The size is fitted to x86-64's link of it: with its code,
 * stubs and GOT a page each, it fills its 2047 MiB reservation exactly, so
 * nothing of that reservation is left for the next code. Never a
 * container: a test puts this object in the code store under an honest
 * code's key. */
#include <stdint.h>

extern uint64_t outside(void);

uint64_t window_hog_data[(2047ull * 1024 * 1024 - 8 * 1024) / sizeof(uint64_t)];

uint64_t counter_main(void) {
  window_hog_data[0] = outside();
  return window_hog_data[1];
}
