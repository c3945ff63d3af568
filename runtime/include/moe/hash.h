/* FNV-1a 64: the one hash of the base layer. It names run folders, checks the config text
 * every rank parsed and checksums the profile record's payload (proto/). Not a
 * cryptographic hash: it detects accidents, not tampering. */
#ifndef MOE_HASH_H
#define MOE_HASH_H

#include <stddef.h>
#include <stdint.h>

#define MOE_HASH64_INIT 14695981039346656037ULL /* FNV-1a 64 offset basis */

/* FNV-1a 64 over len bytes. moe_hash64("", 0) == MOE_HASH64_INIT. */
uint64_t moe_hash64(const void *data, size_t len);
/* Continue a hash: moe_hash64_update(moe_hash64(a), b) == moe_hash64(a || b). */
uint64_t moe_hash64_update(uint64_t h, const void *data, size_t len);

#endif /* MOE_HASH_H */
