#include "model/rng.h"

/* splitmix64 finaliser: a bijective mix with good avalanche, cheap enough to run per
 * element when generating hundreds of MB of weights at start-up. */
static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t moe_rng_u64(uint64_t seed, uint64_t stream, uint64_t index)
{
    uint64_t key = mix64(seed + 0x9e3779b97f4a7c15ULL * (stream + 1));
    return mix64(key + 0x9e3779b97f4a7c15ULL * (index + 1));
}

void moe_rng_fill_uniform(float *dst, size_t n, uint64_t seed, uint64_t stream,
                          uint64_t first, float scale)
{
    uint64_t key = mix64(seed + 0x9e3779b97f4a7c15ULL * (stream + 1));
    const float inv = 1.0f / 8388608.0f; /* 2^-23 */
    for (size_t i = 0; i < n; i++) {
        uint64_t r = mix64(key + 0x9e3779b97f4a7c15ULL * (first + i + 1));
        /* top 24 bits -> [0, 2) -> [-1, 1) */
        float u = (float)(r >> 40) * inv - 1.0f;
        dst[i] = u * scale;
    }
}

uint64_t moe_rng_stream(uint64_t kind, uint64_t layer, uint64_t expert)
{
    return (kind << 56) ^ (layer << 24) ^ expert;
}
