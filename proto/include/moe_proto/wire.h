/* Little-endian wire encoding with bounds checks: every byte layout that crosses a
 * process boundary is written and read through these helpers.
 *
 * Writer: grows a heap buffer (not on the hot path: records are encoded at window ends).
 * Reader: every get checks the remaining length first; after the first failure the reader
 * is marked bad, further gets return zeros, and the caller checks `ok` once. */
#ifndef MOE_WIRE_H
#define MOE_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct moe_wbuf {
    uint8_t *data;
    size_t len;
    size_t cap;
    bool ok; /* false after an allocation failure */
} moe_wbuf_t;

void moe_wbuf_init(moe_wbuf_t *w);
void moe_wbuf_free(moe_wbuf_t *w);
void moe_wbuf_u16(moe_wbuf_t *w, uint16_t v);
void moe_wbuf_u32(moe_wbuf_t *w, uint32_t v);
void moe_wbuf_u64(moe_wbuf_t *w, uint64_t v);
void moe_wbuf_i64(moe_wbuf_t *w, int64_t v);
void moe_wbuf_f64(moe_wbuf_t *w, double v);
void moe_wbuf_bytes(moe_wbuf_t *w, const void *p, size_t n);
void moe_wbuf_patch_u64(moe_wbuf_t *w, size_t at, uint64_t v);

typedef struct moe_rbuf {
    const uint8_t *data;
    size_t len;
    size_t pos;
    bool ok;
} moe_rbuf_t;

void moe_rbuf_init(moe_rbuf_t *r, const void *data, size_t len);
uint16_t moe_rbuf_u16(moe_rbuf_t *r);
uint32_t moe_rbuf_u32(moe_rbuf_t *r);
uint64_t moe_rbuf_u64(moe_rbuf_t *r);
int64_t moe_rbuf_i64(moe_rbuf_t *r);
double moe_rbuf_f64(moe_rbuf_t *r);
/* Copy n bytes out (false and zero-filled when fewer remain). */
bool moe_rbuf_bytes(moe_rbuf_t *r, void *out, size_t n);
/* Bytes left. */
size_t moe_rbuf_left(const moe_rbuf_t *r);
/* True when `count` items of `size` bytes can still be read: checked before allocating
 * anything sized by a count read from the wire. */
bool moe_rbuf_can(const moe_rbuf_t *r, uint64_t count, size_t size);

#endif /* MOE_WIRE_H */
