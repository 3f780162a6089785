/* Shared by the host program and the ifunc library: what one frame adds. */
#ifndef ADDER_H
#define ADDER_H
#include <stdint.h>

#define ADDER_FACTOR 1

/* The payload's value scaled by ADDER_FACTOR (scale.c). */
int64_t adder_scaled(int64_t value);

#endif
