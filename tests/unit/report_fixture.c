/* The synthetic merged profile of the report tests (report_fixture.h). */
#include "report_fixture.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gather/balance.h"
#include "test_util.h"

/* ---- the synthetic profile ------------------------------------------------------- */

bool fx_config(fixture_t *fx, const shape_t *s)
{
    moe_error_t err;
    snprintf(fx->yaml, sizeof(fx->yaml),
             "model:\n  hidden_dim: %d\n  ffn_dim: %d\n  num_experts: %d\n  top_k: 2\n"
             "  num_layers: %d\n  activation: swiglu\nplacement:\n  master_rank: 0\n"
             "  experts: %s\nruntime:\n  routing: master\n  transport: mpi\n  threads: 1\n%s"
             "workload:\n  tokens_per_step: 2048\n  steps: 20\nprofiler:\n  warmup_steps: 5\n"
             "  measurement_steps: %d\n  trace: true\n  memory_sample_ms: 10\n",
             HIDDEN, FFN, s->experts, s->layers, s->placement ? s->placement : "auto",
             s->runtime_extra ? s->runtime_extra : "", REC_STEPS);
    moe_status_t st =
        moe_cfg_parse(fx->yaml, strlen(fx->yaml), "synthetic.yaml", s->world, &fx->cfg, &err);
    if (st != MOE_OK) {
        fprintf(stderr, "config: %s\n", err.msg);
    }
    return st == MOE_OK;
}

/* Tokens of expert e of layer l per recorded step: a gentle slope, one hot expert. */
int64_t fx_tokens(int l, int e, int ne)
{
    int64_t base = 2048 * 2 / ne;
    int64_t t = base - (int64_t)((e * 7 + l * 3) % ne) * base / (2 * ne);
    return l == HOT_LAYER && e == HOT_EXPERT ? base * 3 : t;
}

/* ns of one call: about 800 GFLOP/s; 480 on the straggler rank (the last one), whatever
 * its load; the slow expert at 200. */
int64_t fx_call_ns(int l, int e, int64_t tokens, int step, bool straggler)
{
    double flops = 6.0 * HIDDEN * FFN * (double)tokens;
    double rate = (800.0 + 20.0 * (e % 5)) * (straggler ? 0.6 : 1.0);
    rate = l == SLOW_LAYER && e == SLOW_EXPERT ? 200.0 : rate;
    /* a spread of call times and one slow call, so p50 < p90 < p99 */
    double jitter = 1.0 + 0.03 * ((step * 7) % 5) + (step == REC_STEPS - 1 ? 0.4 : 0.0);
    return (int64_t)(flops / rate * jitter);
}

void fx_rank(moe_report_t *r, const moe_config_t *cfg, int k, bool partial)
{
    moe_rep_rank_t *rk = &r->ranks[k];
    rk->rank = k;
    rk->profiled = true;
    rk->present = !(partial && k == r->world_size - 1);
    snprintf(rk->host, sizeof(rk->host), "node-%c", k < (r->world_size + 1) / 2 ? 'a' : 'b');
    rk->num_local = moe_cfg_experts_of_rank(cfg, k, NULL);
    rk->clock_offset_ns = k * 1500.0;
    rk->clock_offset_end_ns = k * 1500.0 + 200.0;
    rk->clock_uncertainty_ns = 800.0;
    if (!rk->present) {
        return;
    }
    rk->steps = REC_STEPS;
    rk->chunks = CHUNKS;
    snprintf(rk->device, sizeof(rk->device), "%s", DEVICE);
    rk->inflight_ns = INFLIGHT_MS * 1e6 * REC_STEPS;
    rk->hidden_ns = k == 0 ? 0.0 : (k % 4 + 1) * 1e6 * REC_STEPS;
    rk->expert_weight_bytes = (uint64_t)rk->num_local * r->num_layers * 3 * HIDDEN * FFN * 4;
    rk->exchange_buffer_bytes = (uint64_t)2048 * 2 * HIDDEN * 4;
    rk->num_mem = 100;
    rk->mem = calloc((size_t)rk->num_mem, sizeof(*rk->mem));
    for (int i = 0; rk->mem != NULL && i < rk->num_mem; i++) {
        rk->mem[i].t_ns = (int64_t)(i - 5) * 10000000;
        rk->mem[i].rss_bytes = (uint64_t)(200 + 30 * k + (i < 20 ? 5 * i : 100)) << 20;
        rk->rss_peak = rk->mem[i].rss_bytes > rk->rss_peak ? rk->mem[i].rss_bytes : rk->rss_peak;
    }
    rk->peak_known = true; /* its last record came */
}

