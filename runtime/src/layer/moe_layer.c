/* One MoE layer: routing, the plan, the counts exchange, chunking, the exchanges and the
 * record. The arithmetic is the expert back-end's (expert/backend.h), reached only through
 * its table. */
#include "layer/moe_layer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/clock.h"
#include "moe/mem.h"
#include "moe/mpi_check.h"
#include "moe/stop.h"
#include "moe/testctl.h"
#include "expert/expert.h"
#include "expert/nvtx.h"
#include "layer/arena.h"
#include "transport/wait.h"
#include "transport/wake.h"

/* Every host buffer of the step, carved from one arena (a sizing pass first: arena.h). */
static void layer_carve(moe_layer_ctx_t *ctx, moe_arena_t *a)
{
    moe_expert_io_t *io = &ctx->io;
    const moe_config_t *cfg = ctx->cfg;
    size_t W = (size_t)ctx->world_size, E = (size_t)cfg->num_experts, k = (size_t)cfg->top_k;
    size_t H = (size_t)cfg->hidden_dim, T = (size_t)ctx->max_tokens, f = sizeof(float);
    size_t fan = (size_t)ctx->fan; /* column shares: a choice goes to every copy */
    size_t pairs = T * k, R = (size_t)io->max_recv, G = (size_t)io->gather_rows;
    size_t cw = (size_t)ctx->chunks * W, nl = (size_t)ctx->num_local;
    moe_plan_carve_fan(&ctx->plan, (int)W, (int)E, (int)k, ctx->max_tokens, ctx->max_slots,
                       ctx->fan, a);
    io->logits = moe_arena_take(a, T * E, f);
    io->topk_idx = moe_arena_take(a, pairs, sizeof(int32_t));
    io->topk_w = moe_arena_take(a, pairs, f);
    size_t wire = (size_t)io->wire_row_bytes; /* rows on the wire: F32 or BF16 */
    io->send_buf = moe_arena_take(a, pairs * fan, wire);
    io->ret_buf = moe_arena_take(a, pairs * fan, wire);
    io->recv_buf = moe_arena_take(a, R, wire);
    io->back_buf = moe_arena_take(a, R, wire);
    io->expert_in = moe_arena_take(a, G * H, f);
    io->expert_out = moe_arena_take(a, G * H, f);
    io->scratch = moe_arena_take(
        a, (size_t)moe_expert_scratch_floats(cfg->activation, moe_cfg_expert_ffn(cfg),
                                             io->tile_rows), f);
    io->acc_row = moe_arena_take(a, 2 * H, f); /* a row for each half of the merge */
    size_t Ts = ctx->weights->shared_ffn > 0 ? T : 0; /* shared experts: routing ranks */
    io->shared_out = moe_arena_take(a, Ts * H, f);
    io->shared_scratch = moe_arena_take(
        a, Ts > 0 ? (size_t)moe_expert_scratch_floats(cfg->activation, ctx->weights->shared_ffn,
                                                      io->tile_rows) : 0, f);
    ctx->demand_before = moe_arena_take(a, E, sizeof(int32_t));
    ctx->balance_kept = moe_arena_take(a, E, sizeof(int32_t));
    ctx->recv_counts = moe_arena_take(a, W * (ctx->dedup ? (size_t)ctx->msg_words : nl + 1),
                                      sizeof(int32_t));
    /* dedup: a received row carries at most min(k, local experts) pairs */
    moe_plan_pairs_carve(&ctx->pairs, (int)W, ctx->dedup ? (int)nl : 0, ctx->chunks,
                         ctx->dedup ? R * (k < nl ? k : nl) : 0, ctx->dedup ? (int64_t)R : 0, a);
    bool sums = ctx->dedup && io->wire_bf16; /* F32 wire: back_buf holds the sums */
    io->row_sum = moe_arena_take(a, sums ? R * H : 0, f);
    io->row_left = moe_arena_take(a, ctx->dedup ? R : 0, sizeof(int32_t));
    ctx->recv_rows = moe_arena_take(a, W, sizeof(int));
    ctx->recv_pairs = moe_arena_take(a, W, sizeof(int));
    ctx->recv_displs = moe_arena_take(a, W, sizeof(int));
    ctx->region = moe_arena_take(a, W, sizeof(int));
    ctx->region_rows = moe_arena_take(a, W, sizeof(int));
    ctx->upto_rows = moe_arena_take(a, W, sizeof(int));
    ctx->each_recv = moe_arena_take(a, W, sizeof(bool));
    ctx->each_send = moe_arena_take(a, W, sizeof(bool));
    ctx->n_local_displs = moe_arena_take(a, W, sizeof(int));
    ctx->chunk_send_rows = moe_arena_take(a, cw, sizeof(int));
    ctx->chunk_send_displs = moe_arena_take(a, cw, sizeof(int));
    ctx->chunk_recv_rows = moe_arena_take(a, cw, sizeof(int));
    ctx->chunk_recv_displs = moe_arena_take(a, cw, sizeof(int));
    ctx->count_reqs = moe_arena_take(a, 2 * W, sizeof(MPI_Request));
    ctx->count_peers = moe_arena_take(a, 2 * W, sizeof(int));
    ctx->src_from = moe_arena_take(a, W, sizeof(int64_t));
    ctx->src_rows = moe_arena_take(a, W, sizeof(int64_t));
    ctx->combine_hist = moe_arena_take(a, (size_t)cfg->num_layers * 4, sizeof(int64_t));
    ctx->rec.expert_rows = moe_arena_take(a, nl, sizeof(int64_t));
    ctx->rec.expert_ns = moe_arena_take(a, nl, sizeof(int64_t));
    ctx->rec.calls = moe_arena_take(a, (size_t)ctx->chunks * nl, sizeof(moe_prof_call_t));
    ctx->rec.spans = moe_arena_take(a, 2 * (size_t)ctx->chunks, sizeof(moe_prof_span_t));
    ctx->rec.peer_wait_ns = moe_arena_take(a, W, sizeof(int64_t));
}

/* The arena: size it, take one zeroed block aligned like its buffers, carve. */
static moe_status_t layer_alloc(moe_layer_ctx_t *ctx, moe_error_t *err)
{
    moe_arena_t sizing = {0};
    layer_carve(ctx, &sizing);
    size_t bytes = moe_arena_size(&sizing);
    void *block = moe_alloc_large(bytes); /* 64-byte aligned at least: MOE_ARENA_ALIGN */
    if (block == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY,
                             "cannot allocate the step buffers (%zu bytes for %lld tokens x "
                             "%lld hidden)", bytes, (long long)ctx->max_tokens,
                             (long long)ctx->cfg->hidden_dim);
    }
    memset(block, 0, bytes);
    moe_arena_t arena = {.base = block};
    layer_carve(ctx, &arena);
    ctx->arena = block;
    ctx->arena_bytes = bytes;
    return MOE_OK;
}

