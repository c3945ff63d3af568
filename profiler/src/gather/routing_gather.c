/* Rank 0's side of profiler.record_routing (routing_gather.h). */
#include "gather/routing_gather.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/clock.h"
#include "moe/mpi_check.h"
#include "moe/poll.h"
#include "moe_model/routing_trace.h"
#include "moe_proto/routing_msg.h"
#include "report/report.h"

_Static_assert(MOE_REPORT_ROUTING_MAX >= MOE_ROUTING_REPLAYED_MAX,
               "a report holds a replay's words: a trace's path and its whole source");

/* The messages taken so far (at most one per token range). */
typedef struct parts {
    void *bufs[MOE_MAX_RANKS + 1];
    moe_routing_msg_t msg[MOE_MAX_RANKS + 1];
    int n;
    int64_t covered;
} parts_t;

/* Add a message if it fits the run and covers tokens no other has. */
static void parts_add(parts_t *p, const moe_config_t *cfg, void *buf, size_t len, int src,
                      moe_routing_set_t *out)
{
    moe_routing_msg_t m;
    moe_error_t err;
    bool ok = moe_routing_msg_decode(buf, len, &m, &err) == MOE_OK;
    if (ok && (m.layers != cfg->num_layers || m.top_k != cfg->top_k ||
               m.tokens > cfg->tokens_per_step ||
               m.token_first > cfg->tokens_per_step - m.tokens)) { /* no sum to overflow */
        ok = false;
        moe_error_set(&err, MOE_ERR_FORMAT, "it does not fit this run's layers, top_k or "
                      "tokens");
    }
    for (int i = 0; ok && i < p->n; i++) {
        const moe_routing_msg_t *o = &p->msg[i];
        if (m.token_first < o->token_first + o->tokens && o->token_first < m.token_first + m.tokens) {
            ok = false;
            moe_error_set(&err, MOE_ERR_FORMAT, "its tokens overlap another rank's");
        }
    }
    if (!ok || p->n > MOE_MAX_RANKS) {
        snprintf(out->why, sizeof(out->why), "rank %d's routing was dropped: %.200s", src,
                 err.msg);
        free(buf);
        return;
    }
    p->bufs[p->n] = buf;
    p->msg[p->n++] = m;
    p->covered += m.tokens;
}

/* One message from any rank, if one is there (its receive bounded by poll). */
static bool receive_one(MPI_Comm comm, moe_poll_t *poll, parts_t *p, const moe_config_t *cfg,
                        moe_routing_set_t *out)
{
    int flag = 0, n = 0, done = 0;
    MPI_Message msg;
    MPI_Status status;
    if (MOE_MPI(MPI_Improbe(MPI_ANY_SOURCE, MOE_PROF_TAG_ROUTING, comm, &flag, &msg, &status),
                NULL) != MOE_OK || !flag) {
        return false;
    }
    if (MOE_MPI(MPI_Get_count(&status, MPI_BYTE, &n), NULL) != MOE_OK || n <= 0) {
        return false;
    }
    void *buf = malloc((size_t)n);
    MPI_Request req;
    if (buf == NULL || MOE_MPI(MPI_Imrecv(buf, n, MPI_BYTE, &msg, &req), NULL) != MOE_OK) {
        free(buf); /* the sender's recording is lost: the set stays incomplete */
        return false;
    }
    while (!done) {
        if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS ||
            (!done && moe_poll_next(poll) != MOE_OK)) {
            return false; /* buf stays with the pending receive */
        }
    }
    parts_add(p, cfg, buf, (size_t)n, status.MPI_SOURCE, out);
    return true;
}

/* The parts in global token order, steps cut to the fewest any part holds. */
static void assemble(const moe_config_t *cfg, parts_t *p, moe_routing_set_t *out)
{
    int64_t T = cfg->tokens_per_step, L = cfg->num_layers, k = cfg->top_k, steps = INT64_MAX;
    for (int i = 0; i < p->n; i++) {
        steps = p->msg[i].steps < steps ? p->msg[i].steps : steps;
    }
    if (steps == 0 || steps == INT64_MAX) {
        snprintf(out->why, sizeof(out->why), "no recorded step completed");
        out->none_recorded = true;
        return;
    }
    size_t n = (size_t)L * (size_t)steps * (size_t)T * (size_t)k;
    out->ids = malloc(n * sizeof(int32_t));
    out->weights = malloc(n * sizeof(float));
    if (out->ids == NULL || out->weights == NULL) {
        snprintf(out->why, sizeof(out->why), "no memory for %zu routing choices", n);
        return;
    }
    for (int i = 0; i < p->n; i++) {
        const moe_routing_msg_t *m = &p->msg[i];
        size_t run = (size_t)m->tokens * (size_t)k; /* one layer of one step of this part */
        for (int64_t s = 0; s < steps; s++) {
            for (int64_t l = 0; l < L; l++) {
                size_t from = ((size_t)s * (size_t)L + (size_t)l) * run;
                size_t to = ((size_t)l * (size_t)steps * (size_t)T + (size_t)s * (size_t)T +
                             (size_t)m->token_first) * (size_t)k;
                memcpy(out->ids + to, m->ids + from, run * sizeof(int32_t));
                memcpy(out->weights + to, m->weights + from, run * sizeof(float));
            }
        }
    }
    out->steps = steps;
    out->tokens = T;
    out->layers = L;
    out->top_k = k;
    out->complete = true;
}

