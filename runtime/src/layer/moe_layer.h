/* Part layer (runtime/src/layer/): the MoE layer: routing plan, counts exchange, chunked
 * exchanges and the record, calling the expert back-end through its table; its buffers
 * come from one arena. May include: base config model transport expert (and the public
 * headers in moe/). One file of each part's folder opens with such a comment;
 * tests/lint/parts.sh holds every part to its list. */
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

#include "moe_config/config.h"
#include "moe/phase.h"
#include "moe_prof/prof.h"
#include "moe/status.h"
#include "expert/backend.h"
#include "expert/plugin.h"
#include "layer/plan.h"
#include "transport/transport.h"
#include "model/weights.h"
#include "moe_model/routing_trace.h"

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
    int64_t shared_rows;      /* rows the shared experts ran over (0: none here) */
    int64_t shared_begin_ns, shared_end_ns; /* inside the dispatch/expert phases */
} moe_layer_record_t;

typedef struct moe_layer_ctx moe_layer_ctx_t;

/* Where the layer's arithmetic runs is its expert back-end (expert/backend.h): the CPU, or
 * the GPU of the CUDA plug-in (expert/plugin.h). The layer routes, plans, exchanges counts
 * and rows chunk by chunk and records; it calls only the back-end's table. x given to
 * moe_layer_forward lives where the back-end computes (device memory for cuda).
 *
 * Memory: one arena. moe_layer_ctx_init sizes every buffer below (and the plan's) for the
 * worst case, makes one allocation and carves them from it, each aligned to 64 bytes;
 * destroy frees that one block. forward() never allocates.
 *
 * Fields (the libuv way: the owner embeds the struct, moe_engine_t does, but only
 * moe_layer.c writes it): the first group is public and read-only to other files (the
 * engine reads the record and the plan after each forward, through moe_layer_record() and
 * moe_layer_plan()); the second is private to moe_layer.c. Others change the ctx only
 * through the functions below (moe_layer_set_token_first, ...). */
struct moe_layer_ctx {
    /* public, read-only to others */
    const moe_config_t *cfg;
    const moe_weights_t *weights;
    MPI_Comm comm;
    int rank, world_size;
    int num_local;        /* most experts this rank hosts in one layer (buffers) */
    int layer_local;      /* experts it hosts in the layer running now */
    int64_t token_first;  /* global index of this rank's first routed token (replica split):
                           * moe_layer_set_token_first */
    int64_t max_tokens;   /* tokens this rank routes per step */
    bool dedup;           /* runtime.dedup as it runs (moe_cfg_dedup): a row per (token,
                           * rank), the expert rank sums the token's experts there */
    int fan;              /* placement.copies: columns: the copies a choice goes to, else 1 */
    int chunks;           /* runtime.chunks: exchange slots 0..chunks-1 dispatch, then combine */
    moe_plan_t plan;      /* the last forward's plan: moe_layer_plan() */
    int *recv_rows;       /* [world] rows received from each rank in the last forward */
    int *recv_pairs;      /* [world] the (token, expert) pairs they carried (= recv_rows
                           * unless dedup) */
    int count_msgs;       /* counts messages this rank sent in the last counts exchange */
    moe_layer_record_t rec; /* what the last forward did: moe_layer_record() */

    /* private: moe_layer.c only */
    int max_slots;        /* placement entries of one layer, at most */
    int64_t capacity;     /* per expert per layer, 0 = none */
    int64_t test_gate_delay_ns; /* MOED_TEST_GATE_DELAY_MS=rank:ms on this rank, else 0 */
    int64_t test_expert_delay_ns; /* MOED_TEST_EXPERT_DELAY_MS=rank:ms on this rank, else 0 */
    bool test_touch;             /* MOED_TEST_TOUCH_MIB names this rank */
    moe_transport_t *transport;
    int count_reqs_n;     /* the counts exchange's requests in flight (counts_post) */
    int count_recvs_n;    /* of which receives: the first ones */
    moe_expert_io_t io;   /* what the back-end sees: sizes, host buffers, rows, the step */
    moe_expert_backend_t backend;
    void *arena;          /* the one block every buffer is carved from */
    size_t arena_bytes;