/* Layer `layer`'s experts on this rank (placement.layers may give each layer its own set):
 * the counts exchange and the expert loop run over them. */
static void layer_select(moe_layer_ctx_t *ctx, int layer)
{
    ctx->layer_local = moe_cfg_experts_of_rank_layer(ctx->cfg, layer, ctx->rank, NULL);
    for (int r = 0; r < ctx->world_size; r++) {
        ctx->n_local_displs[r] = r * ctx->layer_local;
    }
}

/* The back-end's way to the transport (expert/backend.h: moe_expert_progress_fn). */
static moe_status_t layer_progress(void *arg, const char *what, int64_t since_ns,
                                   moe_error_t *err)
{
    moe_layer_ctx_t *ctx = arg;
    moe_status_t st = moe_transport_progress(ctx->transport, err);
    if (st == MOE_OK && what != NULL) {
        st = moe_wait_poll(since_ns, what, NULL, 0, err);
    }
    return st;
}

/* What the back-end sees that does not change from step to step. */
static void layer_io_init(moe_layer_ctx_t *ctx)
{
    const moe_config_t *cfg = ctx->cfg;
    moe_expert_io_t *io = &ctx->io;
    int64_t T = cfg->tokens_per_step, k = cfg->top_k;
    io->cfg = cfg;
    io->weights = ctx->weights;
    io->world_size = ctx->world_size;
    io->num_local = ctx->num_local;
    io->chunks = ctx->chunks;
    io->max_tokens = ctx->max_tokens;
    /* A token picks an expert at most once: no local expert gets more than T rows. With
     * dedup a token comes to a rank at most once. */
    io->max_recv = T * k < ctx->num_local * T ? T * k : ctx->num_local * T;
    io->dedup = ctx->dedup;
    if (ctx->dedup) {
        io->max_recv = ctx->num_local > 0 ? T : 0;
        ctx->msg_words = moe_plan_msg_words((int)k, ctx->num_local, T);
    }
    io->gather_rows = ctx->num_local > 0 ? T : 0;
    io->tile_rows = T < 1024 ? T : 1024;
    io->host_transport = !moe_transport_device_memory(ctx->transport);
    io->compute = ctx->weights->compute;
    io->wire_bf16 = ctx->weights->wire == MOE_NUM_BF16;
    io->wire_row_bytes = moe_wire_row_bytes(cfg->hidden_dim, ctx->weights->wire);
    io->progress = layer_progress;
    io->progress_arg = ctx;
}

/* The back-end the config asks for: the CPU's, or the plug-in's GPU back-end. */
static moe_status_t layer_attach(moe_layer_ctx_t *ctx, const moe_plugin_t *plugin,
                                 void *device, moe_error_t *err)
{
    moe_expert_io_t *io = &ctx->io;
    io->xsend = io->send_buf;
    io->xret = io->ret_buf;
    io->xrecv = io->recv_buf;
    io->xback = io->back_buf;
    if (ctx->cfg->device != MOE_DEVICE_CUDA) {
        return moe_expert_cpu_attach(&ctx->backend, io, err);
    }
    if (plugin == NULL || device == NULL) {
        return moe_error_set(err, MOE_ERR_INTERNAL,
                             "runtime.device: cuda, but the layer got no CUDA plug-in or device");
    }
    return plugin->expert_attach(&ctx->backend, io, device, err);
}

/* Online rebalancing (runtime.rebalance_every) may give an expert rank up to the slots
 * rule's experts per layer and a layer E + R copies: the buffers are sized for that. */
static void layer_rebalance_room(moe_layer_ctx_t *ctx)
{
    const moe_config_t *cfg = ctx->cfg;
    if (cfg->rebalance_every == 0 || ctx->world_size < 2) {
        return;
    }
    int32_t ranks[MOE_MAX_RANKS];
    int n = moe_cfg_expert_ranks(cfg, ctx->world_size, ranks);
    bool hosts = false;
    for (int j = 0; j < n; j++) {
        hosts |= ranks[j] == ctx->rank;
    }
    int slots = moe_cfg_rebalance_slots(cfg, ctx->world_size);
    int copies = (int)(cfg->num_experts + cfg->redundant_experts);
    if (hosts) { /* every rank plans every copy; only expert ranks compute */
        ctx->num_local = slots > ctx->num_local ? slots : ctx->num_local;
    }
    ctx->max_slots = copies > ctx->max_slots ? copies : ctx->max_slots;
}

/* The tokens rank r routes a step (the config's rule, as the engine splits them: all on the
 * master in master routing, else every rank a share), and whether it routes any: only
 * those send rows, so only those send counts. */
static int64_t layer_tokens_of(const moe_layer_ctx_t *ctx, int r)
{
    int64_t first = 0, count = 0;
    moe_cfg_tokens_of_rank(ctx->cfg, ctx->world_size, r, &first, &count);
    return count;
}

static bool layer_routes(const moe_layer_ctx_t *ctx, int r)
{
    return layer_tokens_of(ctx, r) > 0;
}

/* Where each source's rows land when the receives go before the counts (ctx->upto): a
 * place for the most rows it may send this rank (dedup: one a token it routes; else one a
 * pair, at most one a local expert), the places in rank order. This rank can take them so
 * where the transport takes receives before their counts (moe_transport_recv_upto: MPI
 * within one piece, UCX), in one chunk, on the CPU, and MOED_RECV_UPTO is not 0 (for
 * measurements); moe_layer_agree_upto makes it every rank's choice. */
static void layer_upto_init(moe_layer_ctx_t *ctx)
{
    int W = ctx->world_size, upto = moe_transport_recv_upto(ctx->transport);
    const char *env = getenv("MOED_RECV_UPTO");
    int64_t k = ctx->cfg->top_k, nl = ctx->num_local, row = 0;
    bool ok = upto > 0 && W > 1 && ctx->chunks == 1 && ctx->cfg->device != MOE_DEVICE_CUDA &&
              !(env != NULL && strcmp(env, "0") == 0);
    for (int s = 0; s < W; s++) {
        int64_t T = layer_tokens_of(ctx, s);
        int64_t most = ctx->dedup ? T : (T * k < nl * T ? T * k : nl * T);
        most = nl > 0 ? most : 0;
        ctx->region[s] = (int)row;
        ctx->region_rows[s] = (int)most;
        row += most;
        ok = ok && (s == ctx->rank || most <= upto);
    }
    ctx->upto = ok && row <= ctx->io.max_recv;
}

