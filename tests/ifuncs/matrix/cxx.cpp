// A C++ ifunc: a template, a lambda, and an exception thrown and caught inside
// the ifunc (unwinding through JIT'd frames). No standard headers, so the
// aarch64 image builds without a cross C++ library.
#include <threechains/ifunc.h>

#include "matrix.h"

namespace {

template <class T, int N>
T sum_of(const T (&values)[N]) {
  T total{};
  for (const T& v : values) total += v;
  return total;
}

struct Refused {
  int64_t code;
};

int64_t checked_div(int64_t a, int64_t b) {
  if (b == 0) throw Refused{a};
  return a / b;
}

}  // namespace

extern "C" void cxx_main(void *payload, size_t payload_size, void *target_args) {
  auto *r = static_cast<matrix_result *>(target_args);
  (void)payload;
  (void)payload_size;
  const int64_t numbers[] = {1, 2, 3, 4};
  const int64_t scale = 10;
  auto scaled = [scale](int64_t v) { return v * scale; };
  r->values[0] = scaled(sum_of(numbers));
  try {
    r->values[1] = checked_div(84, 0);
  } catch (const Refused &refused) {
    r->values[1] = -refused.code;
  }
  r->values[2] = checked_div(84, 2);
  r->calls++;
}
