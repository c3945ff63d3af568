/* BF16 <-> F32 on the host: BF16 is the top half of an F32, so widening is exact and
 * narrowing rounds to nearest even (a NaN stays a NaN). Expert weights held in BF16
 * (model.dtype bf16) and rows on the wire (runtime.wire_dtype bf16) use these. */
#ifndef MOE_BF16_H
#define MOE_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t moe_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    /* a select, not an early return: loops calling this stay vectorizable */
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

static inline float moe_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline void moe_bf16_from_f32_n(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        dst[i] = moe_f32_to_bf16(src[i]);
    }
}

static inline void moe_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        dst[i] = moe_bf16_to_f32(src[i]);
    }
}

#endif /* MOE_BF16_H */
