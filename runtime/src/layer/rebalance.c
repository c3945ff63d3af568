/* Online rebalancing: see rebalance.h for the steps. Runs between two steps, so it may
 * allocate (the hot path does not). */
#include "layer/rebalance.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/clock.h"
#include "moe_config/eplb.h"
#include "expert/backend.h"
#include "moe/mpi_check.h"
#include "moe/testctl.h"
#include "transport/wait.h"

enum { REBALANCE_TAG = 4251 };
/* A new placement is taken only when it cuts the predicted max/mean by this share or more:
 * below it, moving weights buys nothing measurable (a skewed run's later rebalances
 * predicted 1.02 -> 1.01 and moved experts for it). */
#define REBALANCE_MIN_GAIN 0.02

/* One copy of expert `expert` of layer `layer` moving from rank src to rank dst. */
typedef struct rb_move {
    int layer, expert, src, dst;
    moe_expert_weights_t got; /* on dst: the buffers it arrives in */
} rb_move_t;

/* Everything one rebalance computes, the same on every rank. */
typedef struct rb_plan {
    int n;                     /* expert ranks */
    int32_t ranks[MOE_MAX_RANKS];
    moe_cfg_replica_t *ent;    /* the new placement.layers entries */
    int num_ent;
    rb_move_t *moves;
    int num_moves;
} rb_plan_t;

static int rb_edge_cmp(const void *pa, const void *pb)
{
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return (a > b) - (a < b);
}

/* The ranges' edges: 0, T and every ceil(j T / n) for 1 <= j < n <= rb->copies, ascending
 * and once each, so that each range lies within one copy's share for any such n. */
static moe_status_t rb_edges(moe_rebalance_t *rb, moe_error_t *err)
{
    int c = rb->copies, m = 2;
    rb->edge = calloc((size_t)(2 + c * (c - 1) / 2), sizeof(int64_t));
    if (rb->edge == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the rebalancing ranges");
    }
    rb->edge[1] = rb->T;
    for (int64_t n = 2; n <= c; n++) {
        for (int64_t j = 1; j < n; j++) {
            rb->edge[m++] = (j * rb->T + n - 1) / n;
        }
    }
    qsort(rb->edge, (size_t)m, sizeof(int64_t), rb_edge_cmp);
    int k = 1;
    for (int i = 1; i < m; i++) {
        if (rb->edge[i] != rb->edge[k - 1]) {
            rb->edge[k++] = rb->edge[i];
        }
    }
    rb->B = k - 1;
    return MOE_OK;
}

moe_status_t moe_rebalance_init(moe_rebalance_t *rb, const moe_config_t *cfg, int world,
                                moe_error_t *err)
{
    memset(rb, 0, sizeof(*rb));
    rb->L = (int)cfg->num_layers;
    rb->E = (int)cfg->num_experts;
    rb->W = world;
    rb->T = cfg->tokens_per_step > 0 ? cfg->tokens_per_step : 1;
    int64_t c = 1 + cfg->redundant_experts;
    c = c < world ? c : world;
    rb->copies = (int)(c < MOE_REBALANCE_EXACT_COPIES ? c : MOE_REBALANCE_EXACT_COPIES);
    moe_status_t st = rb_edges(rb, err);
    if (st != MOE_OK) {
        return st;
    }
    size_t n = (size_t)rb->L * (size_t)rb->E * (size_t)rb->B + (size_t)world;
    rb->window = calloc(n, sizeof(int64_t));
    rb->sum = calloc(n, sizeof(int64_t));
    if (rb->window == NULL || rb->sum == NULL) {
        moe_rebalance_destroy(rb);
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the rebalancing counts");
    }
    return MOE_OK;
}

void moe_rebalance_destroy(moe_rebalance_t *rb)
{
    if (rb != NULL) {
        free(rb->edge);
        free(rb->window);
        free(rb->sum);
        memset(rb, 0, sizeof(*rb));
    }
}