moe_status_t moe_layer_agree_upto(moe_layer_ctx_t *ctx, moe_error_t *err)
{
    int mine = ctx->upto, all = 0;
    MPI_Request req;
    moe_status_t st = MOE_MPI(MPI_Iallreduce(&mine, &all, 1, MPI_INT, MPI_LAND, ctx->comm,
                                             &req), err);
    st = st == MOE_OK ? moe_wait_request(&req, "the layer's receive plan", err) : st;
    ctx->upto = st == MOE_OK && all;
    return st;
}

/* Fault injection for tests (moe/testctl.h): the delay hook's sleep for this rank in ns (0
 * when the hook does not name it). */
static int64_t layer_test_delay(moe_testctl_hook_t hook, int rank)
{
    return moe_testctl_delay_ms(hook, rank) * 1000000LL;
}

moe_status_t moe_layer_ctx_init(moe_layer_ctx_t *ctx, const moe_config_t *cfg, MPI_Comm comm,
                                moe_transport_t *transport, const moe_weights_t *weights,
                                int64_t max_tokens, const moe_plugin_t *plugin, void *device,
                                moe_error_t *err)
{
    memset(ctx, 0, sizeof(*ctx));
    ctx->cfg = cfg;
    ctx->weights = weights;
    ctx->comm = comm;
    ctx->transport = transport;
    moe_status_t st = MOE_MPI(MPI_Comm_rank(comm, &ctx->rank), err);
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Comm_size(comm, &ctx->world_size), err);
    }
    if (st != MOE_OK) {
        return st;
    }
    ctx->max_tokens = max_tokens;
    ctx->num_local = moe_cfg_max_local(cfg, ctx->rank);
    ctx->layer_local = moe_cfg_experts_of_rank(cfg, ctx->rank, NULL);
    ctx->max_slots = (int)cfg->num_experts;
    for (int l = 0; l < cfg->num_layers && l < MOE_MAX_LAYER_IDS; l++) {
        int n = 0;
        (void)moe_cfg_layer_entries(cfg, l, &n);
        ctx->max_slots = n > ctx->max_slots ? n : ctx->max_slots;
    }
    layer_rebalance_room(ctx);
    ctx->capacity = moe_plan_capacity(cfg->capacity_factor, cfg->tokens_per_step,
                                      (int)cfg->top_k, (int)cfg->num_experts);
    int routing = 0;
    for (int r = 0; r < ctx->world_size; r++) {
        routing += layer_routes(ctx, r) ? 1 : 0;
    }
    ctx->balance_summed = cfg->copies == MOE_COPIES_BALANCE && routing >= 2;
    ctx->chunks = (int)cfg->chunks;
    ctx->dedup = moe_cfg_dedup(cfg);
    ctx->fan = cfg->column_shares > 1 ? cfg->column_shares : 1;
    ctx->test_gate_delay_ns = layer_test_delay(MOE_TESTCTL_GATE_DELAY, ctx->rank);
    ctx->test_expert_delay_ns = layer_test_delay(MOE_TESTCTL_EXPERT_DELAY, ctx->rank);
    ctx->test_touch = moe_testctl_touch_mib(ctx->rank) > 0;
    if (ctx->chunks * 2 > transport->num_slots) {
        return moe_error_set(err, MOE_ERR_INTERNAL, "the transport has %d slots, %d chunks need %d",
                             transport->num_slots, ctx->chunks, 2 * ctx->chunks);
    }
    layer_io_init(ctx);
    if ((st = layer_alloc(ctx, err)) != MOE_OK) {
        return st;
    }
    layer_select(ctx, 0);
    layer_upto_init(ctx);
    st = layer_attach(ctx, plugin, device, err);
    if (st == MOE_OK && ctx->dedup && !moe_expert_backend_has_pairs(&ctx->backend)) {
        st = moe_error_set(err, MOE_ERR_CONFIG, "runtime.dedup: the %s back-end sends one row "
                           "per (token, expert); use runtime.dedup: false",
                           moe_expert_backend_name(&ctx->backend));
    }
    if (st != MOE_OK) {
        moe_layer_ctx_destroy(ctx);
    }
    return st;
}

void moe_layer_ctx_destroy(moe_layer_ctx_t *ctx)
{
    if (ctx == NULL) {
        return;
    }
    moe_expert_backend_destroy(&ctx->backend);
    free(ctx->arena); /* the plan and every buffer were carved from it */
    memset(ctx, 0, sizeof(*ctx));
}

size_t moe_layer_ctx_buffer_bytes(const moe_layer_ctx_t *ctx)
{
    return ctx->arena_bytes;
}

void moe_layer_set_token_first(moe_layer_ctx_t *ctx, int64_t token_first)
{
    ctx->token_first = token_first;
}

static moe_status_t counts_post(moe_layer_ctx_t *ctx, moe_error_t *err);
static moe_status_t counts_wait(moe_layer_ctx_t *ctx, moe_error_t *err);

/* The peers' counts awaited; after a failure (st) they still come: taken, the first error
 * kept. */
static moe_status_t counts_settle(moe_layer_ctx_t *ctx, moe_status_t st, moe_error_t *err)
{
    if (st == MOE_OK) {
        return counts_wait(ctx, err);
    }
    moe_error_t ignored;
    moe_error_clear(&ignored);
    (void)counts_wait(ctx, &ignored);
    return st;
}

/* upto: slot 0's receives, posted before the counts are in: from every source whose counts
 * come, up to its region's rows at its region (the own block: own_rows, copied). */
static moe_status_t layer_upto_recvs(moe_layer_ctx_t *ctx, int own_rows, moe_error_t *err)
{
    for (int s = 0; s < ctx->world_size; s++) {
        ctx->upto_rows[s] = s == ctx->rank ? own_rows : ctx->each_recv[s] ? ctx->region_rows[s]
                                                                          : 0;
    }
    return moe_transport_start_recvs(ctx->transport, 0, ctx->io.xrecv, ctx->upto_rows,
                                     ctx->region, ctx->each_recv, err);
}

