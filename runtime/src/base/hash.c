/* FNV-1a 64 (moe/hash.h): names run folders, checks config text, checksums records. */
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
