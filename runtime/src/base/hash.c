/* Part base (runtime/src/base/): the base layer every part uses: status codes and
 * messages, logging, the monotonic clock, the FNV-1a hash, phase ids, limits, build id,
 * the stop flag and MOE_MPI (the one checked form of an MPI call). Public headers:
 * runtime/include/moe/. May include: no other part. This comment heads the first file of
 * each part's folder; tests/lint/parts.sh holds every part to its list. */
#include "moe/hash.h"

uint64_t moe_hash64_update(uint64_t h, const void *data, size_t len)
{
    const unsigned char *b = data;
    for (size_t i = 0; i < len; i++) {
        h ^= b[i];
        h *= 1099511628211ULL; /* FNV 64 prime */
    }
    return h;
}

uint64_t moe_hash64(const void *data, size_t len)
{
    return moe_hash64_update(MOE_HASH64_INIT, data, len);
}
