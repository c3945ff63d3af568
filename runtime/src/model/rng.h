/* Counter-based random numbers: value i of stream s under seed is a pure function of
 * (seed, s, i). Any rank can generate exactly the slice of a tensor it owns, and the
 * distributed run sees the same weights and inputs as the single-rank run. */
#ifndef MOE_RNG_H
#define MOE_RNG_H

#include <stddef.h>
#include <stdint.h>

uint64_t moe_rng_u64(uint64_t seed, uint64_t stream, uint64_t index);
/* Fill dst[0..n) with uniform values in [-scale, scale) taken from indices first.. */
void moe_rng_fill_uniform(float *dst, size_t n, uint64_t seed, uint64_t stream,
                          uint64_t first, float scale);

/* Stream ids, so no two tensors share random numbers. */
enum {
    MOE_RNG_GATE = 1,
    MOE_RNG_W1 = 2,
    MOE_RNG_W3 = 3,
    MOE_RNG_W2 = 4,
    MOE_RNG_INPUT = 5,
    MOE_RNG_BIAS = 6, /* gate and expert biases, shared experts use expert id num_experts */
};
uint64_t moe_rng_stream(uint64_t kind, uint64_t layer, uint64_t expert);

#endif /* MOE_RNG_H */
