/* Part expert (runtime/src/expert/): an expert back-end computes a layer's arithmetic
 * behind one table (backend.h): the CPU back-end here, the CUDA one in cuda/ (built into
 * the plug-in libmoed_cuda.so, which plugin.c loads only when asked). May include: base
 * config model transport (and the public headers in moe/). One file of each part's folder
 * opens with such a comment; tests/lint/parts.sh holds every part to its list. */
/* Where a MoE layer's arithmetic runs: an expert back-end is a table of slots (CPU here,
 * CUDA in the plug-in, expert/plugin.h) that the layer (layer/moe_layer.c) calls in a fixed
 * order each forward. The layer owns routing, the plan, the counts exchange, chunking, the
 * exchanges and the record; the back-end owns the rows' arithmetic and, for a device, their
 * memory. expert/ includes neither layer/ nor transport/: what a back-end may read or
 * write of the layer is passed explicitly in moe_expert_io_t, and the transport is reached
 * only through io->progress.
 *
 * Order of the calls in one forward (c = chunk 0..chunks-1):
 *   gate, permute, [shared], { arrived(c), expert(...)* or pairs(...)*, computed(c) } per
 *   chunk, merge, finish. shared runs once chunk 0's dispatch is in flight, on ranks that
 *   route tokens of a layer with shared experts. io->dedup (runtime.dedup) picks pairs over
 *   expert: then a received row is one (token, rank) and carries every choice of the token
 *   on this rank.
 *
 * Slots (moe_expert_ops_t). Each returns MOE_OK or an error with err filled, never exits;
 * none allocates (everything is sized at attach), except that the CPU back-end computing in
 * BF16 creates a row bucket's oneDNN primitive on its first use (expert/onednn.h: tens of ms
 * each, at most ~10 per GEMM shape, inside the warm-up steps).
 *   name      short name for reports ("cpu", "cuda")
 *   gate      route `tokens` rows of x (memory of the back-end) with layer `layer`'s gate:
 *             io->topk_idx (host) and io->topk_w (host for the CPU; the back-end's own copy
 *             for a device, used by its merge). tokens > 0.
 *   permute   the plan's send rows (io->send_token[0..num_send)) of x, in send order, into
 *             io->xsend; *after: what a device transport must wait for (a
 *             moe_cuda_event_t *), NULL on the host. Called once per forward after the
 *             layer has set io->tokens, io->num_send, io->send_token and io->slot_pos.
 *   arrived   chunk c's pieces (io->chunk_recv_rows/displs) have landed in io->xrecv; a
 *             device fed by a host transport copies them in.
 *   expert    local expert le over n[s] rows at row from[s] of the received rows, for each
 *             source s < io->world_size (total rows in all); outputs go to the same rows of
 *             io->xback. `call` numbers the forward's calls (for device timing); at most
 *             chunks * num_local calls per forward. Not called when io->dedup.
 *   pairs     io->dedup only (optional: NULL where the back-end has none, and the config
 *             refuses runtime.dedup: true for it): local expert le over the n received rows
 *             rows[0..n) (each once), adding w[i] * FFN(row rows[i]) into that row's F32
 *             sum. A chunk's rows' sums start at zero at arrived(c); the local experts of a
 *             chunk are called in ascending order, so each row sums its experts in ascending
 *             expert id; by computed(c) each of the chunk's rows of io->xback holds its sum
 *             in the wire type (rounded once per row; io->row_pairs says when a row's last
 *             term has come). `call` as for expert.
 *   computed  chunk c's experts are queued or done: *after as for permute, and its pieces
 *             of io->xback must be ready for the transport once *after completes.
 *   shared    the layer's shared experts over all `tokens` rows of x into io->shared_out
 *             (Qwen2-MoE: times sigmoid(x . shared_gate)); optional (NULL: the back-end
 *             has none, and the config refuses families with shared experts for it).
 *   merge     every combine is done: x[t] += sum_j w[t,j] * row(t,j) of io->xret, choices
 *             j in order 0..k-1, skipping dropped ones (slot_pos < 0), + shared_out[t]
 *             when io->shared_ran. io->dedup: x[t] += the sum of the token's returned rows
 *             io->token_rows[t*rows_per_token ...] in that (ascending rank) order, each the
 *             weighted sum of its rank's experts, + shared_out[t] (the sum in F32, then
 *             added to x).
 *   finish    the forward is over: wait for the device and replace calls[i]'s host times
 *             (and expert_ns[local], [num_local]) by true device times. NULL-safe to call
 *             with num_calls == 0.
 *   destroy   free the back-end's state (accepts a half-built one; impl may be NULL);
 *             NULL when the back-end has none. */
