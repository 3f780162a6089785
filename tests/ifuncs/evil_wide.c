/* Valid IR that LLVM's code generator cannot lower in reasonable time: a
 * multiplication of integers 65536 bits wide (clang's _BitInt) whose
 * operands it cannot know (an external global), which legalisation expands
 * into millions of operations (llc -O2 on that IR alone ran past 100 s,
 * 2026-11-27). Confined, it must be refused before anything compiles it;
 * the target serves on. */
#include <threechains/ifunc.h>

#include <string.h>

typedef unsigned _BitInt(65536) huge;

huge evil_wide_operand; /* external: the optimiser cannot assume it stays 0 */

void evil_wide_main(void* payload, size_t payload_size, void* target_args) {
  (void)payload;
  (void)payload_size;
  evil_wide_operand = evil_wide_operand * evil_wide_operand;
  *(uint64_t*)target_args += (uint64_t)evil_wide_operand;
}