/* Where rank r's rows are counted in the window (after every (layer, expert, range)). */
static size_t rb_rows_at(const moe_rebalance_t *rb, int r)
{
    return (size_t)rb->L * (size_t)rb->E * (size_t)rb->B + (size_t)r;
}

void moe_rebalance_account(moe_rebalance_t *rb, int layer, const moe_plan_t *plan,
                           const int32_t *topk_idx, int64_t first_token,
                           const int64_t *expert_rows, int num_local, int rank)
{
    int64_t *w = rb->window + (size_t)layer * (size_t)rb->E * (size_t)rb->B;
    int64_t pairs = plan->tokens * plan->top_k;
    int b = 0;
    for (int64_t i = 0; i < pairs; i++) {
        if (plan->slot_pos[i] < 0) {
            continue; /* dropped by capacity */
        }
        int64_t g = first_token + i / plan->top_k; /* ascending: the range only moves on */
        while (b + 1 < rb->B && g >= rb->edge[b + 1]) {
            b++;
        }
        w[(size_t)topk_idx[i] * (size_t)rb->B + (size_t)b]++;
    }
    for (int le = 0; le < num_local; le++) {
        rb->window[rb_rows_at(rb, rank)] += expert_rows[le];
    }
}

/* Step 1: every rank's window summed onto every rank; the window starts again. */
static moe_status_t rb_reduce(moe_rebalance_t *rb, MPI_Comm comm, moe_error_t *err)
{
    int n = (int)rb_rows_at(rb, rb->W);
    MPI_Request req;
    moe_status_t st = MOE_MPI(MPI_Iallreduce(rb->window, rb->sum, n, MPI_INT64_T, MPI_SUM,
                                             comm, &req), err);
    if (st == MOE_OK) {
        st = moe_wait_request(&req, "the rebalancing counts", err);
    }
    memset(rb->window, 0, sizeof(int64_t) * (size_t)n);
    return st;
}

/* Kept choices of (layer l, expert e) over the window: its ranges summed. */
static int64_t rb_kept(const moe_rebalance_t *rb, int l, int e)
{
    const int64_t *c = rb->sum + ((size_t)l * (size_t)rb->E + (size_t)e) * (size_t)rb->B;
    int64_t k = 0;
    for (int b = 0; b < rb->B; b++) {
        k += c[b];
    }
    return k;
}

/* Range b's choices of one expert onto its n copies (holder[j]: copy j's index into the
 * loads), as the dispatch splits them: copy j takes global tokens [ceil(j T / n),
 * ceil((j + 1) T / n)). A range within one copy's share goes to it whole (always, for n up
 * to rb->copies); one spanning several is shared in proportion to the tokens of each. */
static void rb_share(const moe_rebalance_t *rb, int b, int64_t cnt, const int *holder, int n,
                     double *load)
{
    int64_t lo = rb->edge[b], hi = rb->edge[b + 1], T = rb->T;
    int64_t j0 = lo * n / T, j1 = (hi - 1) * n / T;
    for (int64_t j = j0; j <= j1 && j < n; j++) {
        int64_t a = (j * T + n - 1) / n, z = ((j + 1) * T + n - 1) / n;
        a = a > lo ? a : lo;
        z = z < hi ? z : hi;
        double share = j0 == j1 ? 1.0 : (double)(z - a) / (double)(hi - lo);
        load[holder[j]] += (double)cnt * share;
    }
}

/* Layer l's predicted rows per expert rank under host [n * E] (the packing's answer), added
 * to total [n]: each expert's copies in rank order, as the placement entries list them.
 * False when an expert has more copies than the ranges resolve (an estimate). */
static bool rb_predict(const moe_rebalance_t *rb, int l, const uint8_t *host, int n,
                       double *total)
{
    int E = rb->E, holder[MOE_MAX_RANKS];
    bool exact = true;
    for (int e = 0; e < E; e++) {
        int c = 0;
        for (int j = 0; j < n; j++) {
            if (host[(size_t)j * (size_t)E + (size_t)e]) {
                holder[c++] = j;
            }
        }
        exact = exact && c <= rb->copies;
        const int64_t *cnt = rb->sum + ((size_t)l * (size_t)E + (size_t)e) * (size_t)rb->B;
        for (int b = 0; b < rb->B && c > 0; b++) {
            if (cnt[b] > 0) {
                rb_share(rb, b, cnt[b], holder, c, total);
            }
        }
    }
    return exact;
}

