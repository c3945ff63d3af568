#include "moe_proto/wire.h"

#include <stdlib.h>
#include <string.h>

void moe_wbuf_init(moe_wbuf_t *w)
{
    memset(w, 0, sizeof(*w));
    w->ok = true;
}

void moe_wbuf_free(moe_wbuf_t *w)
{
    free(w->data);
    memset(w, 0, sizeof(*w));
}

static bool wbuf_reserve(moe_wbuf_t *w, size_t n)
{
    if (!w->ok) {
        return false;
    }
    if (w->len + n <= w->cap) {
        return true;
    }
    size_t cap = w->cap ? w->cap : 4096;
    while (cap < w->len + n) {
        cap *= 2;
    }
    uint8_t *d = realloc(w->data, cap);
    if (d == NULL) {
        w->ok = false;
        return false;
    }
    w->data = d;
    w->cap = cap;
    return true;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

static void wbuf_le(moe_wbuf_t *w, uint64_t v, int n)
{
    if (wbuf_reserve(w, (size_t)n)) {
        put_le(w->data + w->len, v, n);
        w->len += (size_t)n;
    }
}

void moe_wbuf_u16(moe_wbuf_t *w, uint16_t v) { wbuf_le(w, v, 2); }
void moe_wbuf_u32(moe_wbuf_t *w, uint32_t v) { wbuf_le(w, v, 4); }
void moe_wbuf_u64(moe_wbuf_t *w, uint64_t v) { wbuf_le(w, v, 8); }
void moe_wbuf_i64(moe_wbuf_t *w, int64_t v) { wbuf_le(w, (uint64_t)v, 8); }

void moe_wbuf_f64(moe_wbuf_t *w, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof(bits));
    wbuf_le(w, bits, 8);
}

void moe_wbuf_bytes(moe_wbuf_t *w, const void *p, size_t n)
{
    if (n > 0 && wbuf_reserve(w, n)) {
        memcpy(w->data + w->len, p, n);
        w->len += n;
    }
}

void moe_wbuf_patch_u64(moe_wbuf_t *w, size_t at, uint64_t v)
{
    if (w->ok && at + 8 <= w->len) {
        put_le(w->data + at, v, 8);
    }
}

void moe_rbuf_init(moe_rbuf_t *r, const void *data, size_t len)
{
    r->data = data;
    r->len = data != NULL ? len : 0;
    r->pos = 0;
    r->ok = true;
}

size_t moe_rbuf_left(const moe_rbuf_t *r)
{
    return r->ok ? r->len - r->pos : 0;
}

bool moe_rbuf_can(const moe_rbuf_t *r, uint64_t count, size_t size)
{
    if (!r->ok) {
        return false;
    }
    if (size == 0) {
        return true;
    }
    return count <= (uint64_t)(r->len - r->pos) / size;
}

static uint64_t rbuf_le(moe_rbuf_t *r, int n)
{
    if (!r->ok || r->len - r->pos < (size_t)n) {
        r->ok = false;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < n; i++) {
        v |= (uint64_t)r->data[r->pos + (size_t)i] << (8 * i);
    }
    r->pos += (size_t)n;
    return v;
}

uint16_t moe_rbuf_u16(moe_rbuf_t *r) { return (uint16_t)rbuf_le(r, 2); }
uint32_t moe_rbuf_u32(moe_rbuf_t *r) { return (uint32_t)rbuf_le(r, 4); }
uint64_t moe_rbuf_u64(moe_rbuf_t *r) { return rbuf_le(r, 8); }
int64_t moe_rbuf_i64(moe_rbuf_t *r) { return (int64_t)rbuf_le(r, 8); }

double moe_rbuf_f64(moe_rbuf_t *r)
{
    uint64_t bits = rbuf_le(r, 8);
    double v;
    memcpy(&v, &bits, sizeof(v));
    return v;
}

bool moe_rbuf_bytes(moe_rbuf_t *r, void *out, size_t n)
{
    if (!r->ok || r->len - r->pos < n) {
        r->ok = false;
        memset(out, 0, n);
        return false;
    }
    memcpy(out, r->data + r->pos, n);
    r->pos += n;
    return true;
}