static void fx_stat(moe_rep_stat_t *s, double per_step)
{
    s->sum = per_step * REC_STEPS;
    s->min = per_step * 0.9;
    s->max = per_step * 1.2;
    s->n = REC_STEPS;
}

/* Phases per step of rank k from its experts' work; the idle time of a rank is what it
 * waits for the slowest expert rank. */
static void fx_phases(moe_report_t *r)
{
    double expert_ns[MOE_MAX_RANKS] = {0}, slowest = 0.0;
    for (int i = 0; i < r->num_layers * r->num_experts; i++) {
        const moe_rep_expert_t *e = &r->experts[i];
        expert_ns[e->rank] += e->hist.sum / REC_STEPS;
    }
    for (int k = 0; k < r->world_size; k++) {
        slowest = expert_ns[k] > slowest ? expert_ns[k] : slowest;
    }
    for (int k = 0; k < r->world_size; k++) {
        moe_rep_rank_t *rk = &r->ranks[k];
        double gate = k == 0 ? 400e3 : 0, merge = k == 0 ? 300e3 : 0, move = 12e6;
        double idle = slowest - expert_ns[k];
        fx_stat(&rk->phase[MOE_PHASE_GATE], gate);
        fx_stat(&rk->phase[MOE_PHASE_DISPATCH], move / 2 + idle);
        fx_stat(&rk->phase[MOE_PHASE_EXPERT], expert_ns[k]);
        fx_stat(&rk->phase[MOE_PHASE_COMBINE], move / 2);
        fx_stat(&rk->phase[MOE_PHASE_MERGE], merge);
        fx_stat(&rk->phase[MOE_PHASE_STEP], gate + move + idle + expert_ns[k] + merge);
        rk->compute_ns = (gate + expert_ns[k] + merge) * REC_STEPS;
        rk->exchange_ns = move * REC_STEPS;
        rk->idle_ns = idle * REC_STEPS;
        if (!rk->present) {
            memset(rk->phase, 0, sizeof(rk->phase));
            rk->compute_ns = rk->exchange_ns = rk->idle_ns = 0;
        }
    }
}

static bool fx_experts(moe_report_t *r, const moe_config_t *cfg)
{
    int ne = r->num_experts, nl = r->num_layers;
    r->experts = calloc((size_t)(nl * ne), sizeof(*r->experts));
    r->layers = calloc((size_t)nl, sizeof(*r->layers));
    if (r->experts == NULL || r->layers == NULL) {
        return false;
    }
    for (int l = 0; l < nl; l++) {
        moe_rep_layer_t *y = &r->layers[l];
        y->demand = calloc((size_t)ne, sizeof(uint64_t));
        y->kept = calloc((size_t)ne, sizeof(uint64_t));
        y->dropped = calloc((size_t)ne, sizeof(uint64_t));
        if (y->demand == NULL || y->kept == NULL || y->dropped == NULL) {
            return false;
        }
        for (int e = 0; e < ne; e++) {
            moe_rep_expert_t *x = &r->experts[l * ne + e];
            int64_t t = fx_tokens(l, e, ne);
            x->layer = l;
            x->expert = e;
            x->rank = cfg->expert_owner[e];
            moe_hist_reset(&x->hist);
            for (int s = 0; s < REC_STEPS; s++) {
                moe_hist_add(&x->hist, fx_call_ns(l, e, t, s, x->rank == r->world_size - 1));
            }
            x->tokens = (uint64_t)(t * REC_STEPS);
            x->calls = REC_STEPS;
            x->flops = 6.0 * HIDDEN * FFN * (double)x->tokens;
            y->kept[e] = x->tokens;
            y->dropped[e] = l == HOT_LAYER && e == HOT_EXPERT ? 40 : 0;
            y->demand[e] = y->kept[e] + y->dropped[e];
        }
        moe_balance_t b;
        moe_balance_compute(y->kept, ne, &b);
        y->gini = b.gini;
        y->cv = b.cv;
        y->entropy_norm = b.entropy_norm;
        y->max_mean = b.max_mean;
    }
    return true;
}