/* Step 2: the EPLB placement of every layer into p->ent; *after the predicted max/mean of
 * the expert ranks' rows over all layers (rb_predict), *estimated whether it is one. */
static moe_status_t rb_place(const moe_rebalance_t *rb, const moe_config_t *live, rb_plan_t *p,
                             double *after, bool *estimated, moe_error_t *err)
{
    int E = rb->E, n = p->n;
    double *loads = calloc((size_t)E, sizeof(double));
    double *load = calloc((size_t)n, sizeof(double)), *total = calloc((size_t)n, sizeof(double));
    bool *holds = calloc((size_t)n, sizeof(bool)); /* a rank holding an expert of any layer */
    uint8_t *host = calloc((size_t)n * (size_t)E, 1);
    int32_t *node = calloc((size_t)n, sizeof(int32_t));
    p->ent = calloc((size_t)rb->L * (size_t)(E + live->redundant_experts), sizeof(*p->ent));
    moe_status_t st = loads && load && total && holds && host && node && p->ent
                          ? MOE_OK
                          : moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the placement");
    for (int l = 0; l < rb->L && st == MOE_OK; l++) {
        for (int e = 0; e < E; e++) {
            loads[e] = (double)rb_kept(rb, l, e);
        }
        moe_eplb_in_t in = {.num_experts = E, .loads = loads, .num_ranks = n,
                            .ranks = p->ranks, .node = node,
                            .redundant = (int)live->redundant_experts};
        moe_eplb_out_t out = {.host = host, .rank_load = load};
        st = moe_eplb_place(&in, &out, err);
        if (st == MOE_OK && !rb_predict(rb, l, host, n, total)) {
            *estimated = true;
        }
        for (int j = 0; j < n && st == MOE_OK; j++) {
            for (int e = 0; e < E; e++) {
                if (host[(size_t)j * (size_t)E + (size_t)e]) {
                    p->ent[p->num_ent++] = (moe_cfg_replica_t){
                        .set = (uint16_t)(l + 1), .expert = (uint16_t)e, .rank = p->ranks[j]};
                    holds[j] = true;
                }
            }
        }
    }
    *after = st == MOE_OK ? moe_eplb_max_mean_held(total, holds, n) : 0.0;
    free(loads);
    free(load);
    free(total);
    free(holds);
    free(host);
    free(node);
    return st;
}

static bool rb_holds(const int32_t *ranks, int n, int32_t r)
{
    for (int i = 0; i < n; i++) {
        if (ranks[i] == r) {
            return true;
        }
    }
    return false;
}

/* The moves: every (layer, expert, rank) of the new placement the rank lacks now, from
 * old holder k mod holders for the k-th such copy of that expert (spreads the sending). */
static moe_status_t rb_moves(const moe_config_t *live, rb_plan_t *p, moe_error_t *err)
{
    int32_t oldr[MOE_MAX_RANKS];
    /* the config's order: an expert's copies adjacent, a rank's experts ascending */
    qsort(p->ent, (size_t)p->num_ent, sizeof(*p->ent), moe_cfg_replica_cmp);
    p->moves = calloc((size_t)(p->num_ent > 0 ? p->num_ent : 1), sizeof(*p->moves));
    if (p->moves == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the move list");
    }
    for (int i = 0, k = 0; i < p->num_ent; i++) {
        const moe_cfg_replica_t *x = &p->ent[i];
        int l = x->set - 1, nold = moe_cfg_replicas_of(live, l, x->expert, oldr);
        k = i > 0 && p->ent[i - 1].set == x->set && p->ent[i - 1].expert == x->expert ? k : 0;
        if (!rb_holds(oldr, nold, x->rank) && nold > 0) {
            p->moves[p->num_moves++] = (rb_move_t){
                .layer = l, .expert = x->expert, .src = oldr[k++ % nold], .dst = x->rank};
        }
    }
    return MOE_OK;
}

