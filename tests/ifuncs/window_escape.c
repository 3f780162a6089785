/* The window tier's attacker (tests/test_window_tier.cpp): each order a way
 * out that still takes the window shape (no import, no local variable, no
 * memory intrinsic once optimised), so a target with
 * ConfinementOptions::window_tier compiles it for a window, verifies it and
 * runs it there. The payload is an order; target_args the counter that
 * honest orders add to. */
#include <threechains/ifunc.h>

struct order {
  uint64_t command;
  uint64_t argument;
};

enum command {
  add = 0,
  write_address, /* a store to an address of the target's */
  read_address,  /* a load from one, added to the counter */
  spin,          /* an endless loop */
  divide,        /* 1000 / argument */
  write_code,    /* a store into its own machine code */
  far_store,     /* a store far into its window, where nothing is mapped */
};

static volatile uint64_t spins;

void window_escape_main(void* payload, size_t payload_size, void* target_args) {
  if (payload_size < sizeof(struct order)) return;
  const struct order* order = (const struct order*)payload;
  volatile uint64_t* counter = (volatile uint64_t*)target_args;
  switch (order->command) {
    case add:
      *counter += order->argument;
      break;
    case write_address:
      *(volatile uint64_t*)(uintptr_t)order->argument = 0xbadbadbadULL;
      break;
    case read_address:
      *counter += *(volatile const uint64_t*)(uintptr_t)order->argument;
      break;
    case spin:
      for (;;) spins = spins + 1;
    case divide:
      *counter += 1000 / order->argument;
      break;
    case write_code:
      *(volatile unsigned char*)(uintptr_t)&window_escape_main = 0xc3;
      break;
    case far_store:
      *(volatile uint64_t*)(uintptr_t)(0x7ff00000ULL + order->argument) = 1;
      break;
  }
}