/* Bytes: rank 0 sends each expert's rows to its host (dispatch), the host sends them back. */
static bool fx_comm(moe_report_t *r)
{
    size_t w = (size_t)r->world_size;
    r->bytes = calloc(w * w, sizeof(uint64_t));
    r->msgs = calloc(w * w, sizeof(uint64_t));
    r->wait_ns = calloc(w * w, sizeof(double));
    if (r->bytes == NULL || r->msgs == NULL || r->wait_ns == NULL) {
        return false;
    }
    for (int i = 0; i < r->num_layers * r->num_experts; i++) {
        const moe_rep_expert_t *e = &r->experts[i];
        uint64_t b = e->tokens * HIDDEN * 4;
        r->bytes[e->rank] += b;
        r->bytes[(size_t)e->rank * w] += b;
    }
    for (size_t j = 1; j < w; j++) {
        r->msgs[j] = r->msgs[j * w] = (uint64_t)REC_STEPS * (uint64_t)r->num_layers;
        r->wait_ns[j] = 1e5 * (double)j;
        r->wait_ns[j * w] = 5e4;
    }
    return true;
}

static bool fx_metrics(moe_report_t *r)
{
    int ne = r->num_experts, nl = r->num_layers;
    r->num_metrics = (int64_t)REC_STEPS * nl * ne;
    r->metrics = calloc((size_t)r->num_metrics, sizeof(*r->metrics));
    if (r->metrics == NULL) {
        return false;
    }
    int64_t n = 0;
    for (int s = 0; s < REC_STEPS; s++) {
        for (int l = 0; l < nl; l++) {
            for (int e = 0; e < ne; e++) {
                moe_rep_metric_t *m = &r->metrics[n++];
                m->step = FIRST_REC_STEP + s;
                m->layer = l;
                m->expert = e;
                m->rank = r->experts[l * ne + e].rank;
                m->tokens = fx_tokens(l, e, ne);
                m->ns = fx_call_ns(l, e, m->tokens, s, m->rank == r->world_size - 1);
                m->flops = 6.0 * HIDDEN * FFN * (double)m->tokens;
            }
        }
    }
    return true;
}

static void fx_event(moe_report_t *r, int64_t ts, int64_t dur, int rank, int kind, int layer,
                     int id, int lane, int64_t step, int64_t arg)
{
    moe_rep_event_t *e = &r->events[r->num_events++];
    *e = (moe_rep_event_t){ts, dur, rank, (int16_t)kind, (int16_t)layer, id, lane, step, arg};
}