static moe_expert_weights_t *rb_find(moe_layer_weights_t *lw, int expert)
{
    for (int i = 0; i < lw->num_local; i++) {
        if (lw->experts[i].id == expert) {
            return &lw->experts[i];
        }
    }
    return NULL;
}

/* Most arrays of one expert as held: rb_parts' count. */
#define RB_PARTS 6

/* The arrays of one expert as held (BF16 matrices when the rank holds BF16 plain copies;
 * FP8 or MXFP4 codes and scales as bytes; F32 biases only with swiglu_oai): addresses,
 * lengths and MPI types. */
static int rb_parts(const moe_config_t *cfg, const moe_weights_t *w, moe_expert_weights_t *ew,
                    void *ptr[RB_PARTS], int64_t len[RB_PARTS], MPI_Datatype type[RB_PARTS])
{
    int64_t H = cfg->hidden_dim, F = cfg->ffn_dim;
    if (ew->w13_q != NULL) {
        size_t b[4];
        moe_weights_quant_bytes(cfg, w->store, w->fp8_block[1], b);
        void *q[4] = {ew->w13_q, ew->w13_s, ew->w2_q, ew->w2_s};
        for (int i = 0; i < 4; i++) {
            ptr[i] = q[i];
            len[i] = (int64_t)b[i];
            type[i] = MPI_BYTE;
        }
        ptr[4] = ew->b13;
        len[4] = 2 * F;
        ptr[5] = ew->b2;
        len[5] = H;
        type[4] = type[5] = MPI_FLOAT;
        return ew->b13 != NULL ? 6 : 4;
    }
    bool bf16 = ew->w13_bf16 != NULL;
    ptr[0] = bf16 ? (void *)ew->w13_bf16 : (void *)ew->w13;
    len[0] = (cfg->activation == MOE_ACT_GELU ? F : 2 * F) * H;
    ptr[1] = bf16 ? (void *)ew->w2_bf16 : (void *)ew->w2;
    len[1] = H * F;
    type[0] = type[1] = bf16 ? MPI_UINT16_T : MPI_FLOAT;
    ptr[2] = ew->b13;
    len[2] = 2 * F;
    ptr[3] = ew->b2;
    len[3] = H;
    type[2] = type[3] = MPI_FLOAT;
    return ew->b13 != NULL ? 4 : 2;
}

/* Step 3's buffers: every move this rank receives gets its own expert. Agreed (a rank
 * that cannot allocate fails every rank before any weight moves). */
static moe_status_t rb_alloc(const moe_config_t *live, const moe_weights_t *w, rb_plan_t *p,
                             int rank, MPI_Comm comm, moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    for (int i = 0; i < p->num_moves && st == MOE_OK; i++) {
        rb_move_t *m = &p->moves[i];
        if (m->dst == rank) {
            st = moe_weights_expert_alloc(live, m->expert, w->store, w->fp8_block[1], &m->got,
                                          err);
        }
    }
    int mine = st != MOE_OK, any = 0;
    MPI_Request req;
    moe_status_t mst = MOE_MPI(MPI_Iallreduce(&mine, &any, 1, MPI_INT, MPI_MAX, comm, &req),
                               st == MOE_OK ? err : NULL);
    if (mst == MOE_OK) {
        mst = moe_wait_request(&req, "the rebalancing agreement", st == MOE_OK ? err : NULL);
    }
    if (st == MOE_OK && mst == MOE_OK && any) {
        st = moe_error_set(err, MOE_ERR_NO_MEMORY, "another rank could not allocate the "
                           "experts it gains in the rebalance");
    }
    return st != MOE_OK ? st : mst;
}

