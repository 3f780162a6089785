/* Three-Chains' "pure" test: the target passes a function of its own as
 * target_args; the ifunc calls it with what it computed from its payload and
 * with pointers to its own static data, which it also changes. */
#include <stddef.h>
#include <stdint.h>

typedef uint8_t (*pure_entry_fn)(uint8_t value, const float* f);

static float pure_global = 3.5f;
static const float pure_constant = 1.25f;

static uint8_t xor_all(const uint8_t* data, size_t size) {
  uint8_t x = 0;
  for (size_t i = 0; i < size; ++i) x ^= data[i];
  return x;
}

size_t pure_payload_bound(void* source_args, size_t source_args_size) {
  (void)source_args;
  return source_args_size;
}

int pure_payload_init(void* source_args, size_t source_args_size, void* payload,
                      size_t* payload_size) {
  (void)source_args_size;
  for (size_t i = 0; i < *payload_size; ++i) ((char*)payload)[i] = ((const char*)source_args)[i];
  return 0;
}

void pure_main(void* payload, size_t payload_size, void* target_args) {
  static float in_function = 2.5f;
  pure_entry_fn entry = (pure_entry_fn)target_args;
  const uint8_t x = entry(xor_all((const uint8_t*)payload, payload_size), &pure_global);
  entry(x, &pure_constant);
  entry(x, &in_function);
  pure_global = -1.0f; /* its own data is writable */
  in_function = -2.0f;
  entry(x, &pure_global);
  entry(x, &in_function);
}