/* Step records and trace events: each rank's step, its phases per layer, its experts. */
static void fx_rank_step(moe_report_t *r, const moe_config_t *cfg, int k, int s, int32_t *ids)
{
    const moe_rep_rank_t *rk = &r->ranks[k];
    int64_t begin = (int64_t)s * (int64_t)(rk->phase[MOE_PHASE_STEP].sum / REC_STEPS) + k * 2000;
    moe_rep_step_t *st = &r->steps[r->num_steps++];
    st->step = FIRST_REC_STEP + s;
    st->rank = k;
    st->begin_ns = begin;
    for (int p = 0; p < MOE_PHASE_COUNT; p++) {
        st->phase_ns[p] = (int64_t)(rk->phase[p].sum / REC_STEPS);
    }
    fx_event(r, begin, st->phase_ns[MOE_PHASE_STEP], k, MOE_TEV_STEP, -1, (int)st->step, 0, st->step,
             0);
    int64_t t = begin;
    int n = moe_cfg_experts_of_rank(cfg, k, ids);
    for (int l = 0; l < r->num_layers; l++) {
        for (int p = 0; p < MOE_PHASE_STEP; p++) {
            int64_t d = st->phase_ns[p] / r->num_layers;
            if (d > 0) {
                fx_event(r, t, d, k, MOE_TEV_PHASE, l, p, 1, st->step, 0);
            }
            for (int i = 0; p == MOE_PHASE_EXPERT && i < n; i++) {
                int64_t rows = fx_tokens(l, ids[i], r->num_experts);
                fx_event(r, t, fx_call_ns(l, ids[i], rows, s, k == r->world_size - 1), k,
                         MOE_TEV_EXPERT, l, ids[i], MOE_LANE_EXPERT0 + i, st->step, rows);
            }
            /* each chunk's dispatch (in the dispatch phase) and combine (in the combine) */
            for (int c = 0; (p == MOE_PHASE_DISPATCH || p == MOE_PHASE_COMBINE) && c < CHUNKS; c++) {
                fx_event(r, t + c * d / CHUNKS, d / CHUNKS, k, MOE_TEV_EXCHANGE, l,
                         p == MOE_PHASE_DISPATCH ? 0 : 1, MOE_LANE_EXCHANGE, st->step, c);
            }
            t += d;
        }
    }
}

static bool fx_timeline(moe_report_t *r, const moe_config_t *cfg)
{
    size_t per_step =
        (size_t)r->world_size * (1 + (size_t)r->num_layers * (MOE_PHASE_STEP + 2 * CHUNKS)) +
        (size_t)r->num_layers * (size_t)r->num_experts;
    r->steps = calloc((size_t)REC_STEPS * (size_t)r->world_size, sizeof(*r->steps));
    r->events = calloc(per_step * REC_STEPS, sizeof(*r->events));
    int32_t *ids = malloc(sizeof(int32_t) * MOE_MAX_EXPERTS);
    if (r->steps == NULL || r->events == NULL || ids == NULL) {
        free(ids);
        return false;
    }
    for (int s = 0; s < REC_STEPS; s++) {
        for (int k = 0; k < r->world_size; k++) {
            if (r->ranks[k].present) {
                fx_rank_step(r, cfg, k, s, ids);
            }
        }
    }
    r->events_dropped = 7;
    free(ids);
    return true;
}

static void fx_facts(moe_report_t *r, const fixture_t *fx, const shape_t *s)
{
    r->cfg = &fx->cfg;
    r->config_text = fx->yaml;
    r->config_len = strlen(fx->yaml);
    snprintf(r->started_at, sizeof(r->started_at), "2025-11-21T07:05:00");
    snprintf(r->version, sizeof(r->version), "0.1.0");
    snprintf(r->build_id, sizeof(r->build_id), "test-build-1234");
    snprintf(r->blas, sizeof(r->blas), "openblas");
    snprintf(r->transport, sizeof(r->transport), "mpi");
    /* the keys config keeps as written, resolved as a CPU run of random weights resolves
     * them (no native BF16, so no small-batch kernels; no shared experts; not pinned) */
    static const char *const resolved[MOE_PROF_RESOLVED_COUNT] = {
        [MOE_PROF_RESOLVED_DTYPE] = "f32", [MOE_PROF_RESOLVED_SHARED_FFN_DIM] = "0",
        [MOE_PROF_RESOLVED_COMPUTE_DTYPE] = "f32", [MOE_PROF_RESOLVED_WIRE_DTYPE] = "f32",
        [MOE_PROF_RESOLVED_SMALL_BATCH_ROWS] = "0", [MOE_PROF_RESOLVED_BIND] = "none",
        [MOE_PROF_RESOLVED_DEDUP] = "true", [MOE_PROF_RESOLVED_EXPERT_HISTOGRAMS] = "expert"};
    for (int i = 0; i < MOE_PROF_RESOLVED_COUNT; i++) {
        snprintf(r->resolved[i], sizeof(r->resolved[i]), "%s", resolved[i]);
    }
    r->world_size = s->world;
    r->num_hosts = s->world > 1 ? 2 : 1;
    r->steps_run = 20;
    r->tokens_per_step = 2048;
    r->tokens_per_s = s->tokens_per_s;
    r->run_s = 20.0 * 2048.0 / s->tokens_per_s;
    r->recorded_steps = REC_STEPS;
    r->windows = 1;
    r->partial = s->partial;
    if (s->partial) {
        snprintf(r->missing, sizeof(r->missing), "rank %d (node-b): its records did not arrive",
                 s->world - 1);
    }
    r->clock_skew_max_ns = 1500.0 * (s->world - 1);
    r->clock_uncertainty_max_ns = 800.0;
    r->clock_drift_max_ns = 200.0;
    r->num_layers = s->layers;
    r->num_experts = s->experts;
    r->chunks = CHUNKS;
    snprintf(r->device, sizeof(r->device), "%s", DEVICE);
}