/* Step 3: the weights move. Both ends post in move-list order with one tag, so MPI's
 * ordering between a pair of ranks matches every message with its part. */
static moe_status_t rb_transfer(const moe_config_t *live, moe_weights_t *w, rb_plan_t *p,
                                int rank, MPI_Comm comm, moe_error_t *err)
{
    MPI_Request *reqs = calloc((size_t)(RB_PARTS * p->num_moves + 1), sizeof(MPI_Request));
    int *peers = calloc((size_t)(RB_PARTS * p->num_moves + 1), sizeof(int));
    moe_status_t st = reqs && peers ? MOE_OK
                                    : moe_error_set(err, MOE_ERR_NO_MEMORY,
                                                    "cannot allocate the move requests");
    int nreq = 0;
    for (int i = 0; i < p->num_moves && st == MOE_OK; i++) {
        rb_move_t *m = &p->moves[i];
        moe_expert_weights_t *ew = m->dst == rank ? &m->got
                                   : m->src == rank ? rb_find(&w->layers[m->layer], m->expert)
                                                    : NULL;
        if (ew == NULL && m->src == rank) {
            st = moe_error_set(err, MOE_ERR_INTERNAL, "rank %d should send expert %d of layer "
                               "%d but does not hold it", rank, m->expert, m->layer);
        }
        void *ptr[RB_PARTS];
        int64_t len[RB_PARTS];
        MPI_Datatype type[RB_PARTS];
        int parts = ew != NULL ? rb_parts(live, w, ew, ptr, len, type) : 0;
        for (int k = 0; k < parts && st == MOE_OK; k++) {
            if (len[k] > INT_MAX) {
                st = moe_error_set(err, MOE_ERR_INVALID_ARG, "an expert tensor of %lld elements "
                                   "is too large to move in one message", (long long)len[k]);
            } else if (m->dst == rank) {
                st = MOE_MPI(MPI_Irecv(ptr[k], (int)len[k], type[k], m->src, REBALANCE_TAG,
                                       comm, &reqs[nreq]), err);
                peers[nreq++] = m->src;
            } else {
                st = MOE_MPI(MPI_Isend(ptr[k], (int)len[k], type[k], m->dst, REBALANCE_TAG,
                                       comm, &reqs[nreq]), err);
                peers[nreq++] = m->dst;
            }
        }
    }
    if (st == MOE_OK) {
        st = moe_wait_all(reqs, peers, nreq, "the expert weights' moves (rebalancing)", err);
    }
    free(reqs);
    free(peers);
    return st;
}

/* Step 4 on this rank's weights: each layer's new table (ids ascending, as the placement
 * lists them), kept copies moved over, arrived ones taken, the rest freed. */
static moe_status_t rb_switch_weights(moe_weights_t *w, rb_plan_t *p, int rank, moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    size_t held = 0;
    for (int l = 0; l < w->num_layers && st == MOE_OK; l++) {
        moe_layer_weights_t *lw = &w->layers[l];
        int n = 0;
        for (int i = 0; i < p->num_ent; i++) {
            n += p->ent[i].set == l + 1 && p->ent[i].rank == rank;
        }
        moe_expert_weights_t *nx = calloc((size_t)(n > 0 ? n : 1), sizeof(*nx));
        if (nx == NULL) {
            return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate an expert table");
        }
        int k = 0;
        for (int i = 0; i < p->num_ent; i++) {
            const moe_cfg_replica_t *x = &p->ent[i];
            if (x->set != l + 1 || x->rank != rank) {
                continue;
            }
            moe_expert_weights_t *old = rb_find(lw, x->expert);
            for (int j = 0; old == NULL && j < p->num_moves; j++) {
                rb_move_t *m = &p->moves[j];
                if (m->layer == l && m->expert == x->expert && m->dst == rank) {
                    old = &m->got;
                }
            }
            nx[k++] = *old; /* a copy held before or one that arrived: rb_moves saw to it */
            memset(old, 0, sizeof(*old));
            old->id = -1; /* taken: not found again, not freed below */
        }
        for (int i = 0; i < lw->num_local; i++) {
            moe_weights_expert_free(&lw->experts[i]); /* the copies it no longer holds */
        }
        free(lw->experts);
        lw->experts = nx;
        lw->num_local = n;
        held += (size_t)n;
    }
    w->expert_bytes = held * w->bytes_per_expert;
    return st;
}