#ifndef MOE_EXPERT_BACKEND_H
#define MOE_EXPERT_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "moe_config/config.h"
#include "moe_prof/prof.h"
#include "moe/status.h"
#include "model/weights.h"

/* Drive the exchanges in flight once, never blocking. When what != NULL the caller is
 * waiting for something (named by what) since since_ns: also run the watchdog, which
 * fails with MOE_ERR_TIMEOUT or MOE_ERR_INTERRUPTED. */
typedef moe_status_t (*moe_expert_progress_fn)(void *arg, const char *what, int64_t since_ns,
                                               moe_error_t *err);

/* The layer's side of the contract: sizes fixed at init, the host buffers the layer's
 * arena holds, the rows as the transport sees them, and this step's plan. */
typedef struct moe_expert_io {
    const moe_config_t *cfg;
    const moe_weights_t *weights;
    int world_size;
    int num_local;          /* experts on this rank */
    int chunks;
    int64_t max_tokens;     /* tokens this rank routes per step, at most */
    int64_t max_recv;       /* rows of the local experts per step, at most */
    int64_t gather_rows;    /* rows of expert_in/expert_out (one expert's rows, at most) */
    int64_t tile_rows;      /* CPU FFN tile */
    bool host_transport;    /* the transport moves host memory (mpi, ucx) */
    moe_num_dtype_t compute; /* MOE_NUM_F32 (BLAS) or MOE_NUM_BF16 (oneDNN, cuBLAS) */
    bool wire_bf16;          /* rows on the wire (send/ret/recv/back) are BF16 */
    bool dedup;              /* runtime.dedup: a row per (token, rank), the pairs slot */
    int64_t wire_row_bytes;  /* bytes of one row there: moe_wire_row_bytes() */
    moe_expert_progress_fn progress;
    void *progress_arg;
    /* host buffers (the layer's arena) */
    float *logits;          /* [T, E] */
    int32_t *topk_idx;      /* [T, k] */
    float *topk_w;          /* [T, k] */
    float *send_buf, *ret_buf;   /* [T*k] rows of wire_row_bytes (F32 [T*k, H] or BF16) */
    float *recv_buf, *back_buf;  /* [max_recv] rows of wire_row_bytes */
    float *expert_in, *expert_out; /* [gather_rows, H] */
    float *scratch;         /* moe_expert_scratch_floats(.., tile_rows) */
    float *acc_row;         /* [2, H] (the merge's halves: moe/halves.h) */
    float *row_sum;         /* [max_recv, H] dedup with BF16 wire: each received row's F32
                             * sum (F32 wire: back_buf holds it); else unused */
    int32_t *row_left;      /* [max_recv] dedup: terms the row's sum still waits for */
    float *shared_out;      /* [T, H] the shared experts' output (routing ranks) */
    float *shared_scratch;  /* moe_expert_scratch_floats(.., shared_ffn, tile_rows) */
    bool shared_ran;        /* this forward's shared_out is valid */
    /* rows as the transport sees them: the host buffers above, or a device back-end's */
    float *xsend, *xret;    /* [T*k, H] */
    float *xrecv, *xback;   /* [max_recv, H] */
    /* this step (set by the layer) */
    int64_t tokens;
    int64_t num_send;
    const int32_t *send_token; /* [num_send] */
    const int32_t *slot_pos;   /* [tokens * k] */
    const int32_t *token_rows; /* [tokens * rows_per_token] dedup: each token's returned
                                * rows, -1 ended */
    int rows_per_token;        /* token_rows' stride: k, or k x copies for column shares */
    const int32_t *row_pairs;  /* [received rows] dedup: each received row's pairs here */
    const int *chunk_recv_rows;   /* [chunks * world] */
    const int *chunk_recv_displs; /* [chunks * world] */
} moe_expert_io_t;