moe_status_t moe_layer_replay_exchange(moe_layer_ctx_t *ctx, moe_error_t *err)
{
    /* as the layer does: the counts posted, the rows sent (upto: and received), the counts
     * awaited, else then the rows received (the last forward's sizes) */
    moe_transport_t *t = ctx->transport;
    moe_status_t st = counts_post(ctx, err);
    if (st == MOE_OK) {
        st = moe_transport_start_sends(t, 0, ctx->io.xsend, ctx->plan.send_rows,
                                       ctx->plan.send_row_displs,
                                       ctx->upto ? ctx->each_send : NULL, NULL, err);
    }
    if (st == MOE_OK && ctx->upto) {
        st = layer_upto_recvs(ctx, ctx->plan.send_rows[ctx->rank], err);
    }
    st = counts_settle(ctx, st, err);
    if (st == MOE_OK && !ctx->upto) {
        st = moe_transport_start_recvs(t, 0, ctx->io.xrecv, ctx->recv_rows, ctx->recv_displs,
                                       NULL, err);
    }
    if (st == MOE_OK) {
        st = moe_transport_wait(t, 0, "the row exchange", err);
    } else if (t->xfer[0].active) {
        moe_transport_cancel(t, 0);
    }
    if (st == MOE_OK) {
        st = moe_transport_exchange(ctx->transport, ctx->io.xback, ctx->recv_rows,
                                    ctx->recv_displs, ctx->io.xret, ctx->plan.send_rows,
                                    ctx->plan.send_row_displs, err);
    }
    return st;
}

void moe_layer_set_replay(moe_layer_ctx_t *ctx, const moe_routing_trace_t *tr, const int *li)
{
    ctx->replay = tr;
    ctx->replay_li = li;
}

/* workload.routing: this rank's tokens' rows of the trace for this step, as the gate's. */
static void layer_replay(moe_layer_ctx_t *ctx, int layer, int64_t tokens, int64_t step)
{
    const moe_routing_trace_t *tr = ctx->replay;
    int li = ctx->replay_li[layer];
    size_t k = (size_t)tr->top_k;
    int64_t first = (step * ctx->cfg->tokens_per_step + ctx->token_first) % tr->rows;
    for (int64_t i = 0; i < tokens; i++) {
        int64_t r = (first + i) % tr->rows;
        memcpy(ctx->io.topk_idx + (size_t)i * k, moe_routing_trace_ids(tr, li, r),
               k * sizeof(int32_t));
        memcpy(ctx->io.topk_w + (size_t)i * k, moe_routing_trace_weights(tr, li, r),
               k * sizeof(float));
    }
}

/* The gate: this rank's own compute, the whole of the gate phase (or the replayed
 * routing's copy). */
static moe_status_t layer_gate(moe_layer_ctx_t *ctx, int layer, const float *x, int64_t tokens,
                               int64_t step, moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    moe_expert_backend_t *be = &ctx->backend;
    if (ctx->replay != NULL) {
        layer_replay(ctx, layer, tokens, step);
    } else if (tokens > 0 &&
               (st = moe_expert_backend_gate(be, layer, x, tokens, err)) != MOE_OK) {
        return st;
    }
    moe_plan_count_demand(&ctx->plan, ctx->io.topk_idx, tokens);
    if (ctx->test_gate_delay_ns > 0) { /* MOED_TEST_GATE_DELAY_MS: a slow gate, for tests */
        moe_testctl_sleep(MOE_TESTCTL_GATE_DELAY, ctx->rank);
    }
    return MOE_OK;
}

/* Every rank's layer demand (one integer an expert) summed into out: over all ranks
 * (MPI_Iallreduce), or over the lower ranks (scan: MPI_Iexscan; rank 0's out undefined),
 * awaited as `what`. A collective. */
static moe_status_t demand_collective(moe_layer_ctx_t *ctx, bool scan, int32_t *out,
                                      const char *what, moe_error_t *err)
{
    int E = (int)ctx->cfg->num_experts;
    const int32_t *in = ctx->plan.expert_demand;
    MPI_Request req;
    moe_status_t st =
        scan ? MOE_MPI(MPI_Iexscan(in, out, E, MPI_INT32_T, MPI_SUM, ctx->comm, &req), err)
             : MOE_MPI(MPI_Iallreduce(in, out, E, MPI_INT32_T, MPI_SUM, ctx->comm, &req), err);
    return st == MOE_OK ? moe_wait_request(&req, what, err) : st;
}

/* placement.copies balance with several routing ranks: every routing rank must give an
 * expert's tokens to the same copy, or an expert that two routing ranks' tokens touch is
 * read by two ranks (each picking from its own tokens: 15-36% more bytes a decode step,
 * NP=2 symmetric). The layer's kept choices of each expert over every rank (the demand
 * summed; the capacity keeps at most `capacity` of them), the same on every rank; NULL
 * where one rank routes (its own plan has them) or not balance. A collective: every rank
 * calls it with the same config. */
static moe_status_t layer_balance_kept(moe_layer_ctx_t *ctx, const int32_t **kept,
                                       moe_error_t *err)
{
    int E = (int)ctx->cfg->num_experts;
    *kept = NULL;
    if (!ctx->balance_summed) {
        return MOE_OK;
    }
    moe_status_t st = demand_collective(ctx, false, ctx->balance_kept,
                                        "the experts' demand (placement.copies: balance)", err);
    if (st != MOE_OK) {
        return st;
    }
    for (int e = 0; ctx->capacity > 0 && e < E; e++) {
        ctx->balance_kept[e] = ctx->balance_kept[e] < ctx->capacity ? ctx->balance_kept[e]
                                                                  : (int32_t)ctx->capacity;
    }
    *kept = ctx->balance_kept;
    return MOE_OK;
}

/* With a capacity: each expert's demand on the lower routing ranks (global token order
 * decides who is dropped: lower routing ranks come first) into *before; NULL without one.
 * A collective: every rank calls it with the same config. */
static moe_status_t layer_capacity_scan(moe_layer_ctx_t *ctx, const int32_t **before,
                                        moe_error_t *err)
{
    int E = (int)ctx->cfg->num_experts;
    *before = NULL;
    if (ctx->capacity <= 0) {
        return MOE_OK;
    }
    moe_status_t st = demand_collective(ctx, true, ctx->demand_before, "the capacity scan", err);
    if (st != MOE_OK) {
        return st;
    }
    if (ctx->rank == 0) {
        memset(ctx->demand_before, 0, sizeof(int32_t) * (size_t)E);
    }
    *before = ctx->demand_before;
    return MOE_OK;
}

int moe_layer_plan_collectives(const moe_layer_ctx_t *ctx)
{
    return (ctx->capacity > 0 ? MOE_PLAN_CAPACITY_SCAN : 0) |
           (ctx->balance_summed ? MOE_PLAN_DEMAND_SUM : 0);
}

moe_status_t moe_layer_replay_plan(moe_layer_ctx_t *ctx, moe_error_t *err)
{
    const int32_t *before = NULL, *kept = NULL;
    moe_status_t st = layer_capacity_scan(ctx, &before, err);
    return st == MOE_OK ? layer_balance_kept(ctx, &kept, err) : st;
}

