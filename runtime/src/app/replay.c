/* workload.routing (replay.h). */
#include "app/replay.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/log.h"
#include "moe/mpi_check.h"
#include "transport/wait.h"

/* "run.yaml:14:12: workload.routing": the key, after where the config writes its value. */
static void replay_key(const moe_config_t *cfg, char *out, size_t len)
{
    char where[MOE_PATH_MAX + 32];
    moe_cfg_mark_where(cfg, cfg->routing_mark, where, sizeof(where));
    snprintf(out, len, "%sworkload.routing", where);
}

moe_status_t moe_replay_open_failed(const moe_config_t *cfg, moe_status_t st, moe_error_t *err)
{
    char key[MOE_PATH_MAX + 64];
    replay_key(cfg, key, sizeof(key));
    moe_error_t inner = *err; /* the reader names the file; say which key brought it */
    return moe_error_set(err, st, "%s: %s", key, inner.msg);
}

moe_status_t moe_replay_check(const moe_config_t *cfg, const moe_routing_trace_t *tr, int *li,
                              moe_error_t *err)
{
    char key[MOE_PATH_MAX + 64];
    replay_key(cfg, key, sizeof(key));
    if (tr->num_experts != cfg->num_experts || tr->top_k != cfg->top_k) {
        return moe_error_set(err, MOE_ERR_FORMAT, "%s: %s: metadata num_experts %d and "
                             "top_k %d; the model has %lld experts, top-%lld", key, tr->path,
                             tr->num_experts, tr->top_k, (long long)cfg->num_experts,
                             (long long)cfg->top_k);
    }
    const char *fam = moe_cfg_family_name(cfg->family);
    if (!moe_routing_trace_fits_family(tr, fam)) {
        return moe_error_set(err, MOE_ERR_FORMAT, "%s: %s: metadata family %s; "
                             "the model is model.family %s: the trace's weights are %s's (its "
                             "normalisation and scaling), not this model's; replay a trace of "
                             "a %s model (with random weights, model.family: %s routes as the "
                             "trace's model did)", key, tr->path, tr->family, fam, tr->family,
                             fam, tr->family);
    }
    for (int l = 0; l < cfg->num_layers; l++) {
        li[l] = moe_routing_trace_layer(tr, cfg->layer_ids[l]);
        if (li[l] < 0) {
            return moe_error_set(err, MOE_ERR_FORMAT, "%s: %s: no tensor "
                                 "'layers.%d.topk_ids': the trace lacks decoder layer %d "
                                 "(moed layer %d); it holds layers %d to %d (%d layers)",
                                 key, tr->path, (int)cfg->layer_ids[l],
                                 (int)cfg->layer_ids[l], l, (int)tr->layer_ids[0],
                                 (int)tr->layer_ids[tr->num_layers - 1], tr->num_layers);
        }
    }
    if (tr->rows < cfg->tokens_per_step) {
        return moe_error_set(err, MOE_ERR_FORMAT, "%s: %s: %" PRId64 " rows (tokens) per "
                             "layer, fewer than one step of workload.tokens_per_step %lld",
                             key, tr->path, tr->rows,
                             (long long)cfg->tokens_per_step);
    }
    return MOE_OK;
}

/* Rank 0's read and checks. */
static moe_status_t replay_read(const moe_config_t *cfg, moe_replay_t *out, moe_error_t *err)
{
    moe_status_t st = moe_routing_trace_open(cfg->routing_trace, true, &out->tr, err);
    if (st != MOE_OK) {
        return moe_replay_open_failed(cfg, st, err);
    }
    return moe_replay_check(cfg, &out->tr, out->li, err);
}

/* What every rank needs to know of the trace: sizes, layers, source. */
typedef struct replay_head {
    int64_t num_layers, rows, num_experts, top_k, tokens_per_step, uniform;
    int32_t layer_ids[MOE_MAX_LAYER_IDS];
    int32_t li[MOE_MAX_LAYER_IDS];
    char path[MOE_ROUTING_PATH_MAX];
    char source[MOE_ROUTING_SOURCE_MAX];
} replay_head_t;

/* Pieces of at most 256 MiB: MPI counts are int. */
#define REPLAY_PIECE ((size_t)256 << 20)

static moe_status_t replay_bcast_bytes(void *buf, size_t len, MPI_Comm comm, moe_error_t *err)
{
    moe_status_t st = MOE_OK;
    for (size_t at = 0; at < len && st == MOE_OK; at += REPLAY_PIECE) {
        size_t n = len - at < REPLAY_PIECE ? len - at : REPLAY_PIECE;
        st = moe_wait_bcast((char *)buf + at, (int)n, MPI_BYTE, 0, comm, "the routing trace",
                            err);
    }
    return st;
}

/* The data to the ranks that route: a broadcast over the ranks that route (rank 0 included
 * to send), a communicator split off for it. */