/* A whole synthetic report; NULL on failure. Free with fx_free. */
fixture_t *fx_make(const shape_t *s)
{
    fixture_t *fx = calloc(1, sizeof(*fx));
    if (fx == NULL || !fx_config(fx, s)) {
        free(fx);
        return NULL;
    }
    moe_report_t *r = &fx->rep;
    fx->cfg.device = MOE_DEVICE_CUDA; /* the writers only print it */
    fx->cfg.chunks = CHUNKS;          /* as the ranks report it (rk->chunks) */
    fx_facts(r, fx, s);
    r->ranks = calloc((size_t)s->world, sizeof(*r->ranks));
    bool ok = r->ranks != NULL;
    for (int k = 0; ok && k < s->world; k++) {
        fx_rank(r, &fx->cfg, k, s->partial);
    }
    ok = ok && fx_experts(r, &fx->cfg);
    if (ok) {
        fx_phases(r);
    }
    ok = ok && fx_comm(r) && fx_metrics(r) && fx_timeline(r, &fx->cfg);
    if (!ok) {
        moe_report_free(r);
        free(fx);
        return NULL;
    }
    return fx;
}

void fx_free(fixture_t *fx)
{
    if (fx != NULL) {
        moe_report_free(&fx->rep);
        free(fx);
    }
}

/* ---- helpers --------------------------------------------------------------------- */

const shape_t small_shape = {3, 2, 8, false, 11900.0, NULL, NULL};

const char *const report_files[REPORT_FILES_N] = {
    "config.yaml", "summary.txt", "summary.json", "metrics.csv",
    "comm.csv",    "trace.json",  "report.html",
};

/* Removes what the writers put in dir, then dir. */
void remove_report(const char *dir, int world)
{
    char path[MOE_PATH_MAX + 64];
    for (size_t i = 0; i < sizeof(report_files) / sizeof(report_files[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, report_files[i]);
        unlink(path);
    }
    for (int k = 0; k < world; k++) {
        snprintf(path, sizeof(path), "%s/summary_rank_%d.txt", dir, k);
        unlink(path);
    }
    rmdir(dir);
}

bool make_dir(const char *parent, const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", parent, name);
    return mkdir(out, 0755) == 0;
}

/* Writes fx's report into a new folder parent/name. */
bool write_into(fixture_t *fx, const char *parent, const char *name)
{
    moe_error_t err;
    moe_error_clear(&err);
    if (!make_dir(parent, name, fx->rep.run_dir, sizeof(fx->rep.run_dir))) {
        return false;
    }
    moe_status_t st = moe_report_write_all(&fx->rep, &err);
    if (st != MOE_OK) {
        fprintf(stderr, "write_all: %s\n", err.msg);
    }
    return st == MOE_OK;
}

void fx_drop(fixture_t *fx)
{
    if (fx != NULL) {
        remove_report(fx->rep.run_dir, fx->rep.world_size);
        fx_free(fx);
    }
}