void moe_gather_routing(const moe_config_t *cfg, MPI_Comm comm, const void *own,
                        size_t own_len, int64_t deadline_ns, moe_routing_set_t *out)
{
    memset(out, 0, sizeof(*out));
    parts_t *p = calloc(1, sizeof(*p)); /* ~260 kB: not on the stack */
    if (p == NULL) {
        snprintf(out->why, sizeof(out->why), "no memory to collect the routing");
        return;
    }
    if (own != NULL) {
        void *copy = malloc(own_len);
        if (copy != NULL) {
            memcpy(copy, own, own_len);
            parts_add(p, cfg, copy, own_len, 0, out);
        }
    }
    moe_poll_t poll;
    moe_poll_begin_at(&poll, deadline_ns, false);
    while (p->covered < cfg->tokens_per_step) {
        if (!receive_one(comm, &poll, p, cfg, out) && moe_poll_next(&poll) != MOE_OK) {
            break;
        }
    }
    if (p->covered < cfg->tokens_per_step) {
        if (out->why[0] == '\0') {
            snprintf(out->why, sizeof(out->why), "the routing of %lld of the %lld tokens of a "
                     "step did not come (a routing rank lost or out of time)",
                     (long long)(cfg->tokens_per_step - p->covered),
                     (long long)cfg->tokens_per_step);
        }
    } else {
        assemble(cfg, p, out);
    }
    for (int i = 0; i < p->n; i++) {
        free(p->bufs[i]);
    }
    free(p);
}

/* The trace's source: this run and, for a replay recorded again, the trace it replayed and
 * that trace's own source ("moed run RUN (replaying FILE (SOURCE))"). What a reader would
 * cut (MOE_ROUTING_SOURCE_MAX) is left out whole instead, the replayed trace's source
 * first, then its file, so the parentheses stay paired. */
static void routing_source(const moe_report_t *r, char *out, size_t n)
{
    moe_report_routing_src_t src;
    moe_report_routing_parse(r->routing_source, &src);
    bool replayed = strcmp(src.kind, "replayed") == 0, has = src.trace_source[0] != '\0';
    int len = snprintf(out, n, "moed run %s (replaying %s%s%s%s)", r->run_dir, src.file,
                       has ? " (" : "", src.trace_source, has ? ")" : "");
    if (replayed && has && len >= MOE_ROUTING_SOURCE_MAX) {
        len = snprintf(out, n, "moed run %s (replaying %s)", r->run_dir, src.file);
    }
    if (!replayed || len >= MOE_ROUTING_SOURCE_MAX) {
        snprintf(out, n, "moed run %s", r->run_dir);
    }
}

moe_status_t moe_gather_routing_report(const moe_report_t *r, const void *arg,
                                       moe_error_t *err)
{
    const moe_routing_set_t *set = arg;
    const moe_config_t *cfg = r->cfg;
    const char *run_dir = r->run_dir;
    if (set->none_recorded) { /* the report recorded nothing either: nothing is missing */
        moe_report_file_off(r, MOE_RFILE_ROUTING);
        return MOE_OK;
    }
    if (!set->complete) { /* a routing rank's recording lost: the file is missing, and why */
        moe_report_file_failed(r, MOE_RFILE_ROUTING, set->why);
        return MOE_OK;
    }
    char path[4096 + 64], source[MOE_ROUTING_SOURCE_MAX];
    snprintf(path, sizeof(path), "%s/%s", run_dir, MOE_ROUTING_FILE);
    routing_source(r, source, sizeof(source));
    int L = (int)set->layers;
    const int32_t *ids[MOE_MAX_LAYER_IDS];
    const float *ws[MOE_MAX_LAYER_IDS];
    size_t per = (size_t)set->steps * (size_t)set->tokens * (size_t)set->top_k;
    for (int l = 0; l < L; l++) {
        ids[l] = set->ids + (size_t)l * per;
        ws[l] = set->weights + (size_t)l * per;
    }
    moe_routing_out_t o = {
        .num_layers = L, .layer_ids = cfg->layer_ids, .num_experts = (int)cfg->num_experts,
        .top_k = (int)set->top_k, .rows = set->steps * set->tokens,
        .tokens_per_step = set->tokens, .family = moe_cfg_family_name(cfg->family),
        .source = source, .uniform_weights = false, .ids = ids, .weights = ws};
    moe_status_t st = moe_routing_trace_write(path, &o, err);
    if (st != MOE_OK) { /* the entry's why without the path, as the other files' (a long
                         * output_dir would push the cause past its room) */
        size_t n = strlen(path);
        const char *why = err->msg;
        moe_report_file_failed(r, MOE_RFILE_ROUTING, strncmp(why, path, n) == 0 &&
                                                         why[n] == ':' && why[n + 1] == ' '
                                                         ? why + n + 2
                                                         : why);
    }
    if (st == MOE_OK) {
        moe_report_file_done(r, MOE_RFILE_ROUTING, 0);
        printf("routing: %lld recorded steps x %lld tokens x %d layers in %s (%.1f MiB)\n",
               (long long)set->steps, (long long)set->tokens, L, path,
               (double)moe_routing_trace_bytes(L, set->steps * set->tokens, (int)set->top_k) /
                   (1024.0 * 1024.0));
    }
    return st;
}

void moe_routing_set_free(moe_routing_set_t *set)
{
    free(set->ids);
    free(set->weights);
    memset(set, 0, sizeof(*set));
}