/* Capacity and plan: the capacity scan waits for every lower routing rank's gate, so it
 * runs in the dispatch phase, where the profiler books waiting on peers as idle (a rank
 * that routes nothing would otherwise be booked as computing while it waits). */
static moe_status_t layer_plan(moe_layer_ctx_t *ctx, int layer, int64_t tokens,
                               moe_error_t *err)
{
    const int32_t *before = NULL;
    moe_status_t st = layer_capacity_scan(ctx, &before, err);
    if (st != MOE_OK) {
        return st;
    }
    int n_slots = 0;
    const moe_cfg_replica_t *slots = moe_cfg_layer_entries(ctx->cfg, layer, &n_slots);
    ctx->plan.dedup = ctx->dedup;
    ctx->plan.columns = ctx->fan > 1;
    ctx->plan.balance = ctx->cfg->copies == MOE_COPIES_BALANCE;
    st = layer_balance_kept(ctx, &ctx->plan.balance_kept, err);
    if (st != MOE_OK) {
        return st;
    }
    moe_plan_build_slots(&ctx->plan, ctx->io.topk_idx, ctx->io.topk_w, tokens, slots, n_slots,
                         ctx->token_first, ctx->cfg->tokens_per_step, ctx->capacity, before);
    return MOE_OK;
}

enum { COUNTS_TAG = 4241 };

/* Each routing rank tells every expert rank how many rows of each of its experts will come
 * (dedup: its rows and the pairs they carry, plan.h's counts message): point to point (not
 * a collective) so the watchdog can name a rank that never answers. A rank that routes
 * nothing sends no counts and none are awaited from it (in master routing the expert ranks
 * do not wait on each other): its counts are zero (dedup: no rows, no pairs). */
static moe_status_t counts_post(moe_layer_ctx_t *ctx, moe_error_t *err)
{
    moe_plan_t *p = &ctx->plan;
    int W = ctx->world_size, me = ctx->rank, n = 0;
    moe_status_t st = MOE_OK;
    memset(ctx->each_recv, 0, sizeof(bool) * (size_t)W);
    memset(ctx->each_send, 0, sizeof(bool) * (size_t)W);
    for (int s = 0; s < W && st == MOE_OK; s++) {
        int32_t *at = ctx->dedup ? ctx->recv_counts + (size_t)s * (size_t)ctx->msg_words
                                 : ctx->recv_counts + ctx->n_local_displs[s];
        if (s != me && !layer_routes(ctx, s)) {
            memset(at, 0, sizeof(int32_t) * (size_t)(ctx->layer_local + ctx->dedup));
        } else if (s != me && ctx->layer_local > 0) {
            int words = ctx->dedup ? (int)ctx->msg_words : ctx->layer_local;
            st = MOE_MPI(MPI_Irecv(at, words, MPI_INT32_T, s, COUNTS_TAG, ctx->comm,
                                   &ctx->count_reqs[n]), err);
            ctx->count_peers[n++] = s;
            ctx->each_recv[s] = true;
        }
    }
    ctx->count_recvs_n = n;
    ctx->count_msgs = 0;
    for (int d = 0; d < W && st == MOE_OK && layer_routes(ctx, me); d++) {
        if (d != me && p->count_msg_len[d] > 0) {
            ctx->count_msgs++;
            st = MOE_MPI(MPI_Isend(p->count_msg + p->count_msg_displs[d], p->count_msg_len[d],
                                   MPI_INT32_T, d, COUNTS_TAG, ctx->comm, &ctx->count_reqs[n]),
                         err);
            ctx->count_peers[n++] = d;
            ctx->each_send[d] = true;
            moe_wake_post(d);
        }
    }
    ctx->count_reqs_n = n; /* after a failed post: those posted, for the wait to end */
    if (st != MOE_OK) {
        return st;
    }
    int32_t *mine = ctx->dedup ? ctx->recv_counts + (size_t)me * (size_t)ctx->msg_words
                               : ctx->recv_counts + ctx->n_local_displs[me];
    memcpy(mine, p->count_msg + p->count_msg_displs[me],
           sizeof(int32_t) * (size_t)p->count_msg_len[me]);
    return MOE_OK;
}

/* A wait for the counts that failed (a stop, the watchdog, an MPI error): the job is
 * ending. Receives still posted are cancelled, so that no late message lands in the layer's
 * arena once it is freed, and sends are released to complete on their own, as the row
 * transport's cancel does (transport/mpi.c, mpi_cancel). A failure here is the job's
 * error already: not returned. */
static void counts_drop(moe_layer_ctx_t *ctx, int n)
{
    for (int i = 0; i < n; i++) {
        if (ctx->count_reqs[i] == MPI_REQUEST_NULL) {
            continue; /* completed */
        }
        if (i < ctx->count_recvs_n) {
            MOE_MPI(MPI_Cancel(&ctx->count_reqs[i]), NULL);
        }
        MOE_MPI(MPI_Request_free(&ctx->count_reqs[i]), NULL);
    }
}

/* The counts posted by counts_post: every one received and sent. */
static moe_status_t counts_wait(moe_layer_ctx_t *ctx, moe_error_t *err)
{
    int n = ctx->count_reqs_n;
    ctx->count_reqs_n = 0;
    moe_status_t st = moe_wait_all(ctx->count_reqs, ctx->count_peers, n, "the counts exchange",
                                   err);
    if (st != MOE_OK) {
        counts_drop(ctx, n);
    }
    return st;
}

/* A rank that hosts no expert of the layer (the master) waits for the combine as long as
 * the expert ranks compute, ~100 ms in the default job, and would wake ~100 times meanwhile
 * (moe/poll.h), each time taking the core from an expert rank. It expects the wait to end
 * when the busiest expert rank's rows (the most it sends one rank) are done at the pace
 * of the layer's last two waits, 5% early, and naps towards that (scaled by rows, the guess
 * follows the routing, which changes every step; the machine's own pace moved the wait by
 * up to +-8%: a wait that ends sooner is cut short by the expert ranks' wake-up posts on
 * one node, transport/wake.h, else caught by the backoff). Waits under EXPECT_MIN_NS, and
 * every wait of a rank that computes (whose waits are short and whose oversleeping would
 * delay the others), keep the plain spin and backoff. */
#define EXPECT_MIN_NS 1000000LL

/* The most rows this rank sends one rank in the layer's plan. */
static int64_t layer_busiest_rows(const moe_layer_ctx_t *ctx)
{
    int64_t most = 0;
    for (int r = 0; r < ctx->world_size; r++) {
        most = ctx->plan.send_rows[r] > most ? ctx->plan.send_rows[r] : most;
    }
    return most;
}