typedef struct moe_expert_backend moe_expert_backend_t;

typedef struct moe_expert_ops {
    const char *name;
    moe_status_t (*gate)(moe_expert_backend_t *be, int layer, const float *x, int64_t tokens,
                         moe_error_t *err);
    moe_status_t (*permute)(moe_expert_backend_t *be, const float *x, const void **after,
                            moe_error_t *err);
    moe_status_t (*arrived)(moe_expert_backend_t *be, int c, moe_error_t *err);
    moe_status_t (*expert)(moe_expert_backend_t *be, int layer, int le, int call,
                           const int64_t *from, const int64_t *n, int64_t total,
                           moe_error_t *err);
    moe_status_t (*pairs)(moe_expert_backend_t *be, int layer, int le, int call,
                          const int32_t *rows, const float *w, int64_t n, moe_error_t *err);
    moe_status_t (*computed)(moe_expert_backend_t *be, int c, const void **after,
                             moe_error_t *err);
    moe_status_t (*shared)(moe_expert_backend_t *be, int layer, const float *x, int64_t tokens,
                           moe_error_t *err);
    moe_status_t (*merge)(moe_expert_backend_t *be, float *x, int64_t tokens, moe_error_t *err);
    moe_status_t (*finish)(moe_expert_backend_t *be, moe_prof_call_t *calls, int num_calls,
                           int64_t *expert_ns, moe_error_t *err);
    void (*destroy)(moe_expert_backend_t *be);
} moe_expert_ops_t;

/* One attached back-end: its table, the layer's io and its own state. The caller (the
 * layer) holds it by value but touches none of its fields: it calls the
 * moe_expert_backend_* functions below. */
struct moe_expert_backend {
    /* private: set by the back-end's attach, read by backend.c and the back-end's files */
    const moe_expert_ops_t *ops;
    moe_expert_io_t *io;
    void *impl;
};

/* Bytes of one row on the wire: F32 H floats; BF16 H halves rounded up to whole floats (the
 * transports count rows of floats, moe_wire_row_bytes / 4 of them). */
static inline int64_t moe_wire_row_bytes(int64_t hidden, moe_num_dtype_t wire)
{
    return wire == MOE_NUM_BF16 ? (hidden + 1) / 2 * 4 : hidden * 4;
}

/* The CPU back-end (backend_cpu.c): BLAS GEMMs (F32) or oneDNN's (BF16, expert_bf16.c) on
 * the host buffers of io. Fails only when the BF16 GEMMs cannot be set up. */
moe_status_t moe_expert_cpu_attach(moe_expert_backend_t *be, moe_expert_io_t *io,
                                   moe_error_t *err);

/* runtime.compute_dtype for weights of type `value` on this rank: auto = bf16 when value is
 * BF16, FP8 or MXFP4 and the CPU has native BF16 (expert/onednn.h), or on cuda when value
 * is not F32; else f32. bf16 asked on a CPU without it fails (MOE_ERR_CONFIG: exit 3). On cuda the
 * GEMMs run in model.dtype: an explicit value must agree with it. */
moe_status_t moe_expert_compute_dtype(const moe_config_t *cfg, moe_dtype_t value,
                                      moe_num_dtype_t *out, moe_error_t *err);

/* How a routing rank on the CPU holds and computes its shared experts: as its experts would
 * be from the shared experts' own type (moe_weights_shared_dtype; moe_expert_held_dtype): FP8
 * as stored, BF16 where the CPU computes in BF16 or runs BF16 on moed's F32 kernels, else
 * F32 (always F32 on cuda, and with routes false). */