    int32_t *demand_before; /* [E] */
    int32_t *balance_kept;  /* [E] placement.copies balance, several routing ranks: each
                             * expert's kept choices over all of them (layer_balance_kept) */
    bool balance_summed;    /* placement.copies balance and two or more ranks route: the
                             * demand is summed over them every layer (the config decides) */
    int32_t *recv_counts; /* [world, num_local] rows per source per local expert (dedup:
                           * [world, msg_words] every source's counts message) */
    int64_t msg_words;    /* dedup: words of one source's counts message, at most */
    moe_plan_pairs_t pairs; /* dedup: the pairs each local expert runs over, per chunk */
    int *recv_displs;     /* [world] */
    bool upto;            /* the rows' receives are posted before the counts are in, each
                           * source's block at a fixed place (layer_upto_init) */
    int *region;          /* [world] upto: the row where each source's block starts */
    int *region_rows;     /* [world] upto: the most rows each source may send this rank */
    int *upto_rows;       /* [world] upto: the receives' rows (the own block: its rows) */
    bool *each_recv;      /* [world] upto: the sources whose counts (and rows) this rank
                           * awaits in the layer running now */
    bool *each_send;      /* [world] upto: the ranks it sends counts (and rows) to */
    int *n_local_displs;  /* [world] where each source's counts land */
    int *chunk_send_rows;   /* [chunks * world] each chunk's piece of every send block */
    int *chunk_send_displs; /* [chunks * world] */
    int *chunk_recv_rows;   /* [chunks * world] */
    int *chunk_recv_displs; /* [chunks * world] */
    MPI_Request *count_reqs; /* [2 * world] the counts exchange, point to point */
    int *count_peers;     /* [2 * world] */
    int64_t *src_from;    /* [world] an expert's rows per source in one chunk */
    int64_t *src_rows;    /* [world] */
    const moe_routing_trace_t *replay; /* workload.routing: replaces the gate; NULL: none */
    const int *replay_li;  /* [num_layers] moed layer -> the trace's layer index */
    int64_t posted_ns;     /* when the layer's counts and chunk 0's rows were posted */
    int64_t *combine_hist; /* [num_layers, 4] a rank without experts: its wait for the
                            * combine in the layer's last two steps and the most rows it sent
                            * one rank in each (layer_expect_combine) */
};

/* Size every buffer for `max_tokens` routed tokens. plugin and device: the CUDA plug-in
 * and the rank's device context when cfg->device is cuda (the GPU back-end uploads the
 * weights), else NULL. */
moe_status_t moe_layer_ctx_init(moe_layer_ctx_t *ctx, const moe_config_t *cfg, MPI_Comm comm,
                                moe_transport_t *transport, const moe_weights_t *weights,
                                int64_t max_tokens, const moe_plugin_t *plugin, void *device,
                                moe_error_t *err);
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

/* Collective, once after init on every rank: the rows' receives go before the counts (each
 * source's block at a fixed place) only where every rank can take them so. */
moe_status_t moe_layer_agree_upto(moe_layer_ctx_t *ctx, moe_error_t *err);

/* Bytes of the layer's arena: every host buffer of the step (for the memory report). */
size_t moe_layer_ctx_buffer_bytes(const moe_layer_ctx_t *ctx);

/* Where this rank's routed tokens start in the step's global token order (the replica
 * split, moe_cfg_tokens_of_rank): the plan's tie-breaks use global indices. 0 after init. */
void moe_layer_set_token_first(moe_layer_ctx_t *ctx, int64_t token_first);

/* workload.routing: the gate is not run; step s's routing of this rank's tokens is the
 * trace's rows (s * tokens_per_step + token_first + i) mod rows of layer li[layer]
 * (app/replay.h). tr and li must outlive the ctx. */
void moe_layer_set_replay(moe_layer_ctx_t *ctx, const moe_routing_trace_t *tr, const int *li);

/* The last forward's routing of this rank's tokens as merged: [tokens, top_k] logical
 * expert ids and weights (host memory on the CPU back-end; the profiler's
 * profiler.record_routing reads them). */
static inline const int32_t *moe_layer_topk_ids(const moe_layer_ctx_t *ctx)
{
    return ctx->io.topk_idx;
}
static inline const float *moe_layer_topk_weights(const moe_layer_ctx_t *ctx)
{
    return ctx->io.topk_w;
}

/* The last forward's plan and record (valid until the next forward). */
static inline const moe_plan_t *moe_layer_plan(const moe_layer_ctx_t *ctx)
{
    return &ctx->plan;
}
static inline const moe_layer_record_t *moe_layer_record(const moe_layer_ctx_t *ctx)
{
    return &ctx->rec;
}

/* Replay the last forward's counts exchange, dispatch and combine, unchunked, the rows as
 * two blocking exchanges in slot 0 (the self-bench's exchange timing, app/selfbench.c).
 * err may be NULL. */
moe_status_t moe_layer_replay_exchange(moe_layer_ctx_t *ctx, moe_error_t *err);

/* The collectives a layer's plan runs besides the exchange (the same on every rank: the
 * config decides): the capacity scan (model.capacity_factor > 0: an MPI_Iexscan of one
 * integer an expert) and the experts' demand sum (placement.copies balance with two or
 * more routing ranks: an MPI_Iallreduce of as many). */
enum { MOE_PLAN_CAPACITY_SCAN = 1, MOE_PLAN_DEMAND_SUM = 2 };
int moe_layer_plan_collectives(const moe_layer_ctx_t *ctx);
/* Replay them with the last forward's demand (the self-bench's timing; the results equal
 * the last forward's). Collective. err may be NULL. */
moe_status_t moe_layer_replay_plan(moe_layer_ctx_t *ctx, moe_error_t *err);

#endif /* MOE_LAYER_H */