/* MOE_TESTCTL_REBALANCE_DELAY (fault injection for tests/mpi/profiler.sh): that rank's
 * moves take ms longer, asleep (a slow or frozen receiver of known size); the pause phase
 * "rebalance" (tests/mpi/faults.sh) stops it there, its moves arrived, before the switch. */
static void rb_test_delay(int rank)
{
    moe_testctl_pause_here(rank, "rebalance");
    moe_testctl_sleep(MOE_TESTCTL_REBALANCE_DELAY, rank);
}

/* Step 5: the critical path from every rank's times. The reduction ends when the last rank
 * arrives, so the least reduction is that rank's (the others waited for it), and the work
 * after it ends with the slowest rank's. One reduction of (time, rank) pairs: MAXLOC of
 * minus the reduction and of the work. */
static moe_status_t rb_critical(MPI_Comm comm, int rank, int64_t reduce_ns, int64_t work_ns,
                                moe_rebalance_result_t *res, moe_error_t *err)
{
    struct {
        double v;
        int rank;
    } mine[2] = {{-(double)reduce_ns, rank}, {(double)work_ns, rank}}, all[2];
    MPI_Request req;
    moe_status_t st = MOE_MPI(MPI_Iallreduce(mine, all, 2, MPI_DOUBLE_INT, MPI_MAXLOC, comm,
                                             &req), err);
    if (st == MOE_OK) {
        st = moe_wait_request(&req, "the rebalancing's time", err);
    }
    if (st == MOE_OK) {
        res->critical_ns = (int64_t)(-all[0].v + all[1].v);
        res->slowest_rank = all[1].rank;
    }
    return st;
}

/* The ranks that hold an expert of some layer in the live placement, ascending, into
 * holders; their number. Not moe_cfg_expert_ranks: a written placement may give the master
 * experts in master routing, and those rows count in the imbalance as any rank's. */
static int rb_holders(const moe_config_t *live, int L, int W, int32_t *holders)
{
    bool holds[MOE_MAX_RANKS] = {false};
    for (int l = 0; l < L; l++) {
        int n = 0;
        const moe_cfg_replica_t *x = moe_cfg_layer_entries(live, l, &n);
        for (int i = 0; i < n; i++) {
            if (x[i].rank < W) {
                holds[x[i].rank] = true;
            }
        }
    }
    int k = 0;
    for (int r = 0; r < W; r++) {
        if (holds[r]) {
            holders[k++] = r;
        }
    }
    return k;
}

/* Whether the new placement p->ent is the live one: every layer's every expert on the same
 * ranks (entries are one a rank, so the same count all held means the same set). One pass
 * over the new entries and one over the experts: a live lookup (a layer's entries) each. */
static bool rb_unchanged(const moe_rebalance_t *rb, const moe_config_t *live, const rb_plan_t *p)
{
    int32_t oldr[MOE_MAX_RANKS];
    int *nnew = calloc((size_t)rb->L * (size_t)rb->E, sizeof(int));
    bool same = nnew != NULL;
    for (int i = 0; same && i < p->num_ent; i++) {
        const moe_cfg_replica_t *x = &p->ent[i];
        int l = x->set - 1;
        same = l >= 0 && l < rb->L && x->expert < rb->E &&
               rb_holds(oldr, moe_cfg_replicas_of(live, l, x->expert, oldr), x->rank);
        if (same) {
            nnew[(size_t)l * (size_t)rb->E + x->expert]++;
        }
    }
    for (int l = 0; same && l < rb->L; l++) {
        for (int e = 0; same && e < rb->E; e++) {
            same = nnew[(size_t)l * (size_t)rb->E + (size_t)e] ==
                   moe_cfg_replicas_of(live, l, e, NULL);
        }
    }
    free(nnew);
    return same;
}

