/* The start-up handshake: every rank states what it is before any work starts, and rank 0
 * stops the job when one differs.
 *
 * Layout (little-endian, 136 bytes): magic "MOEH" | u16 protocol version | u16 reserved |
 * build id (48 bytes, NUL-padded) | u64 config hash | host (64 bytes, NUL-padded) |
 * u32 rank | u32 world size. The magic and size never change, so any two builds can at
 * least read each other's hello and say which differs. */
#ifndef MOE_HANDSHAKE_H
#define MOE_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

#include "moe/status.h"

/* Version of everything moed ranks say to each other (the hello, the token exchange, the
 * profile record). Bump on any incompatible change. */
#define MOE_PROTOCOL_VERSION 1
#define MOE_HELLO_SIZE 136

typedef struct moe_hello {
    uint16_t protocol_version;
    char build_id[48];
    uint64_t config_hash;
    char host[64];
    int32_t rank;
    int32_t world_size;
} moe_hello_t;

void moe_hello_encode(const moe_hello_t *h, uint8_t out[MOE_HELLO_SIZE]);
/* MOE_ERR_FORMAT / MOE_ERR_TRUNCATED with a message when the bytes are not a hello. */
moe_status_t moe_hello_decode(const uint8_t *in, size_t len, moe_hello_t *out, moe_error_t *err);
/* MOE_OK when `other` matches `ref` (rank 0's); else one message naming the rank, its host,
 * the field that differs, both values and the fix. */
moe_status_t moe_hello_check(const moe_hello_t *ref, const moe_hello_t *other, moe_error_t *err);

#endif /* MOE_HANDSHAKE_H */