/* Sets the expectation for the combine wait starting now; returns the start. */
static int64_t layer_expect_combine(moe_layer_ctx_t *ctx, int layer)
{
    int64_t now = moe_now_ns();
    if (ctx->layer_local == 0 && layer >= 0 && layer < ctx->cfg->num_layers) {
        const int64_t *h = ctx->combine_hist + (size_t)layer * 4; /* ns, ns, rows, rows */
        int64_t rows = layer_busiest_rows(ctx), guess = 0;
        for (int i = 0; i < 2; i++) {
            int64_t g = h[2 + i] > 0 ? (int64_t)((double)h[i] * (double)rows / (double)h[2 + i])
                                     : 0;
            guess = i == 0 || g < guess ? g : guess;
        }
        moe_wait_expect(guess >= EXPECT_MIN_NS ? now + guess - guess / 20 : 0);
    }
    return now;
}

/* After the combine: no expectation for other waits; its length and rows kept if it
 * succeeded. */
static void layer_combine_waited(moe_layer_ctx_t *ctx, int layer, int64_t begin,
                                 moe_status_t st)
{
    moe_wait_expect(0);
    if (st == MOE_OK && ctx->layer_local == 0 && layer >= 0 && layer < ctx->cfg->num_layers) {
        int64_t *h = ctx->combine_hist + (size_t)layer * 4;
        h[1] = h[0];
        h[0] = moe_now_ns() - begin;
        h[3] = h[2];
        h[2] = layer_busiest_rows(ctx);
    }
}

/* Piece c of N of a block of n rows: [n*c/N, n*(c+1)/N). */
static int piece_lo(int n, int c, int chunks)
{
    return (int)((int64_t)n * c / chunks);
}

/* Cut every send block (the plan's) or every receive block (the counts') into the chunks'
 * pieces. */
static void layer_cut_chunks(moe_layer_ctx_t *ctx, bool recv)
{
    int W = ctx->world_size, N = ctx->chunks;
    const int *rows = recv ? ctx->recv_rows : ctx->plan.send_rows;
    const int *displs = recv ? ctx->recv_displs : ctx->plan.send_row_displs;
    int *cut_rows = recv ? ctx->chunk_recv_rows : ctx->chunk_send_rows;
    int *cut_displs = recv ? ctx->chunk_recv_displs : ctx->chunk_send_displs;
    for (int c = 0; c < N; c++) {
        for (int r = 0; r < W; r++) {
            int i = c * W + r, lo = piece_lo(rows[r], c, N);
            cut_displs[i] = displs[r] + lo;
            cut_rows[i] = piece_lo(rows[r], c + 1, N) - lo;
        }
    }
}

/* The receive blocks from the counts received (upto: at their regions), cut into chunks;
 * dedup: the pairs each row carries. */
static moe_status_t layer_recv_blocks(moe_layer_ctx_t *ctx, moe_error_t *err)
{
    int W = ctx->world_size, nl = ctx->layer_local, row = 0;
    for (int s = 0; s < W; s++) {
        int n = 0;
        for (int e = 0; e < nl && !ctx->dedup; e++) {
            n += ctx->recv_counts[s * nl + e];
        }
        if (ctx->dedup && nl > 0) {
            n = ctx->recv_counts[(size_t)s * (size_t)ctx->msg_words]; /* its rows */
        }
        int at = ctx->upto ? ctx->region[s] : row;
        int64_t room = ctx->upto ? ctx->region_rows[s] : ctx->io.max_recv - row;
        if (n < 0 || n > room) {
            return moe_error_set(err, MOE_ERR_INTERNAL, "rank %d announced %d rows, more than "
                                 "the %lld %s of the receive buffer", s, n, (long long)room,
                                 ctx->upto ? "of its place" : "left");
        }
        ctx->recv_rows[s] = ctx->recv_pairs[s] = n;
        ctx->recv_displs[s] = at;
        row += n;
    }
    layer_cut_chunks(ctx, true);
    if (ctx->dedup) {
        int bad = moe_plan_pairs_read(&ctx->pairs, ctx->recv_counts, ctx->msg_words, nl,
                                      ctx->recv_displs, ctx->chunk_recv_displs,
                                      ctx->chunk_recv_rows);
        if (bad >= 0) {
            return moe_error_set(err, MOE_ERR_INTERNAL, "rank %d's counts message does not "
                                 "fit its rows (a row out of its block or of order, or more "
                                 "pairs than the buffers hold)", bad);
        }
        for (int s = 0; s < W; s++) {
            ctx->recv_pairs[s] = nl > 0 ? (int)ctx->pairs.tot[s] : 0;
        }
    }
    return MOE_OK;
}

/* Whether this rank's phases book its wait for its sends in the combine: a rank with no
 * expert in the layer (the master) receives nothing in the dispatch, so what it waits for
 * after posting its counts and rows is the expert ranks taking them (Open MPI's shared
 * memory ends a send when the receiver takes the message, and an expert rank takes the next
 * layer's after its combine and a wake-up): waiting for the expert ranks, which the combine
 * books as such, not the dispatch's moving bytes (decode, master routing: 0.6-1.1 ms a
 * layer, the headline's exchange 18% of an 8-token step where the expert ranks moved rows
 * 3% of theirs). Its shared experts run first, in its expert phase; the waits keep their
 * place before the combine's (waiting for the sends with the combine measured slower at
 * decode). Host transports only. */
static bool layer_books_sends_late(const moe_layer_ctx_t *ctx)
{
    return ctx->layer_local == 0 && ctx->io.host_transport;
}

/* The counts go out first (so receivers can size their blocks); while they travel the rows
 * are laid out in send order and chunk 0's are sent (its receives follow in the pipeline:
 * start_dispatch; upto: they are posted right away, each source's into its place); then
 * the counts received give the receive blocks, cut into chunks. */
