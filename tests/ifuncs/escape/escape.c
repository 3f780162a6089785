/* The escape suite: each command is one way out that injected code might try
 * on its target. Run confined (a signer the target does not fully trust),
 * every one of them must trap, and only `honest` may do what it says: add
 * the payload's argument to the counter the target exposed as target_args.
 * The test (tests/test_confinement.cpp) hands in the target's own addresses
 * (its child target is a fork of the test, so they are the same). */
#include <threechains/ifunc.h>
#include <threechains/runtime.h>

#include <math.h>
#include <string.h>

enum command {
  honest = 0,
  return_address_walk, /* from its return address towards the ELF header and the GOT */
  from_allowed_import, /* an address computed from an allowed import (sqrt) */
  forged_function,     /* calls an address it was given (the target's system()) */
  write_target_global, /* writes a global of the target it was not given */
  read_beyond_payload, /* reads the ring past its own frame (another peer's slots) */
  stack_smash,         /* writes past a local array until something gives */
  spin_forever,
  recurse_forever,
  null_store,
  huge_memcpy,
  wild_send, /* threechains_send_self with a pointer into nowhere */
  divide_by_zero,
  write_string_literal,
  past_target_args, /* the exposed counter is 8 bytes; writes the 9th */
  read_address,     /* adds the word at an address it was given to the counter */
  /* What one frame can cost (tests/test_confined_limits.cpp): */
  compare_forever, /* memcmp over 1 MiB of its own, in an endless loop */
  stash,           /* keeps `argument` in a global and in its locals */
  peek,            /* traps (division) if it finds `argument` in either */
  flood, /* threechains_send_self of `argument` bytes of its own until it says no; the count
            into the counter */
};

struct order {
  uint64_t command;
  uint64_t argument; /* an increment, or an address of the target's */
};

typedef void (*thunk)(const char*);

static const char greeting[] = "hello";
static uint64_t calls; /* the ifunc's own global: allowed */

static unsigned char big_a[1 << 20], big_b[1 << 20];
static uint64_t kept; /* what `stash` left, for `peek` */

/* Its locals lie on the data stack, where the next invocation's will. */
__attribute__((noinline)) static void stash_locally(uint64_t secret) {
  volatile uint64_t local[64];
  for (int k = 0; k < 64; ++k) local[k] = secret;
}
__attribute__((noinline)) static int find_locally(uint64_t secret) {
  volatile uint64_t local[64]; /* never written: what it reads is what was left */
  int found = 0;
  for (int k = 0; k < 64; ++k) found |= local[k] == secret;
  return found;
}

static uint64_t recurse(volatile uint64_t depth) {
  volatile char pad[64];
  pad[depth & 63] = (char)depth;
  return recurse(depth + 1) + pad[0];
}

void escape_main(void* payload, size_t payload_size, void* target_args) {
  struct order order;
  if (payload_size < sizeof(order)) return;
  memcpy(&order, payload, sizeof(order));
  ++calls;
  volatile uint64_t sink = 0;
  switch (order.command) {
    case honest:
      *(uint64_t*)target_args += order.argument;
      break;
    case return_address_walk: {
      const unsigned char* p = (const unsigned char*)__builtin_return_address(0);
      for (uintptr_t page = (uintptr_t)p & ~(uintptr_t)4095;; page -= 4096) {
        if (memcmp((const void*)page, "\177ELF", 4) == 0) break; /* then the GOT, then system */
      }
      break;
    }
    case from_allowed_import: {
      volatile uintptr_t base = (uintptr_t)&sqrt;
      sink = *(volatile uint64_t*)(base + order.argument);
      break;
    }
    case forged_function:
      ((thunk)(uintptr_t)order.argument)("touch /tmp/threechains-escaped");
      break;
    case write_target_global:
      *(volatile uint64_t*)(uintptr_t)order.argument = 0x6666666666666666ULL;
      break;
    case read_beyond_payload:
      sink = ((volatile const uint64_t*)payload)[order.argument / 8];
      break;
    case stack_smash: {
      volatile uint64_t local[4];
      /* Through an integer, so the compiler cannot bound the loop by the array. */
      const volatile uintptr_t base = (uintptr_t)local;
      for (volatile uint64_t i = 0; i < order.argument; ++i)
        *(volatile uint64_t*)(base + 8 * i) = 0x4141414141414141ULL;
      break;
    }
    case spin_forever:
      for (;;) sink = sink + 1;
    case recurse_forever:
      sink = recurse(order.argument);
      break;
    case null_store:
      *(volatile uint64_t*)(uintptr_t)order.argument = 1; /* argument 0 */
      break;
    case huge_memcpy:
      memcpy(payload, (const char*)payload + 64, (size_t)order.argument);
      break;
    case wild_send:
      threechains_send_self(0, (const void*)(uintptr_t)order.argument, 64);
      break;
    case divide_by_zero:
      sink = 1000 / (order.argument + sink); /* argument 0 */
      break;
    case write_string_literal:
      ((volatile char*)greeting)[order.argument] = 'j';
      break;
    case past_target_args:
      ((volatile uint64_t*)target_args)[1 + order.argument] = 0x6666666666666666ULL;
      break;
    case read_address:
      *(uint64_t*)target_args += *(volatile const uint64_t*)(uintptr_t)order.argument;
      break;
    case compare_forever: {
      /* Through volatile pointers, so the optimiser can neither fold the
       * compare of two zero arrays nor hoist it out of the loop. */
      const unsigned char* volatile left = big_a;
      const unsigned char* volatile right = big_b;
      for (;;) sink = sink + (uint64_t)memcmp(left, right, sizeof(big_a));
    }
    case stash:
      kept = order.argument;
      stash_locally(order.argument);
      break;
    case peek: {
      const int found = kept == order.argument || find_locally(order.argument);
      sink = 1000 / (uint64_t)(found ? 0 + sink : 1);
      break;
    }
    case flood: {
      /* big_a is zero: each copy sent runs as `honest` with nothing to add. */
      const size_t bytes = order.argument < sizeof(big_a) ? (size_t)order.argument : sizeof(big_a);
      uint64_t sent = 0;
      while (threechains_send_self(threechains_rank(), big_a, bytes) == 0) ++sent;
      *(uint64_t*)target_args += sent;
      break;
    }
  }
  (void)sink;
}
