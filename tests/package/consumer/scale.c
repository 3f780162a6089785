#include "adder.h"

int64_t adder_scaled(int64_t value) { return value * ADDER_FACTOR; }
