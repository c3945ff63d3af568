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
#include "moe/phase.h"
#include "moe/prof.h"
#include "moe/status.h"
#include "layer/plan.h"
#include "transport/transport.h"
#include "model/weights.h"

/* What one forward() did, in monotonic ns and rows. Arrays are sized at init. The phase
 * spans tile the layer (see moe_prof_layer_sample_t); calls and spans say what ran when
 * inside them. */
typedef struct moe_layer_record {
    int64_t phase_begin_ns[MOE_PHASE_LAYER_COUNT];
    int64_t phase_end_ns[MOE_PHASE_LAYER_COUNT];
    int64_t *expert_rows;     /* [num_local] rows computed, all chunks */
    int64_t *expert_ns;       /* [num_local] busy time, all chunks */
    int num_calls;
    moe_prof_call_t *calls;   /* [chunks * num_local] */
    int num_spans;
    moe_prof_span_t *spans;   /* [2 * chunks] */
    int64_t *peer_wait_ns;    /* [world] waited for each peer's rows, summed */
} moe_layer_record_t;

typedef struct moe_layer_ctx moe_layer_ctx_t;

/* Where a layer's arithmetic runs: the CPU (moe_layer.c) or a GPU (layer_cuda.c). Routing
 * plan, counts, chunking and exchanges are shared; the back-end owns the rows' memory.
 * x given to moe_layer_forward lives where the back-end computes (device memory for cuda).
 * Slots return MOE_OK or an error with err filled.
 *   gate      route `tokens` rows of x with layer `layer`'s gate: ctx->topk_idx (host) and
 *             what merge needs
 *   permute   the plan's send rows, in send order, into ctx->xsend; *after: what a device
 *             transport must wait for (moe_cuda_event_t *), NULL on the host
 *   arrived   chunk c's pieces have landed in ctx->xrecv (a host transport feeding a GPU
 *             copies them in)
 *   expert    local expert le over n[s] rows at row from[s] of the received rows, for each
 *             source s (total rows in all); outputs go to the same rows of ctx->xback.
 *             `call` numbers the layer's calls (for device timing)
 *   computed  chunk c's experts are queued or done: *after as for permute, and its
 *             pieces of ctx->xback must be ready for the transport once *after completes
 *   merge     every combine is done: x[t] += sum_j w[t,j] * row(t,j) of ctx->xret
 *   finish    the layer is over: replace the calls' host times by true ones (device
 *             events) and wait for the device
 *   destroy   free the back-end's state (accepts a half-built one); NULL when none */
typedef struct moe_layer_backend {
    const char *name;
    moe_status_t (*gate)(moe_layer_ctx_t *ctx, int layer, const float *x, int64_t tokens,
                         moe_error_t *err);
    moe_status_t (*permute)(moe_layer_ctx_t *ctx, const float *x, const void **after,
                            moe_error_t *err);
    moe_status_t (*arrived)(moe_layer_ctx_t *ctx, int c, moe_error_t *err);
    moe_status_t (*expert)(moe_layer_ctx_t *ctx, int layer, int le, int call,
                           const int64_t *from, const int64_t *n, int64_t total,
                           moe_error_t *err);
    moe_status_t (*computed)(moe_layer_ctx_t *ctx, int c, const void **after, moe_error_t *err);
    moe_status_t (*merge)(moe_layer_ctx_t *ctx, float *x, int64_t tokens, moe_error_t *err);
    moe_status_t (*finish)(moe_layer_ctx_t *ctx, moe_error_t *err);
    void (*destroy)(moe_layer_ctx_t *ctx);
} moe_layer_backend_t;

struct moe_layer_ctx {
    const moe_config_t *cfg;
    const moe_weights_t *weights;
    MPI_Comm comm;
    int rank, world_size;
    int num_local;
    int64_t max_tokens;   /* tokens this rank routes per step */
    int64_t capacity;     /* per expert per layer, 0 = none */
    int chunks;           /* runtime.chunks: exchange slots 0..chunks-1 dispatch, then combine */
    moe_transport_t *transport;
    const moe_layer_backend_t *backend;
    void *backend_impl;
    moe_plan_t plan;

