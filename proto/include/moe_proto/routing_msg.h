/* A rank's recorded routing (profiler.record_routing) sent to rank 0 at the end of a run,
 * on the profiler's communicator with tag MOE_PROF_TAG_ROUTING. Little endian:
 *
 *   0  "MOER"  magic
 *   4  u16     version (1)
 *   6  u16     0
 *   8  i64     steps        recorded steps the message holds (completed ones)
 *  16  i64     token_first  global index of the sender's first routed token in a step
 *  24  i64     tokens       tokens the sender routes per step (>= 1)
 *  32  i64     layers       moed layers per step
 *  40  i64     top_k
 *  48  i32     ids[steps][layers][tokens][top_k]      logical expert ids
 *      f32     weights[steps][layers][tokens][top_k]  as merged
 *
 * The sender keeps its recording in this layout (record/routing_rec.c), so the message is
 * its buffer as it stands. Decoding checks every size against the message's length. */
#ifndef MOE_PROTO_ROUTING_MSG_H
#define MOE_PROTO_ROUTING_MSG_H

#include <stddef.h>
#include <stdint.h>

#include "moe/status.h"

#define MOE_ROUTING_MSG_MAGIC "MOER"
#define MOE_ROUTING_MSG_VERSION 1
#define MOE_ROUTING_MSG_HEADER 48
enum { MOE_PROF_TAG_ROUTING = 4404 };

typedef struct moe_routing_msg {
    int64_t steps, token_first, tokens, layers, top_k;
    const int32_t *ids;    /* into the message */
    const float *weights;  /* into the message */
} moe_routing_msg_t;

/* Bytes of a message of these sizes; 0 when they overflow. */
size_t moe_routing_msg_size(int64_t steps, int64_t tokens, int64_t layers, int64_t top_k);
/* Write the header into buf[0, MOE_ROUTING_MSG_HEADER). */
void moe_routing_msg_header(unsigned char *buf, int64_t steps, int64_t token_first,
                            int64_t tokens, int64_t layers, int64_t top_k);
/* Check a received message (4-byte aligned) and point out into it. MOE_ERR_FORMAT with
 * what is wrong. */
moe_status_t moe_routing_msg_decode(const void *buf, size_t len, moe_routing_msg_t *out,
                                    moe_error_t *err);

#endif /* MOE_PROTO_ROUTING_MSG_H */