static moe_status_t layer_prepare_rows(moe_layer_ctx_t *ctx, const float *x,
                                       const void **after, moe_error_t *err)
{
    moe_status_t st = counts_post(ctx, err);
    if (st != MOE_OK) { /* those posted: dropped, as a failed wait's */
        counts_drop(ctx, ctx->count_reqs_n);
        ctx->count_reqs_n = 0;
        return st;
    }
    /* The step's plan, as the back-end reads it: the send side now, the receive side once
     * the counts are in. */
    moe_expert_io_t *io = &ctx->io;
    io->tokens = ctx->plan.tokens;
    io->num_send = ctx->plan.num_send;
    io->send_token = ctx->plan.send_token;
    io->slot_pos = ctx->plan.slot_pos;
    io->token_rows = ctx->plan.token_rows;
    io->rows_per_token = ctx->plan.rows_per_token;
    layer_cut_chunks(ctx, false);
    st = moe_expert_backend_permute(&ctx->backend, x, after, err);
    if (st == MOE_OK) {
        st = moe_transport_start_sends(ctx->transport, 0, ctx->io.xsend, ctx->chunk_send_rows,
                                       ctx->chunk_send_displs,
                                       ctx->upto ? ctx->each_send : NULL, *after, err);
    }
    if (st == MOE_OK && ctx->upto) { /* the receives too, before the counts are in */
        st = layer_upto_recvs(ctx, ctx->chunk_send_rows[ctx->rank], err);
    }
    ctx->posted_ns = moe_now_ns();
    if (st != MOE_OK || !layer_books_sends_late(ctx)) { /* else none to receive: its sends
                                                          * are awaited in layer_pipeline */
        st = counts_settle(ctx, st, err);
    }
    if (st == MOE_OK) {
        st = layer_recv_blocks(ctx, err);
    }
    io->row_pairs = ctx->pairs.row_pairs;
    io->chunk_recv_rows = ctx->chunk_recv_rows;
    io->chunk_recv_displs = ctx->chunk_recv_displs;
    if (st != MOE_OK && ctx->transport->xfer[0].active) {
        moe_transport_cancel(ctx->transport, 0); /* chunk 0's rows sent, never received */
    }
    return st;
}

/* Chunk c's dispatch; chunk 0's rows went out in layer_prepare_rows: its receives now
 * (upto: they were posted there too). */
static moe_status_t start_dispatch(moe_layer_ctx_t *ctx, int c, const void *after,
                                   moe_error_t *err)
{
    int i = c * ctx->world_size;
    if (c == 0) {
        return ctx->upto ? MOE_OK
                         : moe_transport_start_recvs(ctx->transport, 0, ctx->io.xrecv,
                                                     ctx->chunk_recv_rows,
                                                     ctx->chunk_recv_displs, NULL, err);
    }
    return moe_transport_start(ctx->transport, c, ctx->io.xsend, ctx->chunk_send_rows + i,
                               ctx->chunk_send_displs + i, ctx->io.xrecv,
                               ctx->chunk_recv_rows + i, ctx->chunk_recv_displs + i, after, err);
}

static moe_status_t start_combine(moe_layer_ctx_t *ctx, int c, const void *after,
                                  moe_error_t *err)
{
    int i = c * ctx->world_size;
    return moe_transport_start(ctx->transport, ctx->chunks + c, ctx->io.xback,
                               ctx->chunk_recv_rows + i, ctx->chunk_recv_displs + i,
                               ctx->io.xret, ctx->chunk_send_rows + i,
                               ctx->chunk_send_displs + i, after, err);
}

/* Local expert le's rows of chunk c: from each source s the part of its block [a, b)
 * inside the chunk's piece [lo, hi) of s's block, into ctx->src_from / src_rows. */
static int64_t layer_expert_rows(moe_layer_ctx_t *ctx, int le, int c)
{
    int W = ctx->world_size, nl = ctx->layer_local;
    int64_t total = 0;
    for (int s = 0; s < W; s++) {
        int64_t a = ctx->recv_displs[s];
        for (int e = 0; e < le; e++) {
            a += ctx->recv_counts[s * nl + e];
        }
        int64_t b = a + ctx->recv_counts[s * nl + le];
        int64_t lo = ctx->chunk_recv_displs[c * W + s];
        int64_t hi = lo + ctx->chunk_recv_rows[c * W + s];
        int64_t from = a > lo ? a : lo, n = (b < hi ? b : hi) - from;
        ctx->src_from[s] = from;
        ctx->src_rows[s] = n > 0 ? n : 0;
        total += ctx->src_rows[s];
    }
    return total;
}

/* Every local expert over chunk c, each call recorded (host times; a device back-end
 * corrects them in finish). */
static moe_status_t layer_chunk_experts(moe_layer_ctx_t *ctx, int layer, int c,
                                        moe_error_t *err)
{
    moe_layer_record_t *rec = &ctx->rec;
    for (int le = 0; le < ctx->layer_local; le++) {
        if (moe_stop_requested()) { /* between expert calls: react within one call */
            return moe_error_set(err, MOE_ERR_INTERRUPTED, "stop requested during the experts");
        }
        const moe_plan_pairs_t *pp = &ctx->pairs;
        int32_t first = ctx->dedup ? pp->off[le * ctx->chunks + c] : 0;
        int64_t rows = ctx->dedup ? pp->off[le * ctx->chunks + c + 1] - first
                                  : layer_expert_rows(ctx, le, c);
        if (rows == 0) {
            continue;
        }
        int64_t b = moe_now_ns();
        moe_status_t st =
            ctx->dedup ? moe_expert_backend_pairs(&ctx->backend, layer, le, rec->num_calls,
                                                  pp->row + first, pp->w + first, rows, err)
                       : moe_expert_backend_expert(&ctx->backend, layer, le, rec->num_calls,
                                                   ctx->src_from, ctx->src_rows, rows, err);
        int64_t e = moe_now_ns();
        if (st != MOE_OK) {
            return st;
        }
        rec->expert_rows[le] += rows;
        rec->expert_ns[le] += e - b;
        rec->calls[rec->num_calls++] = (moe_prof_call_t){
            .local = le, .chunk = c, .rows = rows, .begin_ns = b, .end_ns = e};
    }
    return MOE_OK;
}

/* The exchanges' spans and per-peer waits, once every slot has completed. */
static void layer_record_exchanges(moe_layer_ctx_t *ctx)
{
    moe_layer_record_t *rec = &ctx->rec;
    const moe_transport_t *t = ctx->transport;
    int W = ctx->world_size, N = ctx->chunks;
    memset(rec->peer_wait_ns, 0, sizeof(int64_t) * (size_t)W);
    rec->num_spans = 0;
    for (int slot = 0; slot < 2 * N; slot++) {
        const moe_xfer_t *x = &t->xfer[slot];
        int c = slot % N, combine = slot >= N;
        /* dispatch: rows come from the senders; combine: back from the expert ranks */
        const int *rows_in = combine ? ctx->chunk_send_rows + c * W : ctx->chunk_recv_rows + c * W;
        for (int p = 0; p < W; p++) {
            if (rows_in[p] > 0) {
                rec->peer_wait_ns[p] += x->peer_done_ns[p] - x->begin_ns;
            }
        }
        rec->spans[rec->num_spans++] = (moe_prof_span_t){
            .kind = combine ? MOE_PROF_SPAN_COMBINE : MOE_PROF_SPAN_DISPATCH,
            .chunk = c, .begin_ns = x->begin_ns, .end_ns = x->end_ns};
    }
}