static moe_status_t replay_share(moe_replay_t *out, MPI_Comm comm, int rank, bool routes,
                                 moe_error_t *err)
{
    MPI_Comm sub = MPI_COMM_NULL;
    bool in = rank == 0 || routes;
    moe_status_t st = MOE_MPI(MPI_Comm_split(comm, in ? 0 : MPI_UNDEFINED, rank, &sub), err);
    if (st != MOE_OK || sub == MPI_COMM_NULL) {
        return st;
    }
    int n = 0;
    st = MOE_MPI(MPI_Comm_size(sub, &n), err);
    size_t count = (size_t)out->tr.num_layers * (size_t)out->tr.rows * (size_t)out->tr.top_k;
    if (st == MOE_OK && n > 1) {
        if (rank != 0) {
            out->tr.ids = malloc(count * sizeof(int32_t));
            out->tr.weights = malloc(count * sizeof(float));
        }
        /* every member must take part: one that cannot allocate still receives, then fails */
        bool ok = out->tr.ids != NULL && out->tr.weights != NULL;
        void *scratch = ok ? NULL : malloc(REPLAY_PIECE);
        for (int part = 0; part < 2 && st == MOE_OK; part++) {
            void *dst = part == 0 ? (void *)out->tr.ids : (void *)out->tr.weights;
            if (ok) {
                st = replay_bcast_bytes(dst, count * 4, sub, err);
            } else {
                for (size_t at = 0; at < count * 4 && st == MOE_OK; at += REPLAY_PIECE) {
                    size_t m = count * 4 - at < REPLAY_PIECE ? count * 4 - at : REPLAY_PIECE;
                    st = scratch != NULL ? moe_wait_bcast(scratch, (int)m, MPI_BYTE, 0, sub,
                                                          "the routing trace", err)
                                         : MOE_ERR_NO_MEMORY;
                }
            }
        }
        free(scratch);
        if (st == MOE_OK && !ok) {
            st = moe_error_set(err, MOE_ERR_NO_MEMORY, "workload.routing: no memory for the "
                               "trace's %zu choices on rank %d", count, rank);
        }
    }
    moe_status_t freed = MOE_MPI(MPI_Comm_free(&sub), st == MOE_OK ? err : NULL);
    return st != MOE_OK ? st : freed;
}

moe_status_t moe_replay_read(const moe_config_t *cfg, moe_replay_t *out, moe_error_t *err)
{
    memset(out, 0, sizeof(*out));
    moe_status_t st = replay_read(cfg, out, err);
    if (st != MOE_OK) {
        moe_replay_free(out);
    }
    return st;
}

moe_status_t moe_replay_share(const moe_config_t *cfg, MPI_Comm comm, bool routes,
                              moe_replay_t *out, moe_error_t *err)
{
    int rank = 0;
    moe_status_t st = MOE_MPI(MPI_Comm_rank(comm, &rank), err);
    replay_head_t h; /* ~13 kB: nothing here may fail on one rank only before the bcast */
    memset(&h, 0, sizeof(h));
    if (rank == 0) {
        const moe_routing_trace_t *tr = &out->tr;
        h = (replay_head_t){.num_layers = tr->num_layers, .rows = tr->rows,
                            .num_experts = tr->num_experts, .top_k = tr->top_k,
                            .tokens_per_step = tr->tokens_per_step,
                            .uniform = tr->uniform_weights};
        memcpy(h.layer_ids, tr->layer_ids, sizeof(int32_t) * (size_t)tr->num_layers);
        memcpy(h.li, out->li, sizeof(out->li));
        snprintf(h.path, sizeof(h.path), "%s", tr->path);
        snprintf(h.source, sizeof(h.source), "%s", tr->source);
    } else {
        memset(out, 0, sizeof(*out));
    }
    if (st == MOE_OK) {
        st = moe_wait_bcast(&h, (int)sizeof(h), MPI_BYTE, 0, comm, "the routing trace", err);
    }
    if (st == MOE_OK && rank != 0) {
        moe_routing_trace_t *tr = &out->tr;
        tr->num_layers = (int)h.num_layers;
        tr->rows = h.rows;
        tr->num_experts = (int)h.num_experts;
        tr->top_k = (int)h.top_k;
        tr->tokens_per_step = h.tokens_per_step;
        tr->uniform_weights = h.uniform != 0;
        tr->layer_ids = malloc(sizeof(int32_t) * (size_t)tr->num_layers);
        if (tr->layer_ids != NULL) {
            memcpy(tr->layer_ids, h.layer_ids, sizeof(int32_t) * (size_t)tr->num_layers);
        }
        memcpy(out->li, h.li, sizeof(out->li));
        snprintf(tr->path, sizeof(tr->path), "%s", h.path);
        snprintf(tr->source, sizeof(tr->source), "%s", h.source);
    }
    if (st == MOE_OK) {
        snprintf(out->source, sizeof(out->source), "replayed %s%s%s%s", out->tr.path,
                 out->tr.source[0] != '\0' ? " (" : "", out->tr.source,
                 out->tr.source[0] != '\0' ? ")" : "");
        st = replay_share(out, comm, rank, routes, err);
    }
    if (st == MOE_OK && rank == 0) {
        int64_t T = cfg->tokens_per_step, whole = out->tr.rows / T;
        if (cfg->steps == 0 || cfg->steps * T > out->tr.rows) {
            MOE_INFO("workload.routing: %s holds %" PRId64 " tokens a layer, %" PRId64
                     " step%s of %lld; the replay starts over from its first token after "
                     "that", out->tr.path, out->tr.rows, whole, whole == 1 ? "" : "s",
                     (long long)T);
        }
        if (out->tr.tokens_per_step > 0 && out->tr.tokens_per_step != T) {
            /* the same rows, other steps: another capacity per step, another output */
            MOE_INFO("workload.routing: %s was recorded in steps of %" PRId64 " tokens; this "
                     "run takes %lld a step (workload.tokens_per_step), so its steps are not "
                     "the recording's", out->tr.path, out->tr.tokens_per_step, (long long)T);
        }
    }
    return st;
}

void moe_replay_free(moe_replay_t *r)
{
    if (r != NULL) {
        moe_routing_trace_free(&r->tr);
    }
}