static moe_status_t rb_run(moe_rebalance_t *rb, moe_config_t *live, moe_weights_t *w,
                           MPI_Comm comm, int rank, rb_plan_t *p, moe_rebalance_result_t *res,
                           moe_error_t *err)
{
    moe_status_t st = rb_reduce(rb, comm, err);
    res->reduced_ns = moe_now_ns();
    if (st != MOE_OK) {
        return st;
    }
    p->n = moe_cfg_expert_ranks(live, rb->W, p->ranks);
    int32_t holders[MOE_MAX_RANKS];
    int nh = rb_holders(live, rb->L, rb->W, holders);
    double rows[MOE_MAX_RANKS], kept = 0;
    for (int j = 0; j < nh; j++) {
        rows[j] = (double)rb->sum[rb_rows_at(rb, holders[j])];
    }
    for (size_t i = 0; i < rb_rows_at(rb, 0); i++) {
        kept += (double)rb->sum[i];
    }
    res->before = res->after = moe_eplb_max_mean(rows, nh);
    if (p->n < 2 || kept == 0) {
        return MOE_OK; /* nothing to balance: one expert rank, or no choice kept */
    }
    st = rb_place(rb, live, p, &res->after, &res->estimated, err);
    if (st == MOE_OK && (res->after > res->before * (1.0 - REBALANCE_MIN_GAIN) ||
                         rb_unchanged(rb, live, p))) {
        /* not worth moving weights, or the packing gave the placement the run has (its
         * prediction is then the measured rows, but over the expert ranks, where the
         * measure counts a master given experts too): the placement stays, and so does the
         * imbalance */
        res->after = res->before;
        res->estimated = false;
        return MOE_OK;
    }
    if (st == MOE_OK) {
        st = rb_moves(live, p, err);
    }
    if (st == MOE_OK) {
        st = rb_alloc(live, w, p, rank, comm, err);
    }
    if (st == MOE_OK) {
        st = rb_transfer(live, w, p, rank, comm, err);
        rb_test_delay(rank);
    }
    if (st == MOE_OK) {
        st = rb_switch_weights(w, p, rank, err);
    }
    if (st == MOE_OK && w->store == MOE_DTYPE_BF16 && live->device == MOE_DEVICE_CPU) {
        st = moe_expert_cpu_pack(live, w, err); /* the arrived experts, for their compute */
    }
    if (st == MOE_OK) {
        st = moe_cfg_set_layer_sets(live, p->ent, p->num_ent, err);
    }
    res->moved = p->num_moves;
    res->bytes = (int64_t)p->num_moves * (int64_t)w->bytes_per_expert;
    return st;
}

moe_status_t moe_rebalance_apply(moe_rebalance_t *rb, moe_config_t *live, moe_weights_t *w,
                                 MPI_Comm comm, int rank, moe_rebalance_result_t *res,
                                 moe_error_t *err)
{
    rb_plan_t *p = calloc(1, sizeof(*p));
    moe_rebalance_result_t r = {.begin_ns = moe_now_ns(), .slowest_rank = rank};
    moe_status_t st = p != NULL ? MOE_OK
                                : moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the plan");
    r.reduced_ns = r.begin_ns;
    if (st == MOE_OK) {
        st = rb_run(rb, live, w, comm, rank, p, &r, err);
    }
    if (st == MOE_OK) {
        st = rb_critical(comm, rank, r.reduced_ns - r.begin_ns, moe_now_ns() - r.reduced_ns, &r,
                         err);
    }
    for (int i = 0; p != NULL && i < p->num_moves; i++) {
        moe_weights_expert_free(&p->moves[i].got); /* what was not taken (errors) */
    }
    if (p != NULL) {
        free(p->ent);
        free(p->moves);
    }
    free(p);
    r.end_ns = moe_now_ns();
    if (st == MOE_OK) {
        *res = r;
    }
    return st;
}