/* The shared experts over this rank's tokens while chunk 0's rows travel. */
static moe_status_t layer_shared(moe_layer_ctx_t *ctx, const float *x, int64_t tokens,
                                 int layer, moe_error_t *err)
{
    moe_layer_record_t *rec = &ctx->rec;
    moe_expert_backend_t *be = &ctx->backend;
    if (tokens == 0 || ctx->weights->shared_ffn == 0 || !moe_expert_backend_has_shared(be)) {
        return MOE_OK;
    }
    rec->shared_begin_ns = moe_now_ns();
    moe_status_t st = moe_expert_backend_shared(be, layer, x, tokens, err);
    rec->shared_end_ns = moe_now_ns();
    rec->shared_rows = tokens;
    return st;
}

/* Dispatch, experts and combine, chunk by chunk (see moe_layer.h). */
static moe_status_t layer_pipeline(moe_layer_ctx_t *ctx, const float *x, int64_t tokens,
                                   const void *permuted, int64_t step, int layer,
                                   moe_error_t *err)
{
    moe_layer_record_t *rec = &ctx->rec;
    moe_expert_backend_t *be = &ctx->backend;
    int N = ctx->chunks;
    bool late = layer_books_sends_late(ctx);
    moe_status_t st = start_dispatch(ctx, 0, permuted, err);
    if (st == MOE_OK) {
        st = layer_shared(ctx, x, tokens, layer, err);
    }
    int64_t shared_done = moe_now_ns();
    if (late) {
        st = counts_settle(ctx, st, err);
    }
    for (int c = 0; c < N && st == MOE_OK; c++) {
        st = moe_transport_wait(ctx->transport, c, "the row dispatch", err);
        if (st == MOE_OK) {
            st = moe_expert_backend_arrived(be, c, err);
        }
        if (c == 0) {
            rec->phase_end_ns[MOE_PHASE_DISPATCH] = rec->phase_begin_ns[MOE_PHASE_EXPERT] =
                late ? ctx->posted_ns : moe_now_ns();
            moe_wait_set_where(step, layer, "expert");
        }
        if (st == MOE_OK && c + 1 < N) {
            st = start_dispatch(ctx, c + 1, permuted, err);
        }
        if (st == MOE_OK) {
            st = layer_chunk_experts(ctx, layer, c, err);
        }
        if (c == 0 && ctx->test_expert_delay_ns > 0 && ctx->layer_local > 0) {
            /* MOED_TEST_EXPERT_DELAY_MS: slow experts (before their rows go back) */
            moe_testctl_sleep(MOE_TESTCTL_EXPERT_DELAY, ctx->rank);
        }
        const void *computed = NULL;
        if (st == MOE_OK) {
            st = moe_expert_backend_computed(be, c, &computed, err);
        }
        if (st == MOE_OK) {
            st = start_combine(ctx, c, computed, err);
        }
    }
    rec->phase_end_ns[MOE_PHASE_EXPERT] = rec->phase_begin_ns[MOE_PHASE_COMBINE] =
        late ? shared_done : moe_now_ns();
    moe_wait_set_where(step, layer, "combine");
    int64_t begin = layer_expect_combine(ctx, layer);
    for (int c = 0; c < N && st == MOE_OK; c++) {
        st = moe_transport_wait(ctx->transport, N + c, "the row combine", err);
    }
    layer_combine_waited(ctx, layer, begin, st);
    for (int slot = 0; slot < 2 * N && st != MOE_OK; slot++) {
        if (ctx->transport->xfer[slot].active) {
            moe_transport_cancel(ctx->transport, slot);
        }
    }
    rec->phase_end_ns[MOE_PHASE_COMBINE] = moe_now_ns();
    return st;
}

moe_status_t moe_layer_forward(moe_layer_ctx_t *ctx, float *x, int64_t tokens, int64_t step,
                               int layer, moe_error_t *err)
{
    moe_layer_record_t *rec = &ctx->rec;
    memset(rec->expert_rows, 0, sizeof(int64_t) * (size_t)ctx->num_local);
    memset(rec->expert_ns, 0, sizeof(int64_t) * (size_t)ctx->num_local);
    rec->num_calls = 0;
    rec->num_spans = 0;
    rec->shared_rows = 0;
    rec->shared_begin_ns = rec->shared_end_ns = 0;
    ctx->io.shared_ran = false;
    if (ctx->cfg->placement_per_layer) {
        layer_select(ctx, layer);
    }
    if (ctx->test_touch && layer == 0) { /* MOED_TEST_TOUCH_MIB: a peak between samples */
        moe_testctl_touch(ctx->rank);
    }
    moe_wait_set_where(step, layer, "gate");
    moe_nvtx_push("gate");
    rec->phase_begin_ns[MOE_PHASE_GATE] = moe_now_ns();
    moe_status_t st = layer_gate(ctx, layer, x, tokens, step, err);
    rec->phase_end_ns[MOE_PHASE_GATE] = rec->phase_begin_ns[MOE_PHASE_DISPATCH] = moe_now_ns();
    moe_nvtx_pop();
    moe_wait_set_where(step, layer, "dispatch");
    moe_nvtx_push("exchange and experts");
    const void *permuted = NULL;
    if (st == MOE_OK) {
        st = layer_plan(ctx, layer, tokens, err);
    }
    if (st == MOE_OK) {
        st = layer_prepare_rows(ctx, x, &permuted, err);
    }
    if (st == MOE_OK) {
        st = layer_pipeline(ctx, x, tokens, permuted, step, layer, err);
    } else {
        int64_t now = moe_now_ns();
        for (int ph = MOE_PHASE_DISPATCH; ph <= MOE_PHASE_COMBINE; ph++) {
            rec->phase_begin_ns[ph] = rec->phase_end_ns[ph] = now;
        }
    }
    moe_nvtx_pop();
    moe_nvtx_push("merge");
    rec->phase_begin_ns[MOE_PHASE_MERGE] = moe_now_ns();
    if (st == MOE_OK) {
        layer_record_exchanges(ctx);
        st = moe_expert_backend_merge(&ctx->backend, x, tokens, err);
    }
    if (st == MOE_OK) {
        st = moe_expert_backend_finish(&ctx->backend, rec->calls, rec->num_calls,
                                       rec->expert_ns, err);
    }
    rec->phase_end_ns[MOE_PHASE_MERGE] = moe_now_ns();
    moe_nvtx_pop();
    return st;
}