    /* gate (host) */
    float *logits;        /* [T, E] */
    int32_t *topk_idx;    /* [T, k] */
    float *topk_w;        /* [T, k] */
    int32_t *demand_before; /* [E] */
    /* rows as the transport sees them: host buffers below, or the back-end's */
    float *xsend, *xret;  /* [T*k, H] rows out in plan order; the same rows back computed */
    float *xrecv, *xback; /* [max_recv, H] rows of the local experts; their outputs */
    /* host rows */
    float *send_buf;      /* [T*k, H] */
    float *ret_buf;       /* [T*k, H] */
    float *recv_buf;      /* [max_recv, H] */
    float *back_buf;      /* [max_recv, H] */
    int64_t max_recv;
    int32_t *recv_counts; /* [world, num_local] rows per source per local expert */
    int *recv_rows;       /* [world] */
    int *recv_displs;     /* [world] */
    int *n_local_of;      /* [world] experts per rank (count message lengths) */
    int *n_local_displs;  /* [world] where each source's counts land */
    int *recv_count_len;  /* [world] all num_local: counts expected from each source */
    int *chunk_send_rows;   /* [chunks * world] each chunk's piece of every send block */
    int *chunk_send_displs; /* [chunks * world] */
    int *chunk_recv_rows;   /* [chunks * world] */
    int *chunk_recv_displs; /* [chunks * world] */
    MPI_Request *count_reqs; /* [2 * world] the counts exchange, point to point */
    int *count_peers;     /* [2 * world] */
    int64_t *src_from;    /* [world] an expert's rows per source in one chunk */
    int64_t *src_rows;    /* [world] */
    /* CPU experts */
    float *expert_in;     /* [T, H] gather when an expert's rows come from several ranks */
    float *expert_out;    /* [T, H] */
    float *scratch;       /* FFN hidden tile */
    int64_t tile_rows;
    float *acc_row;       /* [H] */

    moe_layer_record_t rec;
};

/* Size every buffer for `max_tokens` routed tokens. device: the rank's moe_cuda_t * when
 * cfg->device is cuda (the GPU back-end uploads the weights), else NULL. */
moe_status_t moe_layer_ctx_init(moe_layer_ctx_t *ctx, const moe_config_t *cfg, MPI_Comm comm,
                                moe_transport_t *transport, const moe_weights_t *weights,
                                int64_t max_tokens, void *device, moe_error_t *err);
void moe_layer_ctx_destroy(moe_layer_ctx_t *ctx); /* accepts a zeroed ctx */

/* x [tokens, H] in place: x = x + MoE(x) with layer `layer`'s weights. tokens <=
 * max_tokens. step and layer also label the watchdog's messages.
 *
 * With cfg->chunks N > 1 every block of rows between two ranks is cut into N pieces
 * (piece c: rows [n*c/N, n*(c+1)/N) of the block, so both ends agree without talking);
 * chunk c's dispatch is started when chunk c-1's has arrived, its experts run while chunk
 * c+1's rows move, and its combine starts as soon as they are done. CPU experts drive the
 * exchanges in flight between row tiles. The result does not depend on N. */
moe_status_t moe_layer_forward(moe_layer_ctx_t *ctx, float *x, int64_t tokens, int64_t step,
                               int layer, moe_error_t *err);

/* The one source rank all of an expert call's rows come from (n[s] rows per source, as
 * the back-end's expert slot gets them), or -1 when they come from several: then they
 * are not contiguous and must be gathered. */
int moe_layer_only_source(const moe_layer_ctx_t *ctx, const int64_t *n);

/* Bytes of the exchange buffers (for the memory report). */
size_t moe_layer_ctx_buffer_bytes(const moe_layer_ctx_t *ctx);

#ifdef MOE_HAVE_CUDA
/* The GPU back-end (layer_cuda.c): uploads the weights ctx->weights in cfg->dtype, sizes
 * the device buffers and sets ctx->backend. */
moe_status_t moe_layer_cuda_attach(moe_layer_ctx_t *ctx, void *cuda, moe_error_t *err);
#endif

#endif /* MOE_LAYER_H */
