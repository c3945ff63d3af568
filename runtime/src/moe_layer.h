/* One MoE layer on one rank: gate, plan, dispatch, experts, combine, merge, residual.
 * Master and symmetric routing share this one path: a rank that routes no tokens
 * (a non-master rank in master mode) simply has tokens == 0.
 *
 * Every buffer is sized once in moe_layer_ctx_init for the worst case; forward() never
 * allocates. After each forward() the ctx's `rec` holds what the profiler reads. */
#ifndef MOE_LAYER_H
#define MOE_LAYER_H

#include <mpi.h>
#include <stdint.h>

#include "moe/config.h"
#include "moe/status.h"
#include "plan.h"
#include "transport.h"
#include "weights.h"

typedef enum {
    MOE_PHASE_GATE = 0,
    MOE_PHASE_DISPATCH = 1, /* counts + token rows out */
    MOE_PHASE_EXPERT = 2,
    MOE_PHASE_COMBINE = 3,  /* rows back */
    MOE_PHASE_MERGE = 4,    /* weighted sum + residual */
    MOE_PHASE_COUNT = 5,
} moe_phase_t;

const char *moe_phase_name(moe_phase_t phase);

/* What one forward() did, in monotonic ns and rows. Arrays are sized at init. */
typedef struct moe_layer_record {
    int64_t phase_begin_ns[MOE_PHASE_COUNT];
    int64_t phase_end_ns[MOE_PHASE_COUNT];
    int64_t *expert_begin_ns; /* [num_local] */
    int64_t *expert_end_ns;   /* [num_local] */
    int64_t *expert_rows;     /* [num_local] rows computed */
    /* the row exchanges: start and when each peer's rows had arrived */
    int64_t dispatch_begin_ns;
    int64_t *dispatch_done_ns; /* [world] */
    int64_t combine_begin_ns;
    int64_t *combine_done_ns;  /* [world] */
} moe_layer_record_t;

typedef struct moe_layer_ctx {
    const moe_config_t *cfg;
    MPI_Comm comm;
    int rank, world_size;
    int num_local;
    int64_t max_tokens;   /* tokens this rank routes per step */
    int64_t capacity;     /* per expert per layer, 0 = none */
    moe_transport_t *transport;
    moe_plan_t plan;

    /* gate */
    float *logits;        /* [T, E] */
    int32_t *topk_idx;    /* [T, k] */
    float *topk_w;        /* [T, k] */
    int32_t *demand_before; /* [E] */
    /* exchange */
    float *send_buf;      /* [T*k, H] rows out, in plan order */
    float *ret_buf;       /* [T*k, H] the same rows come back computed */
    float *recv_buf;      /* [max_recv, H] rows of the local experts */
    float *back_buf;      /* [max_recv, H] their outputs */
    int64_t max_recv;
    int32_t *recv_counts; /* [world, num_local] rows per source per local expert */
    int *recv_rows;       /* [world] */
    int *recv_displs;     /* [world] */
    int *n_local_of;      /* [world] experts per rank (count message lengths) */
    int *n_local_displs;  /* [world] where each source's counts land */
    int *recv_count_len;  /* [world] all num_local: counts expected from each source */
    MPI_Request *count_reqs; /* [2 * world] the counts exchange, point to point */
    int *count_peers;     /* [2 * world] */
    /* experts */
    float *expert_in;     /* [T, H] gather when an expert's rows come from several ranks */
    float *expert_out;    /* [T, H] */
    float *scratch;       /* FFN hidden tile */
    int64_t tile_rows;
    float *acc_row;       /* [H] */

    moe_layer_record_t rec;
} moe_layer_ctx_t;

moe_status_t moe_layer_ctx_init(moe_layer_ctx_t *ctx, const moe_config_t *cfg, MPI_Comm comm,
                                moe_transport_t *transport, int64_t max_tokens,
                                moe_error_t *err);
void moe_layer_ctx_destroy(moe_layer_ctx_t *ctx); /* accepts a zeroed ctx */

/* x [tokens, H] in place: x = x + MoE(x). tokens <= max_tokens. step and layer only
 * label the watchdog's messages. */
moe_status_t moe_layer_forward(moe_layer_ctx_t *ctx, const moe_layer_weights_t *lw,
                               const float *gate_bias, float *x, int64_t tokens, int64_t step,
                               int layer, moe_error_t *err);

/* Bytes of the exchange buffers (for the memory report). */
size_t moe_layer_ctx_buffer_bytes(const moe_layer_ctx_t *ctx);

#endif /* MOE_LAYER_H */
