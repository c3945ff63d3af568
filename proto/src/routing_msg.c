/* The recorded-routing message (moe_proto/routing_msg.h). */
#include "moe_proto/routing_msg.h"

#include <stdint.h>
#include <string.h>

#include "moe_proto/wire.h"

/* The arrays are the sender's memory as it stands: the hosts are little endian. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "moed's wire formats are little endian");

size_t moe_routing_msg_size(int64_t steps, int64_t tokens, int64_t layers, int64_t top_k)
{
    if (steps < 0 || tokens < 0 || layers < 0 || top_k < 0) {
        return 0;
    }
    uint64_t n = (uint64_t)steps;
    const uint64_t dims[3] = {(uint64_t)tokens, (uint64_t)layers, (uint64_t)top_k};
    for (int i = 0; i < 3; i++) {
        if (dims[i] != 0 && n > (SIZE_MAX / 16) / dims[i]) {
            return 0;
        }
        n *= dims[i];
    }
    return MOE_ROUTING_MSG_HEADER + (size_t)n * 8;
}

void moe_routing_msg_header(unsigned char *buf, int64_t steps, int64_t token_first,
                            int64_t tokens, int64_t layers, int64_t top_k)
{
    moe_wbuf_t w;
    moe_wbuf_init(&w);
    moe_wbuf_bytes(&w, MOE_ROUTING_MSG_MAGIC, 4);
    moe_wbuf_u16(&w, MOE_ROUTING_MSG_VERSION);
    moe_wbuf_u16(&w, 0);
    moe_wbuf_i64(&w, steps);
    moe_wbuf_i64(&w, token_first);
    moe_wbuf_i64(&w, tokens);
    moe_wbuf_i64(&w, layers);
    moe_wbuf_i64(&w, top_k);
    if (w.data != NULL && w.len == MOE_ROUTING_MSG_HEADER) {
        memcpy(buf, w.data, MOE_ROUTING_MSG_HEADER);
    }
    moe_wbuf_free(&w);
}

moe_status_t moe_routing_msg_decode(const void *buf, size_t len, moe_routing_msg_t *out,
                                    moe_error_t *err)
{
    if (len < MOE_ROUTING_MSG_HEADER || memcmp(buf, MOE_ROUTING_MSG_MAGIC, 4) != 0) {
        return moe_error_set(err, MOE_ERR_FORMAT, "routing message: %zu bytes, not a routing "
                             "record", len);
    }
    moe_rbuf_t r;
    moe_rbuf_init(&r, buf, len);
    r.pos = 4;
    uint16_t version = moe_rbuf_u16(&r);
    (void)moe_rbuf_u16(&r);
    out->steps = moe_rbuf_i64(&r);
    out->token_first = moe_rbuf_i64(&r);
    out->tokens = moe_rbuf_i64(&r);
    out->layers = moe_rbuf_i64(&r);
    out->top_k = moe_rbuf_i64(&r);
    if (version != MOE_ROUTING_MSG_VERSION) {
        return moe_error_set(err, MOE_ERR_FORMAT, "routing message: version %u, this moed "
                             "reads %d", (unsigned)version, MOE_ROUTING_MSG_VERSION);
    }
    size_t want = moe_routing_msg_size(out->steps, out->tokens, out->layers, out->top_k);
    if (out->token_first < 0 || out->tokens < 1 || out->layers < 1 || out->top_k < 1 ||
        want == 0 || want != len) {
        return moe_error_set(err, MOE_ERR_FORMAT, "routing message: %zu bytes do not hold "
                             "%lld steps x %lld layers x %lld tokens x top-%lld", len,
                             (long long)out->steps, (long long)out->layers,
                             (long long)out->tokens, (long long)out->top_k);
    }
    if (out->token_first > INT64_MAX - out->tokens) { /* its last token past any index */
        return moe_error_set(err, MOE_ERR_FORMAT, "routing message: tokens %lld.. (%lld of "
                             "them) pass the largest index", (long long)out->token_first,
                             (long long)out->tokens);
    }
    size_t n = (want - MOE_ROUTING_MSG_HEADER) / 8;
    out->ids = (const int32_t *)((const unsigned char *)buf + MOE_ROUTING_MSG_HEADER);
    out->weights = (const float *)(out->ids + n);
    return MOE_OK;
}