moe_status_t moe_expert_shared_types(const moe_config_t *cfg, bool routes, moe_dtype_t *held,
                                     moe_num_dtype_t *compute, moe_error_t *err);

/* How this rank holds its experts of value type `value` computed in `compute`: FP8 and
 * MXFP4 as stored, BF16 when the CPU computes in BF16, and BF16 also where it computes in F32
 * for want of native BF16 but has moed's F32 kernels (AVX2 or AVX-512F: expert/smallbatch.h
 * widens the BF16 weights in registers, the large calls take the BLAS on panels widened to
 * F32): half the bytes of F32 in memory and in every decode step; else F32. On cuda: value
 * (the plug-in's own type; the host copy is F32). */
moe_dtype_t moe_expert_held_dtype(const moe_config_t *cfg, moe_num_dtype_t compute,
                                  moe_dtype_t value);

/* Reorder every local expert's BF16 weights (w13_bf16, w2_bf16) once into the layout its
 * compute reads (w13_packed, w2_packed): BF16 compute (w->compute) oneDNN's, F32 compute
 * moed's blocked layout (model/weights.h, the F32 kernels read it); the plain ones freed
 * unless runtime.rebalance_every keeps them to move. Experts already packed, or not held in
 * BF16, are skipped. Shared experts held in BF16 (w->shared_store) are packed too, for their
 * own compute type (w->shared_compute), always freeing their plain copies. */
moe_status_t moe_expert_cpu_pack(const moe_config_t *cfg, moe_weights_t *w, moe_error_t *err);

/* The calls into an attached back-end (backend.c): one per slot, in the order above.
 * Callers go through these and never through be->ops; only the back-ends' own files
 * (backend_cpu.c, cuda/) touch the table (tests/lint/ops_calls.sh). */
const char *moe_expert_backend_name(const moe_expert_backend_t *be);
moe_status_t moe_expert_backend_gate(moe_expert_backend_t *be, int layer, const float *x,
                                     int64_t tokens, moe_error_t *err);
moe_status_t moe_expert_backend_permute(moe_expert_backend_t *be, const float *x,
                                        const void **after, moe_error_t *err);
moe_status_t moe_expert_backend_arrived(moe_expert_backend_t *be, int c, moe_error_t *err);
moe_status_t moe_expert_backend_expert(moe_expert_backend_t *be, int layer, int le, int call,
                                       const int64_t *from, const int64_t *n, int64_t total,
                                       moe_error_t *err);
/* Whether the back-end has the optional pairs slot (runtime.dedup). */
bool moe_expert_backend_has_pairs(const moe_expert_backend_t *be);
moe_status_t moe_expert_backend_pairs(moe_expert_backend_t *be, int layer, int le, int call,
                                      const int32_t *rows, const float *w, int64_t n,
                                      moe_error_t *err);
moe_status_t moe_expert_backend_computed(moe_expert_backend_t *be, int c, const void **after,
                                         moe_error_t *err);
/* Whether the back-end has the optional shared slot (the shared experts). */
bool moe_expert_backend_has_shared(const moe_expert_backend_t *be);
moe_status_t moe_expert_backend_shared(moe_expert_backend_t *be, int layer, const float *x,
                                       int64_t tokens, moe_error_t *err);
moe_status_t moe_expert_backend_merge(moe_expert_backend_t *be, float *x, int64_t tokens,
                                      moe_error_t *err);
moe_status_t moe_expert_backend_finish(moe_expert_backend_t *be, moe_prof_call_t *calls,
                                       int num_calls, int64_t *expert_ns, moe_error_t *err);
/* Free be's state through its destroy slot and zero be. Accepts a zeroed be. */
void moe_expert_backend_destroy(moe_expert_backend_t *be);

/* The one source rank all of an expert call's rows come from (n[s] rows per source s <
 * world), or -1 when they come from several: then they are not contiguous and must be
 * gathered. */
int moe_expert_only_source(const int64_t *n, int world);

#endif /* MOE_EXPERT_BACKEND_H */
