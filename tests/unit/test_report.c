/* Unit tests for the report writers, the findings, `moed compare` and the JSON reader.
 *
 * A synthetic merged profile is built in code (no MPI): 3 ranks (rank 0 routes, ranks 1 and
 * 2 host 4 experts each), 2 layers x 8 experts, 10 recorded steps with metrics, step records,
 * trace events and memory samples, runtime.chunks 2 on an "NVIDIA H200". Layer 0 expert 3
 * is made the hottest, layer 1 expert 5 the slowest, rank 2 the straggler; every rank has
 * 8 ms of exchange in flight per step, of which rank k > 0 hides (k % 4 + 1) ms behind its
 * expert compute (rank 0 hosts no expert: 0). Every file is written into a fresh temporary
 * folder and read back: JSON files with jansson, text files as text.
 *
 *   test_report              run the tests
 *   test_report --demo DIR   write reports to look at: DIR/small (8 experts, 3 ranks),
 *                            DIR/big (64 experts, 2 layers, 8 ranks), DIR/partial (small,
 *                            rank 2 missing), DIR/deep (27 layers x 64 experts, 16 ranks) */
#include "report/report.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gather/balance.h"
#include "compare/json_lookup.h"
#include "gather/gather.h"
#include "report/json_write.h"
#include "test_util.h"

#define HOT_LAYER 0
#define HOT_EXPERT 3
#define SLOW_LAYER 1
#define SLOW_EXPERT 5
#define REC_STEPS 10
#define FIRST_REC_STEP 5
#define HIDDEN 1024
#define FFN 3584
#define CHUNKS 2
#define DEVICE "NVIDIA H200"
#define INFLIGHT_MS 8.0 /* exchange in flight per step, every rank */

typedef struct fixture {
    moe_config_t cfg;
    char yaml[2048];
    moe_report_t rep;
} fixture_t;

typedef struct shape {
    int world, layers, experts;
    bool partial;
    double tokens_per_s;
    const char *runtime_extra; /* YAML lines added to the runtime section, or NULL */
    const char *placement;     /* placement.experts as written; NULL: auto */
} shape_t;

/* ---- the synthetic profile ------------------------------------------------------- */

static bool fx_config(fixture_t *fx, const shape_t *s)
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
static int64_t fx_tokens(int l, int e, int ne)
{
    int64_t base = 2048 * 2 / ne;
    int64_t t = base - (int64_t)((e * 7 + l * 3) % ne) * base / (2 * ne);
    return l == HOT_LAYER && e == HOT_EXPERT ? base * 3 : t;
}

/* ns of one call: about 800 GFLOP/s; 480 on the straggler rank (the last one), whatever
 * its load; the slow expert at 200. */
static int64_t fx_call_ns(int l, int e, int64_t tokens, int step, bool straggler)
{
    double flops = 6.0 * HIDDEN * FFN * (double)tokens;
    double rate = (800.0 + 20.0 * (e % 5)) * (straggler ? 0.6 : 1.0);
    rate = l == SLOW_LAYER && e == SLOW_EXPERT ? 200.0 : rate;
    /* a spread of call times and one slow call, so p50 < p90 < p99 */
    double jitter = 1.0 + 0.03 * ((step * 7) % 5) + (step == REC_STEPS - 1 ? 0.4 : 0.0);
    return (int64_t)(flops / rate * jitter);
}

static void fx_rank(moe_report_t *r, const moe_config_t *cfg, int k, bool partial)
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
static fixture_t *fx_make(const shape_t *s)
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

static void fx_free(fixture_t *fx)
{
    if (fx != NULL) {
        moe_report_free(&fx->rep);
        free(fx);
    }
}

/* ---- helpers --------------------------------------------------------------------- */

static const shape_t small_shape = {3, 2, 8, false, 11900.0, NULL, NULL};

static char *slurp(const char *dir, const char *name, size_t *len)
{
    char path[MOE_PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf != NULL) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) {
            break;
        }
        char *nb = realloc(buf, 2 * cap + 1);
        if (nb == NULL) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    fclose(f);
    if (buf != NULL) {
        buf[n] = '\0';
    }
    if (len != NULL) {
        *len = n;
    }
    return buf;
}

static size_t count_lines(const char *s)
{
    size_t n = 0;
    for (; s != NULL && *s; s++) {
        n += *s == '\n';
    }
    return n;
}

static size_t count_substr(const char *s, const char *needle)
{
    size_t n = 0;
    for (const char *p = s; p != NULL && (p = strstr(p, needle)) != NULL; p += strlen(needle)) {
        n++;
    }
    return n;
}

static const char *const report_files[] = {
    "config.yaml", "summary.txt", "summary.json", "metrics.csv",
    "comm.csv",    "trace.json",  "report.html",
};

/* Removes what the writers put in dir, then dir. */
static void remove_report(const char *dir, int world)
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

static bool make_dir(const char *parent, const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", parent, name);
    return mkdir(out, 0755) == 0;
}

/* Writes fx's report into a new folder parent/name. */
static bool write_into(fixture_t *fx, const char *parent, const char *name)
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

/* Writes a fixture of `s` (then `edit`ed) into root/name; NULL on failure. */
static fixture_t *fx_written(const char *root, const char *name, const shape_t *s,
                             void (*edit)(fixture_t *))
{
    fixture_t *fx = fx_make(s);
    CHECK(fx != NULL);
    if (fx != NULL && edit != NULL) {
        edit(fx);
    }
    if (fx != NULL && !write_into(fx, root, name)) {
        fx_free(fx);
        return NULL;
    }
    return fx;
}

static void fx_drop(fixture_t *fx)
{
    if (fx != NULL) {
        remove_report(fx->rep.run_dir, fx->rep.world_size);
        fx_free(fx);
    }
}

/* ---- tests ----------------------------------------------------------------------- */

static void test_files_exist(const fixture_t *fx)
{
    const char *dir = fx->rep.run_dir;
    for (size_t i = 0; i < sizeof(report_files) / sizeof(report_files[0]); i++) {
        size_t n = 0;
        char *text = slurp(dir, report_files[i], &n);
        if (strcmp(report_files[i], "trace.json") == 0 && !fx->cfg.prof_trace) {
            CHECK(text == NULL); /* profiler.trace: false writes no trace */
            free(text);
            continue;
        }
        CHECK(text != NULL);
        CHECK(n > 0);
        if (text == NULL || n == 0) {
            fprintf(stderr, "  missing or empty: %s\n", report_files[i]);
        }
        free(text);
    }
    for (int k = 0; k < fx->rep.world_size; k++) {
        char name[64];
        snprintf(name, sizeof(name), "summary_rank_%d.txt", k);
        char *text = slurp(dir, name, NULL);
        CHECK_INT_EQ(text != NULL, fx->rep.ranks[k].present);
        if (text != NULL) {
            snprintf(name, sizeof(name), "rank %d (", k);
            CHECK_STR_CONTAINS(text, name);
            CHECK_STR_CONTAINS(text, "Phases per recorded step");
        }
        free(text);
    }
    char *cfg = slurp(dir, "config.yaml", NULL);
    CHECK(cfg != NULL && strcmp(cfg, fx->yaml) == 0);
    free(cfg);
}

/* The run's hidden share as the fixture plants it: hidden / exchange over present ranks. */
static double fx_hidden_share(const moe_report_t *r)
{
    double hidden = 0.0, inflight = 0.0;
    for (int k = 0; k < r->world_size; k++) {
        if (r->ranks[k].present) {
            hidden += k == 0 ? 0.0 : k % 4 + 1;
            inflight += INFLIGHT_MS;
        }
    }
    return hidden / inflight;
}

/* runtime.chunks, the device and the exchange hidden behind compute in summary.json. */
static void check_json_overlap(const json_t *doc, const moe_report_t *r)
{
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "run.chunks"), -1), CHUNKS, 0);
    CHECK(strcmp(moe_json_str(moe_json_path(doc, "run.device"), ""), "cuda") == 0);
    CHECK(strcmp(moe_json_str(moe_json_path(doc, "run.device_name"), ""), DEVICE) == 0);
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "run.exchange_hidden_share"), -1),
               fx_hidden_share(r), 1e-9);
    CHECK_NEAR(fx_hidden_share(r), r->partial ? 2.0 / 16.0 : 5.0 / 24.0, 1e-12);
    for (int k = 0; k < r->world_size; k++) {
        char path[64];
        const json_t *rank = json_array_get(json_object_get(doc, "ranks"), (size_t)k);
        const json_t *share = json_object_get(rank, "exchange_hidden_share");
        snprintf(path, sizeof(path), "ranks.%d.device", k);
        if (!r->ranks[k].present) { /* no records: nothing to divide */
            CHECK(json_is_null(share));
            CHECK(strcmp(moe_json_str(moe_json_path(doc, path), "?"), "") == 0);
            continue;
        }
        double hidden = k == 0 ? 0.0 : k % 4 + 1;
        CHECK(strcmp(moe_json_str(moe_json_path(doc, path), ""), DEVICE) == 0);
        CHECK_NEAR(moe_json_num(json_object_get(rank, "exchange_ms"), -1), INFLIGHT_MS, 1e-9);
        CHECK_NEAR(moe_json_num(json_object_get(rank, "hidden_ms"), -1), hidden, 1e-9);
        CHECK(json_is_number(share)); /* rank 0: exactly 0, not null */
        CHECK_NEAR(moe_json_num(share, -1), hidden / INFLIGHT_MS, 1e-12);
    }
}

static void test_summary_json(const fixture_t *fx)
{
    const moe_report_t *r = &fx->rep;
    char path[MOE_PATH_MAX + 32];
    json_t *doc = NULL;
    moe_error_t err;
    snprintf(path, sizeof(path), "%s/summary.json", r->run_dir);
    CHECK_INT_EQ(moe_json_load_file(path, &doc, &err), MOE_OK);
    if (doc == NULL) {
        fprintf(stderr, "  %s\n", err.msg);
        return;
    }
    CHECK(strcmp(moe_json_str(json_object_get(doc, "schema"), ""), "moed.summary") == 0);
    CHECK_NEAR(moe_json_num(json_object_get(doc, "schema_version"), 0), 1, 0);
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "run.tokens_per_s"), 0), r->tokens_per_s, 1e-6);
    CHECK_INT_EQ(moe_json_count(json_object_get(doc, "experts")), r->num_layers * r->num_experts);
    CHECK_INT_EQ(moe_json_count(json_object_get(doc, "ranks")), r->world_size);
    CHECK_INT_EQ(moe_json_count(json_object_get(doc, "layers")), r->num_layers);
    CHECK_INT_EQ(moe_json_count(moe_json_path(doc, "layers.0.kept")), r->num_experts);
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "comm.bytes.0.1"), -1), (double)r->bytes[1], 0);
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "comm.bytes.2.0"), -1), (double)r->bytes[2 * 3],
               0);
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "findings.hot_layer"), -1), HOT_LAYER, 0);
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "findings.hot_expert"), -1), HOT_EXPERT, 0);
    const json_t *lat = moe_json_path(doc, "experts.3.latency_ms");
    CHECK(json_is_number(json_object_get(lat, "p50")));
    CHECK(json_is_number(json_object_get(lat, "p99")));
    CHECK_NEAR(moe_json_num(json_object_get(lat, "p99"), 0),
               moe_hist_quantile(&r->experts[3].hist, 0.99) / 1e6, 1e-6);
    CHECK(json_is_boolean(json_object_get(doc, "partial")));
    CHECK_INT_EQ(json_is_true(json_object_get(doc, "partial")), r->partial);
    check_json_overlap(doc, r);
    json_decref(doc);
}

/* Counts trace events by phase and checks every rank present has its process name. */
static void check_trace_doc(const json_t *doc, const moe_report_t *r, int64_t *timeline,
                            double *dropped)
{
    const json_t *ev = json_object_get(doc, "traceEvents");
    int names = 0;
    *timeline = 0;
    CHECK(json_is_array(ev));
    for (size_t i = 0; i < moe_json_count(ev); i++) {
        const json_t *e = json_array_get(ev, i);
        const char *ph = moe_json_str(json_object_get(e, "ph"), "");
        *timeline += strcmp(ph, "X") == 0 || strcmp(ph, "C") == 0;
        if (strcmp(ph, "M") == 0 &&
            strcmp(moe_json_str(json_object_get(e, "name"), ""), "process_name") == 0) {
            int pid = (int)moe_json_num(json_object_get(e, "pid"), -1);
            char want[96];
            snprintf(want, sizeof(want), "rank %d (%s)", pid - 1,
                     pid >= 1 && pid <= r->world_size ? r->ranks[pid - 1].host : "?");
            CHECK(strcmp(moe_json_str(moe_json_path(e, "args.name"), ""), want) == 0);
            names++;
        }
        if (strcmp(ph, "X") == 0) {
            CHECK(moe_json_num(json_object_get(e, "dur"), -1) >= 0);
            CHECK(moe_json_num(json_object_get(e, "ts"), -1) >= 0);
        }
    }
    int present = 0;
    for (int k = 0; k < r->world_size; k++) {
        present += r->ranks[k].present || k == 0;
    }
    CHECK_INT_EQ(names, present);
    CHECK(strcmp(moe_json_str(json_object_get(doc, "displayTimeUnit"), ""), "ms") == 0);
    *dropped = moe_json_num(moe_json_path(doc, "otherData.dropped_events"), -1);
    CHECK(json_is_number(moe_json_path(doc, "otherData.clock_skew_ns")));
}

/* Lanes: 0 steps, 1 phases, 2 exchange, 3 + i the rank's i-th expert; the exchange events
 * on lane 2 named "<dispatch|combine> c<chunk> L<layer>". */
static void check_trace_lanes(const json_t *doc, const moe_report_t *r)
{
    const json_t *ev = json_object_get(doc, "traceEvents");
    int exchange_lanes = 0, expert0_lane = 0;
    int64_t exchange_events = 0, expert_events = 0;
    for (size_t i = 0; i < moe_json_count(ev); i++) {
        const json_t *e = json_array_get(ev, i);
        const char *ph = moe_json_str(json_object_get(e, "ph"), "");
        const char *name = moe_json_str(json_object_get(e, "name"), "");
        double pid = moe_json_num(json_object_get(e, "pid"), -1);
        double tid = moe_json_num(json_object_get(e, "tid"), -1);
        const char *tname = moe_json_str(moe_json_path(e, "args.name"), "");
        if (strcmp(ph, "M") == 0 && strcmp(name, "thread_name") == 0) {
            exchange_lanes += strcmp(tname, "exchange") == 0 && tid == pid * 10000 + 2;
            expert0_lane += pid == 2 && strcmp(tname, "expert 0") == 0 && tid == 20003;
        }
        if (strcmp(ph, "X") != 0) {
            continue;
        }
        const char *cat = moe_json_str(json_object_get(e, "cat"), "");
        if (strcmp(cat, "exchange") == 0) {
            exchange_events++;
            CHECK_NEAR(tid, pid * 10000 + 2, 0);
            double chunk = moe_json_num(moe_json_path(e, "args.chunk"), -1);
            double layer = moe_json_num(moe_json_path(e, "args.layer"), -1);
            char want[64];
            snprintf(want, sizeof(want), "%s c%.0f L%.0f",
                     strncmp(name, "dispatch", 8) == 0 ? "dispatch" : "combine", chunk, layer);
            CHECK(strcmp(name, want) == 0);
            CHECK(chunk >= 0 && chunk < CHUNKS);
        } else if (strcmp(cat, "expert") == 0) {
            expert_events++;
            CHECK(tid >= pid * 10000 + 3);
        }
    }
    int present = 0;
    for (int k = 0; k < r->world_size; k++) {
        present += r->ranks[k].present || k == 0;
    }
    CHECK_INT_EQ(exchange_lanes, present);
    /* rank 1's first local expert (id 0) on lane 3 */
    CHECK_INT_EQ(expert0_lane, r->world_size > 1 && r->ranks[1].present);
    int64_t want_exchange = 0, want_expert = 0;
    for (int64_t i = 0; i < r->num_events; i++) {
        want_exchange += r->events[i].kind == MOE_TEV_EXCHANGE;
        want_expert += r->events[i].kind == MOE_TEV_EXPERT;
    }
    CHECK(want_exchange > 0);
    CHECK_INT_EQ(exchange_events, want_exchange);
    CHECK_INT_EQ(expert_events, want_expert);
    CHECK_STR_CONTAINS(moe_json_str(moe_json_path(doc, "otherData.tid"), ""),
                       "2 exchange, 3 + local expert index");
}

/* One complete event, in integer ns (the writer prints whole ns as us with 3 decimals). */
typedef struct span_ns {
    int64_t tid, ts, end;
} span_ns_t;

static int cmp_span_ns(const void *a, const void *b)
{
    const span_ns_t *x = a, *y = b;
    if (x->tid != y->tid) {
        return x->tid < y->tid ? -1 : 1;
    }
    if (x->ts != y->ts) {
        return x->ts < y->ts ? -1 : 1;
    }
    return (x->end < y->end) - (x->end > y->end); /* the longer first */
}

/* Spans of every lane (pid, tid; tids are unique across pids) nest: walking one lane in
 * start order, each span either starts after the open ones ended or ends inside the
 * innermost open one. Returns the spans checked; *bad counts the ones that partly overlap. */
static size_t check_trace_nesting(const json_t *doc, size_t *bad)
{
    const json_t *ev = json_object_get(doc, "traceEvents");
    size_t n = 0, cap = moe_json_count(ev);
    span_ns_t *v = malloc(sizeof(*v) * (cap > 0 ? cap : 1));
    int64_t *open = malloc(sizeof(int64_t) * (cap > 0 ? cap : 1));
    *bad = 0;
    CHECK(v != NULL && open != NULL);
    for (size_t i = 0; v != NULL && open != NULL && i < cap; i++) {
        const json_t *e = json_array_get(ev, i);
        if (strcmp(moe_json_str(json_object_get(e, "ph"), ""), "X") == 0) {
            int64_t ts = llround(moe_json_num(json_object_get(e, "ts"), 0) * 1000.0);
            int64_t dur = llround(moe_json_num(json_object_get(e, "dur"), 0) * 1000.0);
            v[n++] = (span_ns_t){(int64_t)moe_json_num(json_object_get(e, "tid"), -1), ts, ts + dur};
        }
    }
    if (v != NULL) {
        qsort(v, n, sizeof(*v), cmp_span_ns);
    }
    size_t depth = 0;
    for (size_t i = 0; open != NULL && i < n; i++) {
        if (i > 0 && v[i].tid != v[i - 1].tid) {
            depth = 0;
        }
        while (depth > 0 && open[depth - 1] <= v[i].ts) {
            depth--;
        }
        if (depth > 0 && v[i].end > open[depth - 1]) {
            (*bad)++;
            continue;
        }
        open[depth++] = v[i].end;
    }
    free(v);
    free(open);
    return n;
}

/* runtime.chunks > 1: row exchanges of several chunks overlap in time on one rank. Every
 * lane of trace.json must still nest (Perfetto drops events that do not), and no span is
 * lost on the way: those that overlap go to extra lanes named after their lane. */
static void test_trace_nesting(fixture_t *fx)
{
    /* rank 1, exchange lane: [ts, dur] in ns; d0/d1 and c0/c1 overlap partly, c2 inside c1,
     * the step holds them all; rank 2 has the same on its lane, disjoint from rank 1's tid */
    static const int64_t spans[][3] = {
        {0, 1000, 0}, {100, 400, 0}, {300, 500, 1}, {600, 300, 1}, {650, 100, 1}, {850, 120, 0},
    };
    moe_report_t *r = &fx->rep;
    moe_rep_event_t *saved = r->events;
    int64_t saved_n = r->num_events, saved_dropped = r->events_dropped;
    moe_rep_event_t ev[2 * 6];
    int n = 0;
    for (int k = 1; k <= 2; k++) {
        for (size_t i = 0; i < sizeof(spans) / sizeof(spans[0]); i++) {
            bool step = i == 0;
            ev[n++] = (moe_rep_event_t){spans[i][0] + 7, spans[i][1], k,
                                        step ? MOE_TEV_STEP : MOE_TEV_EXCHANGE, 0,
                                        step ? 0 : (int)spans[i][2],
                                        step ? MOE_LANE_STEPS : MOE_LANE_EXCHANGE, 5, (int64_t)i};
        }
    }
    r->events = ev;
    r->num_events = n;
    r->events_dropped = 0;
    moe_error_t err;
    char path[MOE_PATH_MAX + 32];
    json_t *doc = NULL;
    snprintf(path, sizeof(path), "%s/trace.json", r->run_dir);
    CHECK_INT_EQ(moe_report_write_trace(r, &err), MOE_OK);
    CHECK_INT_EQ(moe_json_load_file(path, &doc, &err), MOE_OK);
    size_t bad = 0;
    CHECK_INT_EQ(check_trace_nesting(doc, &bad), n); /* every span written */
    CHECK_INT_EQ(bad, 0);
    /* greedy by start: d [100,500) on lane 2; [300,800) overlaps it: extra #2; [600,900)
     * fits lane 2 again, [650,750) inside it; [850,970) overlaps [600,900): lane #2, which
     * ended at 800. So one extra lane per rank. */
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "otherData.extra_lanes"), -1), 2, 0);
    const json_t *all = json_object_get(doc, "traceEvents");
    int named = 0, placed = 0;
    for (size_t i = 0; i < moe_json_count(all); i++) {
        const json_t *e = json_array_get(all, i);
        double pid = moe_json_num(json_object_get(e, "pid"), -1);
        double tid = moe_json_num(json_object_get(e, "tid"), -1);
        if (strcmp(moe_json_str(json_object_get(e, "name"), ""), "thread_name") == 0 &&
            strcmp(moe_json_str(moe_json_path(e, "args.name"), ""), "exchange #2") == 0) {
            named += tid == pid * 10000 + 5000;
        }
        if (strcmp(moe_json_str(json_object_get(e, "ph"), ""), "X") == 0 && tid == pid * 10000 + 5000) {
            double which = moe_json_num(moe_json_path(e, "args.chunk"), -1); /* = index */
            placed += which == 2 || which == 5;
        }
    }
    CHECK_INT_EQ(named, 2);
    CHECK_INT_EQ(placed, 4);
    json_decref(doc);
    r->events = saved;
    r->num_events = saved_n;
    r->events_dropped = saved_dropped;
    CHECK_INT_EQ(moe_report_write_trace(r, &err), MOE_OK);
}

static void test_trace(fixture_t *fx)
{
    moe_report_t *r = &fx->rep;
    char path[MOE_PATH_MAX + 32];
    json_t *doc = NULL;
    moe_error_t err;
    int64_t timeline = 0, mem = 0;
    double dropped = -1;
    snprintf(path, sizeof(path), "%s/trace.json", r->run_dir);
    CHECK_INT_EQ(moe_json_load_file(path, &doc, &err), MOE_OK);
    if (doc == NULL) {
        fprintf(stderr, "  %s\n", err.msg);
        return;
    }
    check_trace_doc(doc, r, &timeline, &dropped);
    for (int k = 0; k < r->world_size; k++) {
        mem += r->ranks[k].present ? r->ranks[k].num_mem : 0;
    }
    /* unbounded: every span, every memory sample, one tokens counter per (step, layer) */
    CHECK_INT_EQ(timeline, r->num_events + mem + REC_STEPS * r->num_layers);
    check_trace_lanes(doc, r);
    size_t bad = 0;
    CHECK_INT_EQ(check_trace_nesting(doc, &bad), r->num_events);
    CHECK_INT_EQ(bad, 0);
    CHECK_NEAR(dropped, (double)r->events_dropped, 0);
    json_decref(doc);

    /* bounded: at most max timeline events, the rest reported as dropped */
    int64_t saved = fx->cfg.prof_trace_max_events;
    fx->cfg.prof_trace_max_events = 100;
    CHECK_INT_EQ(moe_report_write_trace(r, &err), MOE_OK);
    CHECK_INT_EQ(moe_json_load_file(path, &doc, &err), MOE_OK);
    if (doc != NULL) {
        int64_t bounded = 0;
        check_trace_doc(doc, r, &bounded, &dropped);
        CHECK_INT_EQ(bounded, 100);
        CHECK_NEAR(dropped, (double)(r->events_dropped + timeline - 100), 0);
        CHECK_NEAR(moe_json_num(moe_json_path(doc, "otherData.max_events"), 0), 100, 0);
        json_decref(doc);
    }
    fx->cfg.prof_trace_max_events = saved;
    CHECK_INT_EQ(moe_report_write_trace(r, &err), MOE_OK);
}

static void test_csv(const fixture_t *fx)
{
    const moe_report_t *r = &fx->rep;
    char *m = slurp(r->run_dir, "metrics.csv", NULL), *c = slurp(r->run_dir, "comm.csv", NULL);
    CHECK(m != NULL && strncmp(m, "step,layer,expert,rank,tokens,compute_ms,gflops\n", 48) == 0);
    CHECK_INT_EQ(count_lines(m), 1 + r->num_metrics);
    CHECK(c != NULL && strncmp(c, "src,dst,bytes,messages,wait_ms,local\n", 37) == 0);
    CHECK_INT_EQ(count_lines(c), 1 + r->world_size * r->world_size);
    char want[64];
    snprintf(want, sizeof(want), "\n0,1,%" PRIu64 ",", r->bytes[1]);
    CHECK_STR_CONTAINS(c, want);
    CHECK_STR_CONTAINS(c, "\n1,1,0,0,0.000000,1\n"); /* the diagonal is marked local */
    free(m);
    free(c);
}

static void test_html(const fixture_t *fx)
{
    static const char *const ids[] = {"chart-load", "chart-latency", "chart-comm", "chart-memory",
                                      "chart-steps"};
    static const char *const remote[] = {
        "src=\"http", "href=\"http", "src='http", "href='http", "url(http", "url(//", "src=\"//",
        "href=\"//",  "@import",     "<script",   "<link",      "<iframe",  "<img"};
    char *h = slurp(fx->rep.run_dir, "report.html", NULL);
    CHECK(h != NULL);
    for (size_t i = 0; h != NULL && i < sizeof(ids) / sizeof(ids[0]); i++) {
        char want[64];
        snprintf(want, sizeof(want), "<svg id=\"%s\"", ids[i]);
        CHECK_INT_EQ(count_substr(h, want), 1);
    }
    for (size_t i = 0; h != NULL && i < sizeof(remote) / sizeof(remote[0]); i++) {
        CHECK(strstr(h, remote[i]) == NULL);
    }
    CHECK(h != NULL && strstr(h, "http://") == NULL && strstr(h, "https://") == NULL);
    CHECK_STR_CONTAINS(h, "Hottest expert:");
    CHECK_INT_EQ(count_substr(h, "PARTIAL"), fx->rep.partial ? 1 : 0);
    CHECK_STR_CONTAINS(h, "device cuda (" DEVICE ")");
    CHECK_STR_CONTAINS(h, "<tr><th>chunks</th><td>2 (runtime.chunks; one chunk&#39;s exchange");
    CHECK_STR_CONTAINS(h, "<h2 id=\"overlap\">Exchange hidden behind expert compute</h2>");
    CHECK_STR_CONTAINS(h, fx->rep.partial ? "<b>12.5%</b> of exchange time was hidden"
                                          : "<b>20.8%</b> of exchange time was hidden");
    CHECK_STR_CONTAINS(h, "<td class=\"num\">8.000</td><td class=\"num\">2.000</td>"
                          "<td class=\"num\">25.0%</td>");
    CHECK(h != NULL && strstr(h, "</html>") != NULL);
    free(h);
}

static void test_summary_txt(const fixture_t *fx)
{
    char *t = slurp(fx->rep.run_dir, "summary.txt", NULL);
    CHECK_STR_CONTAINS(t, "Hottest expert: layer 0 expert 3");
    CHECK_STR_CONTAINS(t, "Slowest expert: layer 1 expert 5");
    /* the straggler (rank 2) is the missing rank of the partial variant */
    CHECK_STR_CONTAINS(t, fx->rep.partial ? "Straggler: no straggler (1 rank with experts present: "
                                            "nothing to compare)."
                                          : "Straggler rank: rank 2");
    CHECK_STR_CONTAINS(t, "Exchange:");
    CHECK_STR_CONTAINS(t, "tokens/s");
    CHECK_STR_CONTAINS(t, "p99 ms");
    CHECK_STR_CONTAINS(t, "from\\to");
    if (fx->rep.partial) {
        CHECK_STR_CONTAINS(t, "*** PARTIAL: missing rank 2");
    } else {
        CHECK(t != NULL && strstr(t, "PARTIAL") == NULL);
    }
    /* the header, a row per rank, the run's figure and the finding */
    CHECK_STR_CONTAINS(t, "  transport        mpi, device cuda (NVIDIA H200), BLAS openblas");
    CHECK_STR_CONTAINS(t, "  chunks           2 (runtime.chunks; one chunk's exchange overlaps "
                          "another's expert compute)\n");
    CHECK_STR_CONTAINS(t, "Exchange hidden behind expert compute, by rank (ms per recorded step)");
    CHECK_STR_CONTAINS(t, "  rank  host    device       steps  in flight ms    hidden ms  "
                          "hidden %\n");
    CHECK_STR_CONTAINS(t, "     0  node-a  NVIDIA H200     10         8.000        0.000      0.0%\n");
    CHECK_STR_CONTAINS(t, "     1  node-a  NVIDIA H200     10         8.000        2.000     25.0%\n");
    if (fx->rep.partial) {
        CHECK_STR_CONTAINS(t, "     2  node-b  records missing\n");
        CHECK_STR_CONTAINS(t, "  all ranks present: 12.5% of exchange time in flight hidden behind "
                              "expert compute (hidden / in flight summed over the ranks)\n");
        CHECK_STR_CONTAINS(t, "  * Overlap: 12.5% of exchange time was hidden behind expert "
                              "compute (runtime.chunks 2; summed over the ranks present).\n");
    } else {
        CHECK_STR_CONTAINS(t, "     2  node-b  NVIDIA H200     10         8.000        3.000     37.5%\n");
        CHECK_STR_CONTAINS(t, "  all ranks present: 20.8% of exchange time in flight hidden behind "
                              "expert compute (hidden / in flight summed over the ranks)\n");
        CHECK_STR_CONTAINS(t, "  * Overlap: 20.8% of exchange time was hidden behind expert "
                              "compute (runtime.chunks 2; summed over the ranks present).\n");
    }
    free(t);
    t = slurp(fx->rep.run_dir, "summary_rank_1.txt", NULL);
    CHECK_STR_CONTAINS(t, "  exchange in flight 8.000 ms per step, 25.0% of it hidden behind expert "
                          "compute (2.000 ms); device NVIDIA H200, runtime.chunks 2\n");
    free(t);
    t = slurp(fx->rep.run_dir, "summary_rank_0.txt", NULL);
    CHECK_STR_CONTAINS(t, "  exchange in flight 8.000 ms per step, 0.0% of it hidden");
    free(t);
}

static void test_find(const fixture_t *fx)
{
    moe_report_findings_t f;
    moe_report_find(&fx->rep, &f);
    CHECK_INT_EQ(f.hot_layer, HOT_LAYER);
    CHECK_INT_EQ(f.hot_expert, HOT_EXPERT);
    CHECK(f.hot_share > 2.0);
    CHECK_INT_EQ(f.slow_layer, SLOW_LAYER);
    CHECK_INT_EQ(f.slow_expert, SLOW_EXPERT);
    CHECK(f.slow_vs_median > 0.0 && f.slow_vs_median < 0.5);
    CHECK(f.slow_p99_ns > 0.0);
    CHECK_INT_EQ(f.straggler_rank, 2);
    CHECK(f.straggler_ratio > 1.0);
    CHECK_INT_EQ(f.straggler_n, 2);
    /* shares: each present rank's exchange (idle) over its step time, averaged */
    double ex = 0.0, idle = 0.0;
    int n = 0;
    for (int i = 0; i < fx->rep.world_size; i++) {
        const moe_rep_rank_t *k = &fx->rep.ranks[i];
        if (k->present && k->phase[MOE_PHASE_STEP].sum > 0.0) {
            ex += k->exchange_ns / k->phase[MOE_PHASE_STEP].sum;
            idle += k->idle_ns / k->phase[MOE_PHASE_STEP].sum;
            n++;
        }
    }
    CHECK(n > 1);
    CHECK_NEAR(f.exchange_share, ex / n, 1e-12);
    CHECK_NEAR(f.idle_share, idle / n, 1e-12);

    moe_report_t empty;
    memset(&empty, 0, sizeof(empty));
    moe_report_find(&empty, &f);
    CHECK_INT_EQ(f.hot_layer, -1);
    CHECK_INT_EQ(f.straggler_rank, -1);
    moe_report_free(NULL);
    moe_report_free(&empty);
}

/* Text from the run (host names) is escaped for HTML and JSON. */
static void test_escaping(fixture_t *fx)
{
    static const char host[] = "n<1>&\"q\"\\x";
    char saved[64], path[MOE_PATH_MAX + 32];
    moe_error_t err;
    json_t *doc = NULL;
    memcpy(saved, fx->rep.ranks[1].host, sizeof(saved));
    snprintf(fx->rep.ranks[1].host, sizeof(fx->rep.ranks[1].host), "%s", host);
    CHECK_INT_EQ(moe_report_write_html(&fx->rep, &err), MOE_OK);
    CHECK_INT_EQ(moe_report_write_json(&fx->rep, &err), MOE_OK);
    CHECK_INT_EQ(moe_report_write_trace(&fx->rep, &err), MOE_OK);
    char *h = slurp(fx->rep.run_dir, "report.html", NULL);
    CHECK_STR_CONTAINS(h, "n&lt;1&gt;&amp;&quot;q&quot;\\x");
    CHECK(h != NULL && strstr(h, host) == NULL);
    free(h);
    snprintf(path, sizeof(path), "%s/summary.json", fx->rep.run_dir);
    CHECK_INT_EQ(moe_json_load_file(path, &doc, &err), MOE_OK);
    CHECK(strcmp(moe_json_str(moe_json_path(doc, "ranks.1.host"), ""), host) == 0);
    json_decref(doc);
    snprintf(path, sizeof(path), "%s/trace.json", fx->rep.run_dir);
    CHECK_INT_EQ(moe_json_load_file(path, &doc, &err), MOE_OK);
    json_decref(doc);
    memcpy(fx->rep.ranks[1].host, saved, sizeof(saved));
    CHECK_INT_EQ(moe_report_write_all(&fx->rep, &err), MOE_OK);
}

/* A folder that cannot be written: every writer fails with the file's path, none crashes. */
static void test_write_errors(fixture_t *fx)
{
    char saved[MOE_PATH_MAX];
    moe_error_t err;
    moe_error_clear(&err);
    memcpy(saved, fx->rep.run_dir, sizeof(saved));
    snprintf(fx->rep.run_dir, sizeof(fx->rep.run_dir), "/nonexistent/moed-report");
    CHECK_INT_EQ(moe_report_write_all(&fx->rep, &err), MOE_ERR_IO);
    CHECK_STR_CONTAINS(err.msg, "/nonexistent/moed-report/summary.json");
    CHECK_INT_EQ(moe_report_write_html(&fx->rep, &err), MOE_ERR_IO);
    CHECK_STR_CONTAINS(err.msg, "report.html");
    CHECK_INT_EQ(moe_report_write_trace(&fx->rep, &err), MOE_ERR_IO);
    CHECK_STR_CONTAINS(err.msg, "trace.json");
    CHECK_INT_EQ(moe_report_write_rank_summaries(&fx->rep, &err), MOE_ERR_IO);
    CHECK_STR_CONTAINS(err.msg, "summary_rank_0.txt");
    CHECK_INT_EQ(moe_report_write_all(NULL, &err), MOE_ERR_INVALID_ARG);
    memcpy(fx->rep.run_dir, saved, sizeof(saved));
}

static char *headline_of(const moe_report_t *r)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f != NULL);
    if (f == NULL) {
        return NULL;
    }
    moe_report_print_headline(r, f);
    fclose(f);
    return buf;
}

/* The headline: ranks that recorded (not the world), plurals, no second tokens/s line (the
 * run's summary prints it), the hottest expert by demand with its kept and dropped. */
static void test_headline(fixture_t *fx)
{
    moe_report_t *r = &fx->rep;
    char *buf = headline_of(r);
    CHECK(buf != NULL && strstr(buf, "tokens/s") == NULL);
    CHECK_STR_CONTAINS(buf, fx->rep.run_dir);
    CHECK_STR_CONTAINS(buf, "moed: profile: 10 steps recorded on 3 of 3 ranks\n");
    /* by hand: layer 0 demand = kept + 40 for expert 3; mean over 8 experts */
    double sum = 0.0;
    for (int e = 0; e < r->num_experts; e++) {
        sum += (double)(fx_tokens(0, e, r->num_experts) * REC_STEPS) + (e == HOT_EXPERT ? 40 : 0);
    }
    uint64_t kept = (uint64_t)fx_tokens(0, HOT_EXPERT, r->num_experts) * REC_STEPS;
    char want[160];
    snprintf(want, sizeof(want),
             "hottest expert: layer 0 expert 3, demand %.2fx its layer's mean (kept %" PRIu64
             ", dropped 40)",
             (double)(kept + 40) / (sum / r->num_experts), kept);
    CHECK_STR_CONTAINS(buf, want);
    double all = sum; /* every layer's demand: layer 1 drops nothing */
    for (int e = 0; e < r->num_experts; e++) {
        all += (double)(fx_tokens(1, e, r->num_experts) * REC_STEPS);
    }
    snprintf(want, sizeof(want),
             "  dropped: %.1f%% of %.0f expert choices (capacity limit); most: layer 0 expert 3 "
             "(40 of %" PRIu64 ")\n",
             100.0 * 40.0 / all, all, kept + 40);
    CHECK_STR_CONTAINS(buf, want);
    free(buf);
    /* rank 1 not profiled, 1 recorded step: "1 step recorded on 2 of 3 ranks" */
    r->ranks[1].present = false;
    r->ranks[1].profiled = false;
    int64_t saved = r->recorded_steps;
    r->recorded_steps = 1;
    buf = headline_of(r);
    CHECK_STR_CONTAINS(buf, "moed: profile: 1 step recorded on 2 of 3 ranks\n");
    free(buf);
    r->ranks[1].present = r->ranks[1].profiled = true;
    r->recorded_steps = saved;
}

/* Drops: an expert whose overflow was dropped is the hottest by demand though others kept
 * more; the findings name the drop share and the experts that dropped most, most first. */
static void test_drops(fixture_t *fx)
{
    moe_report_t *r = &fx->rep;
    moe_rep_layer_t *y = &r->layers[1];
    uint64_t saved_d = y->demand[6], saved_x = y->dropped[6];
    y->dropped[6] = 20000;
    y->demand[6] = y->kept[6] + 20000;
    moe_report_findings_t f;
    moe_report_find(r, &f);
    CHECK(f.hot_by_demand);
    CHECK_INT_EQ(f.hot_layer, 1);
    CHECK_INT_EQ(f.hot_expert, 6);
    CHECK_INT_EQ(f.hot_kept, y->kept[6]);
    CHECK_INT_EQ(f.hot_dropped, 20000);
    CHECK_INT_EQ(f.dropped_total, 20040);
    CHECK_INT_EQ(f.num_drops, 2);
    CHECK(f.drop_layer[0] == 1 && f.drop_expert[0] == 6 && f.drop_count[0] == 20000);
    CHECK(f.drop_layer[1] == 0 && f.drop_expert[1] == 3 && f.drop_count[1] == 40);
    double share = 20040.0 / (double)f.demand_total;
    moe_error_t err;
    CHECK_INT_EQ(moe_report_write_summary(r, &err), MOE_OK);
    CHECK_INT_EQ(moe_report_write_html(r, &err), MOE_OK);
    CHECK_INT_EQ(moe_report_write_json(r, &err), MOE_OK);
    char want[256];
    char *t = slurp(r->run_dir, "summary.txt", NULL);
    snprintf(want, sizeof(want), "  * Hottest expert: layer 1 expert 6 (rank 2): demand %" PRIu64
             " choices, %.2fx the mean of its layer; kept %" PRIu64 ", dropped 20000.\n",
             y->demand[6], f.hot_share, y->kept[6]);
    CHECK_STR_CONTAINS(t, want);
    snprintf(want, sizeof(want), "  * Drops: %.1f%% of expert choices were dropped by the capacity "
             "limit (20040 of %" PRIu64 "); most: layer 1 expert 6 (20000 of %" PRIu64 "), layer 0 "
             "expert 3 (40 of %" PRIu64 ").\n", 100.0 * share, f.demand_total, y->demand[6],
             r->layers[0].demand[3]);
    CHECK_STR_CONTAINS(t, want);
    free(t);
    t = slurp(r->run_dir, "report.html", NULL);
    CHECK_STR_CONTAINS(t, "<li><b>Drops:</b>");
    CHECK_STR_CONTAINS(t, "most: layer 1 expert 6 (20000 of");
    for (size_t i = 0; i < 3; i++) {
        static const char *const maps[3] = {"<svg id=\"chart-load\"", "<svg id=\"chart-demand\"",
                                            "<svg id=\"chart-dropped\""};
        CHECK_INT_EQ(count_substr(t, maps[i]), 1);
    }
    free(t);
    char path[MOE_PATH_MAX + 32];
    json_t *doc = NULL;
    snprintf(path, sizeof(path), "%s/summary.json", r->run_dir);
    CHECK_INT_EQ(moe_json_load_file(path, &doc, &err), MOE_OK);
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "findings.hot_expert"), -1), 6, 0);
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "findings.hot_dropped"), -1), 20000, 0);
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "findings.drop_share"), -1), share, 1e-9);
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "findings.top_drops.0.dropped"), -1), 20000, 0);
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "findings.top_drops.1.expert"), -1), 3, 0);
    CHECK_INT_EQ(moe_json_count(moe_json_path(doc, "findings.top_drops")), 2);
    json_decref(doc);
    y->demand[6] = saved_d;
    y->dropped[6] = saved_x;
    CHECK_INT_EQ(moe_report_write_all(r, &err), MOE_OK);
}

/* The x extent of the element whose hover title starts with `title` inside chart `id`: the
 * rect or text drawn for it (before the title for heatmap cells, after it for latency
 * bars). False when the title is not in that chart. */
static bool chart_item_x(const char *html, const char *id, const char *title, double *x0,
                         double *x1)
{
    char open[64];
    snprintf(open, sizeof(open), "<svg id=\"%s\"", id);
    const char *svg = strstr(html, open), *end = svg != NULL ? strstr(svg, "</svg>") : NULL;
    const char *t = svg != NULL ? strstr(svg, title) : NULL;
    if (t == NULL || t > end) {
        return false;
    }
    const char *tag = t;
    while (tag > svg && strncmp(tag, "<rect", 5) != 0) { /* the cell this title is in */
        tag--;
    }
    if (t - svg >= 3 && strncmp(t - 3, "<g>", 3) == 0) { /* a latency bar: after its title */
        tag = strstr(t, "</title>") + 8;
    }
    const char *xs = strstr(tag, " x=\""), *ws = strstr(tag, " width=\"");
    if (xs == NULL) {
        return false;
    }
    *x0 = strtod(xs + 4, NULL);
    *x1 = *x0 + (ws != NULL && ws < strchr(tag + 1, '>') ? strtod(ws + 8, NULL) : 0.0);
    return true;
}

/* 256 and 1024 experts: every expert of every chart lies inside the drawing width (1200 px:
 * the charts wrap experts into rows), so each can be seen and hovered. */
static void test_html_wide(const char *root)
{
    static const int widths[2] = {256, 1024};
    for (int w = 0; w < 2; w++) {
        shape_t s = {3, 2, widths[w], false, 1000.0, NULL, NULL};
        char name[32];
        snprintf(name, sizeof(name), "wide%d", widths[w]);
        fixture_t *fx = fx_written(root, name, &s, NULL);
        if (fx == NULL) {
            continue;
        }
        char *h = slurp(fx->rep.run_dir, "report.html", NULL);
        static const char *const charts[4] = {"chart-load", "chart-demand", "chart-dropped",
                                              "chart-latency"};
        int inside = 0, found = 0;
        for (int c = 0; h != NULL && c < 4; c++) {
            for (int l = 0; l < s.layers; l++) {
                for (int e = 0; e < s.experts; e++) {
                    char title[64];
                    double x0 = -1, x1 = -1;
                    snprintf(title, sizeof(title), "<title>layer %d expert %d (", l, e);
                    bool ok = chart_item_x(h, charts[c], title, &x0, &x1);
                    found += ok;
                    inside += ok && x0 >= 0.0 && x1 <= 1200.0;
                }
            }
        }
        CHECK_INT_EQ(found, 4 * s.layers * s.experts);
        CHECK_INT_EQ(inside, 4 * s.layers * s.experts);
        free(h);
        fx_drop(fx);
    }
}

/* The issue's scale, 256 experts x 16 layers on 32 ranks: report.html stays <= 5 MB and
 * every file is written (a larger page is unreadable in a browser, and slow to open). */
static void test_html_scale(const char *root)
{
    shape_t s = {32, 16, 256, false, 1000.0, NULL, NULL};
    fixture_t *fx = fx_written(root, "scale", &s, NULL);
    CHECK(fx != NULL);
    if (fx == NULL) {
        return;
    }
    size_t n = 0;
    char *h = slurp(fx->rep.run_dir, "report.html", &n);
    CHECK(h != NULL && n > 0);
    printf("scale: 256 experts x 16 layers x 32 ranks: report.html %zu bytes\n", n);
    CHECK(n <= 5u << 20);
    CHECK_STR_CONTAINS(h, "<title>layer 15 expert 255 (");
    free(h);
    fx_drop(fx);
}

/* The longest line of the rank-to-rank part of summary.txt (from its "Bytes rank to rank"
 * rule to the next section, "Memory per rank"). */
static size_t matrix_section_width(const char *t, bool *full_matrix)
{
    const char *b = t != NULL ? strstr(t, "Bytes rank to rank") : NULL;
    const char *e = b != NULL ? strstr(b, "\nMemory per rank") : NULL;
    size_t widest = 0;
    *full_matrix = b != NULL && strstr(b, "from\\to") != NULL &&
                   (e == NULL || strstr(b, "from\\to") < e);
    for (const char *l = b; l != NULL && (e == NULL || l < e);) {
        const char *nl = strchr(l, '\n');
        size_t n = nl != NULL ? (size_t)(nl - l) : strlen(l);
        widest = n > widest ? n : widest;
        l = nl != NULL ? nl + 1 : NULL;
    }
    return widest;
}

/* 8 to 40 ranks: the rank matrices keep every line within 160 characters: columns as
 * narrow as their widest cell while they fit (8 ranks of this profile: cells of 8
 * characters fit 15 ranks), per-rank totals beyond. */
static void test_text_wide(const char *root)
{
    static const int worlds[4] = {8, 17, 24, 40};
    for (int w = 0; w < 4; w++) {
        shape_t s = {worlds[w], 1, 64, false, 1000.0, NULL, NULL};
        char name[32];
        snprintf(name, sizeof(name), "ranks%d", worlds[w]);
        fixture_t *fx = fx_written(root, name, &s, NULL);
        if (fx == NULL) {
            continue;
        }
        char *t = slurp(fx->rep.run_dir, "summary.txt", NULL);
        bool full = false;
        size_t widest = matrix_section_width(t, &full);
        CHECK(widest > 0 && widest <= 160);
        CHECK_INT_EQ(full, worlds[w] <= 8);
        CHECK_STR_CONTAINS(t, full ? "received" : "the full matrices are in comm.csv");
        free(t);
        fx_drop(fx);
    }
}

/* Memory lines of equal series are each drawn in their own dashes (no line hides
 * another) and the legend says which coincide; the step bars end at summary.txt's step ms. */
static void test_html_lines(fixture_t *fx)
{
    moe_report_t *r = &fx->rep;
    moe_error_t err;
    for (int i = 0; i < r->ranks[2].num_mem; i++) { /* rank 2's series = rank 1's */
        r->ranks[2].mem[i] = r->ranks[1].mem[i];
    }
    CHECK_INT_EQ(moe_report_write_html(r, &err), MOE_OK);
    char *h = slurp(r->run_dir, "report.html", NULL);
    CHECK_STR_CONTAINS(h, "equal lines, drawn in alternating dashes: ranks 1, 2</text>");
    CHECK_INT_EQ(count_substr(h, "stroke-dasharray=\"6 6\" stroke-dashoffset=\"0\" points="), 1);
    CHECK_INT_EQ(count_substr(h, "stroke-dasharray=\"6 6\" stroke-dashoffset=\"6\" points="), 1);
    for (int k = 0; k < r->world_size; k++) {
        char want[64];
        snprintf(want, sizeof(want), ">%.3f ms</text>",
                 r->ranks[k].phase[MOE_PHASE_STEP].sum / (double)r->ranks[k].steps / 1e6);
        CHECK_STR_CONTAINS(h, want);
    }
    free(h);
    free(r->ranks[2].mem); /* fx_rank allocates the series anew */
    fx_rank(r, &fx->cfg, 2, false); /* rank 2's own series again */
    CHECK_INT_EQ(moe_report_write_all(r, &err), MOE_OK);
}

/* Every step a warm-up step: the report says so instead of "records missing". */
static void test_all_warmup(fixture_t *fx)
{
    moe_report_t *r = &fx->rep;
    moe_error_t err;
    int64_t steps[8];
    for (int k = 0; k < r->world_size; k++) {
        steps[k] = r->ranks[k].steps;
        r->ranks[k].steps = 0;
    }
    r->all_warmup = true;
    r->recorded_steps = 0;
    CHECK_INT_EQ(moe_report_write_summary(r, &err), MOE_OK);
    char *t = slurp(r->run_dir, "summary.txt", NULL);
    CHECK(t != NULL && strstr(t, "records missing") == NULL);
    CHECK_STR_CONTAINS(t, "     0  node-a  no step recorded (all steps were warm-up)\n");
    CHECK_STR_CONTAINS(t, "none recorded: all steps were warm-up (profiler.warmup_steps 5)");
    free(t);
    t = headline_of(r);
    CHECK_STR_CONTAINS(t, "no step recorded: all 20 steps were warm-up (profiler.warmup_steps 5)");
    free(t);
    for (int k = 0; k < r->world_size; k++) {
        r->ranks[k].steps = steps[k];
    }
    r->all_warmup = false;
    r->recorded_steps = REC_STEPS;
    CHECK_INT_EQ(moe_report_write_all(r, &err), MOE_OK);
}

/* Demand of expert e of layer l in the merge test's routing record; 30 kept at most. */
static uint64_t mt_demand(int l, int e)
{
    return 10 * (uint64_t)(e + 1) + (uint64_t)l;
}

static uint64_t mt_kept(int l, int e)
{
    return mt_demand(l, e) < 30 ? mt_demand(l, e) : 30;
}

/* Records of ranks 0 (routes, no experts) and 2 (experts 4-7); rank 1 (experts 0-3) is not
 * profiled. */
static bool mt_records(moe_prof_record_t *recs)
{
    static const int local[3] = {0, 0, 4};
    for (int k = 0; k < 3; k += 2) {
        moe_prof_record_t *rec = &recs[k];
        if (moe_prof_record_alloc(rec, 3, 2, 8, local[k]) != MOE_OK) {
            return false;
        }
        rec->rank = k;
        rec->flags = MOE_PROF_FLAG_FINAL | MOE_PROF_FLAG_WINDOW_END;
        rec->steps_recorded = 4;
        for (int i = 0; i < local[k]; i++) {
            rec->local_ids[i] = 4 + i;
            for (int l = 0; l < 2; l++) {
                moe_rec_expert_t *x = &rec->experts[l * local[k] + i];
                moe_hist_reset(&x->hist);
                moe_hist_add(&x->hist, 2000000);
                x->tokens = mt_kept(l, 4 + i);
                x->calls = 4;
                x->flops = 1e9;
            }
        }
        for (int i = 0; k == 0 && i < 2 * 8; i++) {
            rec->demand[i] = mt_demand(i / 8, i % 8);
            rec->kept[i] = mt_kept(i / 8, i % 8);
            rec->dropped[i] = rec->demand[i] - rec->kept[i];
        }
    }
    return true;
}

/* Experts of a rank outside profiled_ranks: their tokens are the router's count, marked as
 * such in summary.txt and summary.json, their latency unknown ("-", null), not 0. */
static void test_merge_router(const char *root)
{
    fixture_t fx;
    memset(&fx, 0, sizeof(fx));
    snprintf(fx.yaml, sizeof(fx.yaml),
             "model:\n  hidden_dim: 64\n  ffn_dim: 128\n  num_experts: 8\n  top_k: 2\n"
             "  num_layers: 2\n  capacity_factor: 1.0\nplacement:\n  master_rank: 0\n"
             "  experts: auto\nworkload:\n  tokens_per_step: 64\n  steps: 6\nprofiler:\n"
             "  enabled: true\n  profiled_ranks: [0, 2]\n  warmup_steps: 2\n"
             "  output_dir: %s/merged\n",
             root);
    moe_error_t err;
    CHECK_INT_EQ(moe_cfg_parse(fx.yaml, strlen(fx.yaml), "m.yaml", 3, &fx.cfg, &err), MOE_OK);
    static const char hosts[3][64] = {"h0", "h1", "h2"};
    moe_prof_record_t recs[3];
    memset(recs, 0, sizeof(recs));
    moe_merge_t *m = moe_merge_create(&fx.cfg, 3, hosts);
    bool have[3] = {true, false, true};
    CHECK(m != NULL && mt_records(recs));
    CHECK_INT_EQ(m != NULL ? moe_merge_window(m, recs, have, 0, &err) : -1, MOE_OK);
    moe_prof_run_t run = {6, 6, 1.0, fx.yaml, strlen(fx.yaml), false, 1.0, NULL};
    moe_prof_static_t info;
    memset(&info, 0, sizeof(info));
    info.transport = "mpi";
    info.blas = "openblas";
    info.device = "cpu";
    info.chunks = 1;
    moe_report_t *r = m != NULL ? moe_merge_finish(m, &run, &info) : NULL;
    for (int i = 0; r != NULL && i < 2 * 8; i++) {
        const moe_rep_expert_t *x = &r->experts[i];
        CHECK_INT_EQ(x->router_count, x->expert < 4);     /* rank 1's experts */
        CHECK_INT_EQ(x->tokens, mt_kept(i / 8, i % 8)); /* both: what was kept */
        CHECK_INT_EQ(x->calls, x->expert < 4 ? 0 : 4);
    }
    CHECK(r != NULL && !r->partial);
    CHECK_INT_EQ(r != NULL ? moe_report_write_summary(r, &err) : -1, MOE_OK);
    CHECK_INT_EQ(r != NULL ? moe_report_write_json(r, &err) : -1, MOE_OK);
    char *t = r != NULL ? slurp(r->run_dir, "summary.txt", NULL) : NULL;
    /* layer 0 expert 0: demand 10, all kept; rank 1's row: unknown calls and latency */
    CHECK_STR_CONTAINS(t, "      0       0     1  h1            10          10           0        -"
                          "          -          -          -          -          -         -"
                          "  (router's count)\n");
    CHECK_STR_CONTAINS(t, "      0       4     2  h2            50          30          20        4"
                          "      2.");
    CHECK_INT_EQ(count_substr(t, "(router's count)\n"), 2 * 4);
    free(t);
    char path[MOE_PATH_MAX + 32];
    json_t *doc = NULL;
    snprintf(path, sizeof(path), "%s/summary.json", r != NULL ? r->run_dir : "");
    CHECK_INT_EQ(moe_json_load_file(path, &doc, &err), MOE_OK);
    CHECK(json_is_true(moe_json_path(doc, "experts.1.router_count")));
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "experts.1.tokens"), -1), 20, 0);
    CHECK(json_is_null(moe_json_path(doc, "experts.1.latency_ms.p50")));
    CHECK(json_is_null(moe_json_path(doc, "experts.1.calls")));
    CHECK(json_is_false(moe_json_path(doc, "experts.5.router_count")));
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "experts.5.latency_ms.p50"), -1), 2.0, 0.2);
    json_decref(doc);
    if (r != NULL) {
        static const char *const files[3] = {"summary.txt", "summary.json", "metrics.csv"};
        for (int i = 0; i < 3; i++) {
            snprintf(path, sizeof(path), "%s/%s", r->run_dir, files[i]);
            unlink(path);
        }
        rmdir(r->run_dir);
    }
    snprintf(path, sizeof(path), "%s/merged", root);
    rmdir(path);
    moe_merge_destroy(m);
    moe_prof_record_free(&recs[0]);
    moe_prof_record_free(&recs[2]);
}

/* The wait tests' job: 3 ranks, master routing; rank 0 routes and hosts no experts, ranks
 * 1 and 2 host experts 0-3 and 4-7. One recorded step of one layer. */
/* Two recorded steps in a row (one exchange each, num_layers 1), every phase's begin and
 * end given per rank on rank 0's clock: [exchange][rank]. */
typedef struct wt_seq {
    double disp_b[2][3], disp_e[2][3], comb_b[2][3], comb_e[2][3];
} wt_seq_t;

typedef struct wt_case {
    const char *name;
    double disp_us[3], comb_us[3]; /* arrivals on rank 0's clock */
    double compute_us[3];          /* gate (rank 0) or expert (ranks 1, 2) per step */
    const wt_seq_t *seq;           /* set: two steps as given, not disp_us / comb_us */
} wt_case_t;

#define WT_STEP_US 2000.0
#define WT_TAIL_US 50.0 /* every phase ends this long after the last arrival */

static double wt_last(const double *a)
{
    return fmax(a[0], fmax(a[1], a[2]));
}

/* Rank k's record for case c; rank 2's clock runs 1 ms ahead of rank 0's, so arrivals
 * must be aligned before they are compared. */
static bool wt_record(moe_prof_record_t *rec, const wt_case_t *c, int k)
{
    int local = k == 0 ? 0 : 4;
    if (moe_prof_record_alloc(rec, 3, 1, 8, local) != MOE_OK) {
        return false;
    }
    int n = c->seq != NULL ? 2 : 1;
    rec->exchanges = calloc((size_t)n, sizeof(*rec->exchanges));
    if (rec->exchanges == NULL) {
        return false;
    }
    rec->num_exchanges = n;
    rec->rank = k;
    rec->flags = MOE_PROF_FLAG_FINAL | MOE_PROF_FLAG_WINDOW_END;
    rec->steps_recorded = n;
    rec->clock_offset_ns = k == 2 ? 1e6 : 0.0;
    int64_t off = (int64_t)rec->clock_offset_ns;
    double phase[MOE_PHASE_COUNT] = {0};
    for (int i = 0; i < n; i++) {
        moe_rec_exchange_t *x = &rec->exchanges[i];
        const wt_seq_t *q = c->seq;
        x->step = 1 + i;
        x->dispatch_begin_ns = (int64_t)((q ? q->disp_b[i][k] : c->disp_us[k]) * 1e3) + off;
        x->dispatch_end_ns =
            (int64_t)((q ? q->disp_e[i][k] : wt_last(c->disp_us) + WT_TAIL_US) * 1e3) + off;
        x->combine_begin_ns = (int64_t)((q ? q->comb_b[i][k] : c->comb_us[k]) * 1e3) + off;
        x->combine_end_ns =
            (int64_t)((q ? q->comb_e[i][k] : wt_last(c->comb_us) + WT_TAIL_US) * 1e3) + off;
        phase[MOE_PHASE_DISPATCH] += (double)(x->dispatch_end_ns - x->dispatch_begin_ns);
        phase[MOE_PHASE_COMBINE] += (double)(x->combine_end_ns - x->combine_begin_ns);
    }
    phase[MOE_PHASE_STEP] = n * WT_STEP_US * 1e3;
    phase[k == 0 ? MOE_PHASE_GATE : MOE_PHASE_EXPERT] = n * c->compute_us[k] * 1e3;
    for (int p = 0; p < MOE_PHASE_COUNT; p++) { /* sums over the steps; min, max per step */
        rec->phase_sum[p] = phase[p];
        rec->phase_min[p] = rec->phase_max[p] = phase[p] / n;
    }
    for (int i = 0; i < local; i++) {
        rec->local_ids[i] = 4 * (k - 1) + i;
        moe_hist_reset(&rec->experts[i].hist);
    }
    for (int e = 0; k == 0 && e < 8; e++) { /* the router's counts: the headline needs some */
        rec->demand[e] = rec->kept[e] = 10 + (uint64_t)e;
    }
    return true;
}

typedef struct wt_run {
    moe_config_t cfg;
    char yaml[512];
    moe_merge_t *m;
    moe_prof_record_t recs[3];
    moe_report_t *r;
    json_t *doc;
    char *headline, *summary;
} wt_run_t;

/* Merge case c's records, write summary.txt and summary.json, read them back. */
static bool wt_run(wt_run_t *w, const char *root, const wt_case_t *c)
{
    memset(w, 0, sizeof(*w));
    snprintf(w->yaml, sizeof(w->yaml),
             "model:\n  hidden_dim: 64\n  ffn_dim: 128\n  num_experts: 8\n  top_k: 2\n"
             "  num_layers: 1\nplacement:\n  master_rank: 0\n  experts: auto\n"
             "workload:\n  tokens_per_step: 64\n  steps: 2\nprofiler:\n  enabled: true\n"
             "  warmup_steps: 1\n  output_dir: %s/waits\n",
             root);
    moe_error_t err;
    static const char hosts[3][64] = {"h0", "h1", "h2"};
    static const bool have[3] = {true, true, true};
    if (moe_cfg_parse(w->yaml, strlen(w->yaml), "w.yaml", 3, &w->cfg, &err) != MOE_OK ||
        (w->m = moe_merge_create(&w->cfg, 3, hosts)) == NULL) {
        return false;
    }
    for (int k = 0; k < 3; k++) {
        if (!wt_record(&w->recs[k], c, k)) {
            return false;
        }
    }
    if (moe_merge_window(w->m, w->recs, have, 0, &err) != MOE_OK) {
        return false;
    }
    moe_prof_run_t run = {2, 2, 1.0, w->yaml, strlen(w->yaml), false, 1.0, NULL};
    moe_prof_static_t info;
    memset(&info, 0, sizeof(info));
    info.transport = "mpi";
    info.blas = "openblas";
    info.device = "cpu";
    info.chunks = 1;
    w->r = moe_merge_finish(w->m, &run, &info);
    char path[MOE_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/summary.json", w->r->run_dir);
    if (moe_report_write_summary(w->r, &err) != MOE_OK ||
        moe_report_write_json(w->r, &err) != MOE_OK ||
        moe_report_write_html(w->r, &err) != MOE_OK ||
        moe_json_load_file(path, &w->doc, &err) != MOE_OK) {
        fprintf(stderr, "%s: %s\n", c->name, err.msg);
        return false;
    }
    w->headline = headline_of(w->r);
    w->summary = slurp(w->r->run_dir, "summary.txt", NULL);
    return w->headline != NULL && w->summary != NULL;
}

static void wt_done(wt_run_t *w, const char *root)
{
    if (w->r != NULL) {
        static const char *const files[4] = {"summary.txt", "summary.json", "report.html",
                                             "metrics.csv"};
        char path[MOE_PATH_MAX + 32];
        for (int i = 0; i < 4; i++) {
            snprintf(path, sizeof(path), "%s/%s", w->r->run_dir, files[i]);
            unlink(path);
        }
        rmdir(w->r->run_dir);
        snprintf(path, sizeof(path), "%s/waits", root);
        rmdir(path);
    }
    json_decref(w->doc);
    free(w->headline);
    free(w->summary);
    moe_merge_destroy(w->m);
    for (int k = 0; k < 3; k++) {
        moe_prof_record_free(&w->recs[k]);
    }
}

/* ms per step of one rank's figure in summary.json. */
static double wt_ms(const wt_run_t *w, int k, const char *what)
{
    char path[96];
    snprintf(path, sizeof(path), "ranks.%d.per_step_ms.%s", k, what);
    return moe_json_num(moe_json_path(w->doc, path), NAN);
}

/* Combine: the routing rank (no experts) waits for the expert ranks by design; the part of
 * its wait past their mean arrival, and every expert rank's wait for a slower expert rank,
 * is imbalance. A straggler only from 1.10x. */
static void test_merge_waits_combine(const char *root)
{
    static const wt_case_t cases[2] = {
        {"combine 1.05x", {0, 0, 0}, {0, 100, 300}, {100, 950, 1050}, NULL},
        {"combine 1.5x", {0, 0, 0}, {0, 100, 300}, {100, 500, 1500}, NULL},
    };
    for (int i = 0; i < 2; i++) {
        wt_run_t w;
        bool ok = wt_run(&w, root, &cases[i]);
        CHECK(ok);
        if (!ok) {
            wt_done(&w, root);
            continue;
        }
        CHECK(w.r->ranks[0].num_local == 0 && w.r->ranks[0].routes);
        CHECK(w.r->ranks[1].num_local == 4 && !w.r->ranks[1].routes);
        CHECK_NEAR(wt_ms(&w, 0, "structural_wait"), 0.200, 1e-9);
        CHECK_NEAR(wt_ms(&w, 0, "idle"), 0.100, 1e-9);
        CHECK_NEAR(wt_ms(&w, 1, "structural_wait"), 0.0, 1e-9);
        CHECK_NEAR(wt_ms(&w, 1, "idle"), 0.200, 1e-9);
        CHECK_NEAR(wt_ms(&w, 2, "structural_wait"), 0.0, 1e-9);
        CHECK_NEAR(wt_ms(&w, 2, "idle"), 0.0, 1e-9);
        for (int k = 0; k < 3; k++) { /* moving bytes: 50 us of each phase */
            CHECK_NEAR(wt_ms(&w, k, "exchange"), 0.100, 1e-9);
        }
        CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "ranks.0.share_of_step.structural_wait"), -1),
                   0.1, 1e-12);
        CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "findings.idle_share"), -1),
                   (0.1 + 0.2) / 2.0 / 3.0, 1e-9);
        CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "findings.structural_wait_share"), -1),
                   0.2 / 2.0 / 3.0, 1e-9); /* summary.json keeps 10 digits */
        CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "findings.straggler_threshold"), -1), 1.1,
                   1e-12);
        CHECK_STR_CONTAINS(w.headline, "; exchange: 5.0% of step time moving bytes, 5.0% waiting "
                                       "for slower ranks (most: rank 1 waiting for rank 2, 10.0% "
                                       "of its step; routing rank's designed wait: 3.3%, not "
                                       "imbalance)\n");
        /* every idle is a wait for rank 2, the last to arrive */
        CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "ranks.0.idle_waiting_for_ms.2"), -1),
                   0.100, 1e-9);
        CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "ranks.1.idle_waiting_for_ms.2"), -1),
                   0.200, 1e-9);
        CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "ranks.1.idle_waiting_for_ms.0"), -1),
                   0.0, 1e-9);
        CHECK_STR_CONTAINS(w.summary, "  rank 0 waited for rank 2 0.100 ms (5.0%)\n"
                                      "  rank 1 waited for rank 2 0.200 ms (10.0%)\n");
        CHECK_STR_CONTAINS(w.summary, "  * Exchange: 5.0% of step time goes to moving bytes and "
                                      "5.0% to waiting in the exchange for slower ranks (load "
                                      "imbalance); the routing rank's designed wait, not "
                                      "imbalance, is 3.3%");
        if (i == 0) {
            CHECK(json_is_null(moe_json_path(w.doc, "findings.straggler_rank")));
            CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "findings.straggler_ratio"), -1), 1.05,
                       1e-9);
            CHECK_STR_CONTAINS(w.headline, "; no straggler (ranks with experts within 1.05x of "
                                           "their mean compute; named from 1.10x);");
            CHECK_STR_CONTAINS(w.summary, "  * Straggler: no straggler (ranks with experts within "
                                          "1.05x of their mean compute; named from 1.10x).\n");
        } else {
            CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "findings.straggler_rank"), -1), 2, 0);
            CHECK_STR_CONTAINS(w.headline, "; straggler: rank 2, 1.50x the mean compute of the "
                                           "ranks with experts (named from 1.10x);");
            CHECK_STR_CONTAINS(w.summary, "  * Straggler rank: rank 2 (h2) computes 1.500 ms per "
                                          "step, 1.50x the mean of the ranks with experts (a "
                                          "straggler is named from 1.10x).\n");
        }
        wt_done(&w, root);
    }
}

/* Balanced: the expert ranks arrive together; all of the routing rank's wait is by design,
 * nothing is imbalance, no straggler; every writer shows the designed wait apart. */
static void test_merge_waits_balanced(const char *root)
{
    static const wt_case_t c = {"balanced", {0, 0, 0}, {0, 200, 200}, {100, 1000, 1000}, NULL};
    wt_run_t w;
    bool ok = wt_run(&w, root, &c);
    CHECK(ok);
    if (ok) {
        CHECK_NEAR(wt_ms(&w, 0, "structural_wait"), 0.200, 1e-9);
        for (int k = 0; k < 3; k++) {
            CHECK_NEAR(wt_ms(&w, k, "idle"), 0.0, 1e-9);
        }
        CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "findings.idle_share"), -1), 0.0, 1e-12);
        CHECK(json_is_null(moe_json_path(w.doc, "findings.straggler_rank")));
        CHECK_STR_CONTAINS(w.headline, "; no straggler (ranks with experts within 1.00x of their "
                                       "mean compute; named from 1.10x); exchange: 5.0% of step "
                                       "time moving bytes, 0.0% waiting for slower ranks "
                                       "(routing rank's designed wait: 3.3%, not imbalance)\n");
        /* summary.txt's table: rank 0's 0.200 ms designed wait, 10% of its step */
        CHECK_STR_CONTAINS(w.summary, "designed ms      %\n");
        CHECK_STR_CONTAINS(w.summary, "  0.000   0.0%        0.200  10.0%\n");
        char *h = slurp(w.r->run_dir, "report.html", NULL);
        CHECK_STR_CONTAINS(h, "<title>rank 0 designed wait: 0.200 ms per step (10.0% of the "
                              "step)</title>");
        CHECK_STR_CONTAINS(h, ">designed wait</text>");
        free(h);
    }
    wt_done(&w, root);
}

/* Dispatch: an expert-only rank (routes nothing) waits for the routing rank's gate by
 * design; waiting past the router's arrival for a slower expert rank is imbalance, and so
 * is the router's own wait for an expert rank. */
static void test_merge_waits_dispatch(const char *root)
{
    static const wt_case_t cases[2] = {
        {"dispatch early", {500, 0, 100}, {0, 0, 0}, {100, 1000, 1000}, NULL},
        {"dispatch late", {300, 0, 500}, {0, 0, 0}, {100, 1000, 1000}, NULL},
    };
    /* [case][rank]: structural, idle (ms per step) */
    static const double want[2][3][2] = {
        {{0.0, 0.0}, {0.500, 0.0}, {0.400, 0.0}},
        {{0.0, 0.200}, {0.300, 0.200}, {0.0, 0.0}},
    };
    for (int i = 0; i < 2; i++) {
        wt_run_t w;
        bool ok = wt_run(&w, root, &cases[i]);
        CHECK(ok);
        for (int k = 0; ok && k < 3; k++) {
            CHECK_NEAR(wt_ms(&w, k, "structural_wait"), want[i][k][0], 1e-9);
            CHECK_NEAR(wt_ms(&w, k, "idle"), want[i][k][1], 1e-9);
            CHECK_NEAR(wt_ms(&w, k, "exchange"), 0.100, 1e-9);
        }
        wt_done(&w, root);
    }
}

/* An expert rank's wait for the master's next dispatch while the master still waits for a
 * slower expert rank's rows is imbalance, booked against that rank (it was all booked as
 * the routing rank's designed wait); the master's merge and gate after the last rows are
 * back stay designed. Truth by construction: rank 1 computes 1500 us, rank 2 1000 us, so a
 * balanced placement would save rank 2 exactly 500 us a step; a balanced pair (10 us apart
 * from noise) books only those 10 us. Rank 0 routes (gate 100 us, merge 100 us), hosts no
 * experts; rank 2's clock runs 1 ms ahead. */
static void test_merge_waits_next_dispatch(const char *root)
{
    /* [exchange][rank 0, 1, 2]: step 1's combine, then step 2's dispatch */
    static const wt_seq_t skew = {
        .disp_b = {{0, 0, 0}, {1800, 1600, 1100}},
        .disp_e = {{50, 50, 50}, {1850, 1850, 1850}},
        .comb_b = {{50, 1550, 1050}, {3000, 3000, 3000}},
        .comb_e = {{1600, 1600, 1100}, {3050, 3050, 3050}},
    };
    static const wt_seq_t even = {
        .disp_b = {{0, 0, 0}, {1410, 1110, 1100}},
        .disp_e = {{50, 50, 50}, {1460, 1460, 1460}},
        .comb_b = {{50, 1060, 1050}, {3000, 3000, 3000}},
        .comb_e = {{1110, 1110, 1100}, {3050, 3050, 3050}},
    };
    static const wt_case_t cases[2] = {
        {"next dispatch 1.5x", {0}, {0}, {100, 1500, 1000}, &skew},
        {"next dispatch balanced", {0}, {0}, {100, 1000, 1000}, &even},
    };
    /* [case][rank]: idle, designed (ms per step over the 2 steps) and idle for rank 1 */
    static const double want[2][3][3] = {
        /* rank 2: 50 us in the combine + 450 us of the next dispatch for rank 1 (was 50
         * idle, 700 designed); 250 designed = rank 1's rows' travel + merge + gate */
        {{0.125, 0.625, 0.125}, {0.0, 0.100, 0.0}, {0.250, 0.125, 0.250}},
        /* rank 2: the 10 us in the combine only; 310 us designed (rows back, merge, gate) */
        {{0.0025, 0.5025, 0.0025}, {0.0, 0.150, 0.0}, {0.005, 0.155, 0.005}},
    };
    for (int i = 0; i < 2; i++) {
        wt_run_t w;
        bool ok = wt_run(&w, root, &cases[i]);
        CHECK(ok);
        for (int k = 0; ok && k < 3; k++) {
            char path[96];
            snprintf(path, sizeof(path), "ranks.%d.idle_waiting_for_ms.1", k);
            CHECK_NEAR(wt_ms(&w, k, "idle"), want[i][k][0], 1e-9);
            CHECK_NEAR(wt_ms(&w, k, "structural_wait"), want[i][k][1], 1e-9);
            CHECK_NEAR(moe_json_num(moe_json_path(w.doc, path), -1), want[i][k][2], 1e-9);
            for (int j = 0; j < 3; j++) { /* a rank's idle: all of it for rank 1 */
                snprintf(path, sizeof(path), "ranks.%d.idle_waiting_for_ms.%d", k, j);
                CHECK_NEAR(moe_json_num(moe_json_path(w.doc, path), -1),
                           j == 1 ? want[i][k][2] : 0.0, 1e-9);
            }
        }
        if (ok && i == 0) {
            CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "findings.idle_most_rank"), -1), 2, 0);
            CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "findings.idle_most_waiting_for"), -1),
                       1, 0);
            CHECK_NEAR(moe_json_num(moe_json_path(w.doc, "findings.idle_most_share"), -1),
                       0.125, 1e-9);
            CHECK_STR_CONTAINS(w.headline, "waiting for slower ranks (most: rank 2 waiting for "
                                           "rank 1, 12.5% of its step; routing rank's designed "
                                           "wait: ");
            CHECK_STR_CONTAINS(w.summary, "  rank 2 waited for rank 1 0.250 ms (12.5%)\n");
            CHECK_STR_CONTAINS(w.summary, "  * Most imbalance: rank 2 (h2) waited 12.5% of its "
                                          "step for rank 1 (h1).\n");
        }
        wt_done(&w, root);
    }
}

/* The same skewed pair of steps merged as two windows of one step each: the second
 * window's first dispatch looks back at the first window's last combine, so rank 2's wait
 * for rank 1 is the same 500 us (it was designed when a window's first exchange had
 * nothing to look back at). A window after a gap (step 3 missing) does not look back. */
static void test_merge_waits_windows(const char *root)
{
    static const wt_seq_t skew = {
        .disp_b = {{0, 0, 0}, {1800, 1600, 1100}},
        .disp_e = {{50, 50, 50}, {1850, 1850, 1850}},
        .comb_b = {{50, 1550, 1050}, {3000, 3000, 3000}},
        .comb_e = {{1600, 1600, 1100}, {3050, 3050, 3050}},
    };
    static const wt_case_t c = {"two windows", {0}, {0}, {100, 1500, 1000}, &skew};
    for (int gap = 0; gap < 2; gap++) {
        wt_run_t w;
        memset(&w, 0, sizeof(w));
        snprintf(w.yaml, sizeof(w.yaml),
                 "model:\n  hidden_dim: 64\n  ffn_dim: 128\n  num_experts: 8\n  top_k: 2\n"
                 "  num_layers: 1\nplacement:\n  master_rank: 0\n  experts: auto\n"
                 "workload:\n  tokens_per_step: 64\n  steps: 2\nprofiler:\n  enabled: true\n"
                 "  warmup_steps: 1\n  output_dir: %s/waits\n",
                 root);
        moe_error_t err;
        static const char hosts[3][64] = {"h0", "h1", "h2"};
        static const bool have[3] = {true, true, true};
        bool ok = moe_cfg_parse(w.yaml, strlen(w.yaml), "w.yaml", 3, &w.cfg, &err) == MOE_OK &&
                  (w.m = moe_merge_create(&w.cfg, 3, hosts)) != NULL;
        for (int k = 0; ok && k < 3; k++) {
            ok = wt_record(&w.recs[k], &c, k);
        }
        moe_rec_exchange_t second[3];
        for (int k = 0; ok && k < 3; k++) { /* window 1: step 1's exchange only */
            second[k] = w.recs[k].exchanges[1];
            second[k].step += gap; /* gap: window 2 is step 3, not step 2 */
            w.recs[k].num_exchanges = 1;
        }
        ok = ok && moe_merge_window(w.m, w.recs, have, 0, &err) == MOE_OK;
        for (int k = 0; ok && k < 3; k++) { /* window 2: step 2's (or 3's) */
            w.recs[k].exchanges[0] = second[k];
        }
        ok = ok && moe_merge_window(w.m, w.recs, have, 0, &err) == MOE_OK;
        moe_prof_run_t run = {2, 2, 1.0, w.yaml, strlen(w.yaml), false, 1.0, NULL};
        moe_prof_static_t info;
        memset(&info, 0, sizeof(info));
        w.r = ok ? moe_merge_finish(w.m, &run, &info) : NULL;
        CHECK(w.r != NULL);
        if (w.r != NULL) {
            const moe_rep_rank_t *k2 = &w.r->ranks[2];
            double idle = gap ? 50e3 : 500e3, designed = gap ? 700e3 : 250e3;
            CHECK_NEAR(k2->idle_ns, idle, 1e-3);
            CHECK_NEAR(k2->structural_wait_ns, designed, 1e-3);
            CHECK_NEAR(w.r->idle_for_ns[2 * 3 + 1], idle, 1e-3);
        }
        wt_done(&w, root);
    }
}

/* Runs compare into a string; returns its code. */
static int run_compare(const char *a, const char *b, char **text)
{
    size_t len = 0;
    *text = NULL;
    FILE *f = open_memstream(text, &len);
    if (f == NULL) {
        return -1;
    }
    int rc = moe_report_compare(a, b, f);
    fclose(f);
    return rc;
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[MOE_PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f != NULL) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_compare(const char *root, const fixture_t *a)
{
    shape_t sb = small_shape;
    sb.tokens_per_s = 10500.0;
    fixture_t *b = fx_make(&sb);
    char *out = NULL, missing[MOE_PATH_MAX + 16], bad[MOE_PATH_MAX + 16];
    CHECK(b != NULL);
    for (int k = 0; b != NULL && k < b->rep.world_size; k++) {
        b->rep.ranks[k].chunks = 1; /* B: one chunk, nothing hidden */
        b->rep.ranks[k].hidden_ns = 0.0;
    }
    if (b != NULL) {
        b->rep.chunks = 1;
        b->cfg.chunks = 1;
    }
    if (b == NULL || !write_into(b, root, "b")) {
        fx_free(b);
        return;
    }
    CHECK_INT_EQ(run_compare(a->rep.run_dir, b->rep.run_dir, &out), 0);
    CHECK_STR_CONTAINS(out, "tokens/s");
    CHECK_STR_CONTAINS(out, "11900.0");
    CHECK_STR_CONTAINS(out, "10500.0");
    CHECK_STR_CONTAINS(out, "-1400.0 (-11.8%)");
    CHECK_STR_CONTAINS(out, "  A: ");
    CHECK_STR_CONTAINS(out, "     device cuda (NVIDIA H200), runtime.chunks 2\n");
    CHECK_STR_CONTAINS(out, "     device cuda (NVIDIA H200), runtime.chunks 1\n");
    CHECK_STR_CONTAINS(out, "  device                             A: cuda (NVIDIA H200); B: cuda "
                            "(NVIDIA H200) (same)\n");
    /* a knob: old -> new, never a percentage */
    CHECK_STR_CONTAINS(out, "  runtime.chunks                                  2              1"
                            "   2 -> 1\n");
    CHECK_STR_CONTAINS(out, "Configuration (resolved values, A -> B)\n"
                            "  runtime.chunks                       2 -> 1\n\nRun");
    CHECK(strstr(out, "-50.0%") == NULL);
    CHECK_STR_CONTAINS(out, "  exchange in flight (ms/step, mean)          8.000          8.000"
                            "   +0.000 (+0.0%)\n");
    CHECK_STR_CONTAINS(out, "  exchange hidden by compute (%)               20.8            0.0"
                            "   -20.8 (-100.0%)\n");
    CHECK_STR_CONTAINS(out, "Experts");
    CHECK_STR_CONTAINS(out, "Configuration");
    free(out);

    snprintf(missing, sizeof(missing), "%s/no-such-run", root);
    CHECK_INT_EQ(run_compare(a->rep.run_dir, missing, &out), 2);
    CHECK(out == NULL || out[0] == '\0'); /* the error goes to stderr, nothing to out */
    free(out);

    CHECK(make_dir(root, "corrupt", bad, sizeof(bad)));
    write_text(bad, "summary.json",
               "{\"schema\": \"moed.summary\", \"schema_version\": 1, \"run\": {");
    CHECK_INT_EQ(run_compare(bad, a->rep.run_dir, &out), 2);
    free(out);
    write_text(bad, "summary.json", "{\"schema\": \"other\", \"schema_version\": 1}");
    CHECK_INT_EQ(run_compare(a->rep.run_dir, bad, &out), 2);
    free(out);
    write_text(bad, "summary.json", "{\"schema\": \"moed.summary\", \"schema_version\": 99}");
    CHECK_INT_EQ(run_compare(a->rep.run_dir, bad, &out), 2);
    free(out);
    remove_report(bad, 0);
    remove_report(b->rep.run_dir, b->rep.world_size);
    fx_free(b);
}

/* Different shapes: 16 experts against 8; compares what matches and says so. */
static void test_compare_shapes(const char *root, const fixture_t *a)
{
    shape_t sb = {4, 2, 16, false, 50000.0, NULL, NULL};
    fixture_t *b = fx_make(&sb);
    char *out = NULL;
    CHECK(b != NULL);
    if (b == NULL || !write_into(b, root, "shape")) {
        fx_free(b);
        return;
    }
    CHECK_INT_EQ(run_compare(a->rep.run_dir, b->rep.run_dir, &out), 0);
    CHECK_STR_CONTAINS(out, "different shapes");
    CHECK_STR_CONTAINS(out, "only in B");
    CHECK_STR_CONTAINS(out, "the worlds differ");
    CHECK_STR_CONTAINS(out, "model.num_experts");
    free(out);
    remove_report(b->rep.run_dir, b->rep.world_size);
    fx_free(b);
}

/* ---- bytes between ranks apart from local copies --------------------------------- */

/* A hand-made 3-rank matrix (bytes; row = sender). A: between ranks 4 MB, local 1 MB.
 * B moves 26% of the traffic between ranks onto the diagonal: between 2.96 MB, local
 * 2.04 MB, the same 5 MB in all, so a total would read +0.0%. */
static const uint64_t bytes_a[9] = {400000, 1000000, 1000000, 1000000, 300000, 0,
                                    1000000, 0, 300000};
static const uint64_t bytes_b[9] = {1040000, 740000, 740000, 740000, 500000, 0,
                                    740000, 0, 500000};

static void plant_bytes(fixture_t *fx, const uint64_t *m)
{
    memcpy(fx->rep.bytes, m, 9 * sizeof(uint64_t));
}

static void check_bytes_json(const char *dir)
{
    char path[MOE_PATH_MAX + 32];
    json_t *doc = NULL;
    moe_error_t err;
    snprintf(path, sizeof(path), "%s/summary.json", dir);
    CHECK_INT_EQ(moe_json_load_file(path, &doc, &err), MOE_OK);
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "comm.bytes_between_ranks"), -1), 4000000, 0);
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "comm.bytes_local"), -1), 1000000, 0);
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "comm.bytes_total"), -1), 5000000, 0);
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "comm.bytes_between_ranks_per_recorded_step"), -1),
               400000, 0);
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "comm.bytes_local_per_recorded_step"), -1), 100000,
               0);
    json_decref(doc);
}

static void check_bytes_text(const moe_report_t *r)
{
    char *t = slurp(r->run_dir, "summary.txt", NULL);
    char *k = slurp(r->run_dir, "summary_rank_0.txt", NULL);
    char *c = slurp(r->run_dir, "comm.csv", NULL), *h = slurp(r->run_dir, "report.html", NULL);
    char *line = headline_of(r);
    CHECK_STR_CONTAINS(t, "  between ranks 4.000 MB (0.400 MB per recorded step)\n"
                          "  local copies  1.000 MB (0.100 MB per recorded step)\n");
    /* row 0: its own 0.4 MB in brackets, sent = 2 MB to the other ranks only */
    CHECK_STR_CONTAINS(t, "   from\\to        0        1        2     sent\n"
                          "         0  (0.400)    1.000    1.000    2.000\n");
    CHECK_STR_CONTAINS(t, "  received    2.000    1.000    1.000    4.000\n");
    CHECK_STR_CONTAINS(k, "to other ranks: sent 2.000 MB, received 2.000 MB; local copies "
                          "0.400 MB");
    CHECK_STR_CONTAINS(c, "\n0,0,400000,0,0.000000,1\n");
    CHECK_STR_CONTAINS(c, "\n0,1,1000000,");
    CHECK_STR_CONTAINS(h, "Between ranks <b>4.000 MB</b>; local copies 1.000 MB");
    CHECK_STR_CONTAINS(h, "class=\"local\"><title>rank 0 to rank 0 (local copies");
    CHECK_STR_CONTAINS(line, "bytes per recorded step: 0.400 MB between ranks, 0.100 MB local "
                             "copies");
    free(t);
    free(k);
    free(c);
    free(h);
    free(line);
}

static void test_bytes_split(const char *root)
{
    fixture_t *a = fx_make(&small_shape), *b = fx_make(&small_shape);
    char *out = NULL;
    CHECK(a != NULL && b != NULL);
    if (a == NULL || b == NULL) {
        goto free_fixtures;
    }
    plant_bytes(a, bytes_a);
    plant_bytes(b, bytes_b);
    moe_report_bytes_t s = moe_report_bytes_split(&a->rep);
    CHECK_INT_EQ(s.between_ranks, 4000000);
    CHECK_INT_EQ(s.local, 1000000);
    moe_report_rank_bytes_t k = moe_report_rank_bytes(&b->rep, 1);
    CHECK_INT_EQ(k.sent, 740000);
    CHECK_INT_EQ(k.recv, 740000);
    CHECK_INT_EQ(k.local, 500000);
    if (!write_into(a, root, "bytes-a") || !write_into(b, root, "bytes-b")) {
        goto free_fixtures;
    }
    check_bytes_json(a->rep.run_dir);
    check_bytes_text(&a->rep);
    CHECK_INT_EQ(run_compare(a->rep.run_dir, b->rep.run_dir, &out), 0);
    CHECK_STR_CONTAINS(out, "  between ranks (MB)                          4.000          2.960"
                            "   -1.040 (-26.0%)\n");
    CHECK_STR_CONTAINS(out, "  local copies (MB)                           1.000          2.040"
                            "   +1.040 (+104.0%)\n");
    CHECK_STR_CONTAINS(out, "  rank 0 local copies (MB)                    0.400          1.040");
    CHECK_STR_CONTAINS(out, "  rank 0 -> rank 1 (MB)                       1.000          0.740");
    free(out);
free_fixtures:
    if (a != NULL) {
        remove_report(a->rep.run_dir, a->rep.world_size);
    }
    if (b != NULL) {
        remove_report(b->rep.run_dir, b->rep.world_size);
    }
    fx_free(a);
    fx_free(b);
}

/* ---- compare: resolved configuration, run states, folders ------------------------ */

/* What compare prints after "Configuration (...)\n" up to the blank line. */
static void check_config_section(const char *out, const char *want)
{
    const char *at = out != NULL ? strstr(out, "Configuration (resolved values, A -> B)\n") : NULL;
    CHECK(at != NULL);
    if (at != NULL) {
        CHECK_STR_CONTAINS(at, want);
    }
}

static void edit_steps_flag(fixture_t *fx)
{
    fx->cfg.steps = 30; /* what app/main.c does with --steps 30 */
}

static void edit_interrupted(fixture_t *fx)
{
    fx->rep.interrupted = true;
    fx->rep.steps_run = 12;
    fx->rep.steps_planned = 20;
}

static void edit_all_warmup(fixture_t *fx)
{
    fx->rep.all_warmup = true;
    fx->rep.recorded_steps = 0;
}

static void edit_model(fixture_t *fx)
{
    fx->cfg.hidden_dim = 2048;
    fx->cfg.dtype = MOE_DTYPE_BF16;
}

/* The resolved config in summary.json: defaults filled in, auto written out. */
static void check_config_object(const char *dir)
{
    char path[MOE_PATH_MAX + 32];
    json_t *doc = NULL;
    moe_error_t err;
    snprintf(path, sizeof(path), "%s/summary.json", dir);
    CHECK_INT_EQ(moe_json_load_file(path, &doc, &err), MOE_OK);
    const json_t *c = json_object_get(doc, "config");
    CHECK(json_is_integer(json_object_get(c, "runtime.chunks")));
    CHECK(strcmp(moe_json_str(json_object_get(c, "placement.experts"), ""),
                 "{1: [0, 1, 2, 3], 2: [4, 5, 6, 7]}") == 0);
    CHECK(strcmp(moe_json_str(json_object_get(c, "profiler.profiled_ranks"), ""), "[0, 1, 2]") ==
          0);
    CHECK(strcmp(moe_json_str(json_object_get(c, "runtime.routing"), ""), "master") == 0);
    CHECK(json_is_true(json_object_get(c, "model.normalize_topk")));
    CHECK_NEAR(moe_json_num(json_object_get(c, "runtime.step_timeout_s"), -1), 60, 0);
    CHECK_NEAR(moe_json_num(json_object_get(c, "model.hidden_dim"), -1), HIDDEN, 0);
    json_decref(doc);
}

static void test_compare_config(const char *root, const fixture_t *a)
{
    static const shape_t explicit_default = {3, 2, 8, false, 11900.0, "  chunks: 2\n", NULL};
    static const shape_t written_out = {3, 2, 8, false, 11900.0, NULL,
                                        "{1: [0, 1, 2, 3], 2: [4, 5, 6, 7]}"};
    char *out = NULL;
    check_config_object(a->rep.run_dir);
    /* runtime.chunks absent in A's YAML (CHUNKS set as the ranks ran it) vs written in B */
    fixture_t *b = fx_written(root, "cfg-default", &explicit_default, NULL);
    CHECK_INT_EQ(run_compare(a->rep.run_dir, b ? b->rep.run_dir : "", &out), 0);
    check_config_section(out, "\n  same configuration\n");
    free(out);
    fx_drop(b);
    /* placement auto vs the map it resolves to */
    b = fx_written(root, "cfg-placement", &written_out, NULL);
    CHECK_INT_EQ(run_compare(a->rep.run_dir, b ? b->rep.run_dir : "", &out), 0);
    check_config_section(out, "\n  same configuration\n");
    free(out);
    fx_drop(b);
    /* --steps 30 over workload.steps 20 */
    b = fx_written(root, "cfg-steps", &small_shape, edit_steps_flag);
    CHECK_INT_EQ(run_compare(a->rep.run_dir, b ? b->rep.run_dir : "", &out), 0);
    check_config_section(out, "\n  workload.steps                       20 -> 30\n\nRun");
    free(out);
    fx_drop(b);
}

static void test_compare_states(const char *root, const fixture_t *a)
{
    char *out = NULL;
    fixture_t *b = fx_written(root, "interrupted", &small_shape, edit_interrupted);
    CHECK_INT_EQ(run_compare(a->rep.run_dir, b ? b->rep.run_dir : "", &out), 0);
    CHECK_STR_CONTAINS(out, "     INTERRUPTED: stopped after 12 of 20 steps; figures cover what "
                            "ran\n");
    free(out);
    fx_drop(b);
    b = fx_written(root, "warmup", &small_shape, edit_all_warmup);
    CHECK_INT_EQ(run_compare(b ? b->rep.run_dir : "", a->rep.run_dir, &out), 0);
    CHECK_STR_CONTAINS(out, "     RECORDED NOTHING: all 20 steps run were warm-up steps");
    free(out);
    fx_drop(b);
    b = fx_written(root, "model", &small_shape, edit_model);
    CHECK_INT_EQ(run_compare(a->rep.run_dir, b ? b->rep.run_dir : "", &out), 0);
    CHECK_STR_CONTAINS(out, "NOTE: the models differ (model.hidden_dim 1024 vs 2048, model.dtype "
                            "auto vs bf16)");
    check_config_section(out, "  model.hidden_dim                     1024 -> 2048\n");
    free(out);
    fx_drop(b);
}

static void test_compare_folders(const char *root, const fixture_t *a)
{
    char *out = NULL, other[MOE_PATH_MAX + 16], dot[MOE_PATH_MAX + 64], dir[MOE_PATH_MAX];
    CHECK_INT_EQ(run_compare(a->rep.run_dir, a->rep.run_dir, &out), 0);
    CHECK_STR_CONTAINS(out, "A and B are the same folder");
    free(out);
    snprintf(dot, sizeof(dot), "%s/.", a->rep.run_dir);
    CHECK_INT_EQ(run_compare(a->rep.run_dir, dot, &out), 0);
    CHECK_STR_CONTAINS(out, "A and B are the same folder");
    free(out);
    CHECK(make_dir(root, "random", other, sizeof(other)));
    write_text(other, "notes.txt", "not a report\n");
    CHECK_INT_EQ(run_compare(a->rep.run_dir, other, &out), 2);
    CHECK(out == NULL || out[0] == '\0');
    free(out);
    snprintf(dot, sizeof(dot), "%s/notes.txt", other);
    unlink(dot);
    rmdir(other);
    /* the command line: --help, and wrong argument counts */
    snprintf(dir, sizeof(dir), "%s", a->rep.run_dir);
    char *help[] = {"--help"}, *one[] = {"x"}, *two[] = {dir, dir};
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    CHECK(f != NULL);
    if (f != NULL) {
        CHECK_INT_EQ(moe_report_compare_main(1, help, f), 0);
        CHECK_INT_EQ(moe_report_compare_main(1, one, f), 2);
        CHECK_INT_EQ(moe_report_compare_main(2, two, f), 0);
        fclose(f);
        CHECK_STR_CONTAINS(out, "usage: moed compare RUN_DIR_A RUN_DIR_B\n");
        CHECK_STR_CONTAINS(out, "exit status: 0 compared");
        free(out);
    }
}

/* ---- JSON: loading through jansson, lookups, the write helpers --------------------- */

static void test_json_valid(void)
{
    static const char text[] =
        " {\"a\": [1, -2.5e3, {\"b\": null}], \"c\": \"\\u00e9\\ud83d\\ude00\\n\\\"\", "
        "\"d\": true, \"e\": false, \"f\": {}, \"g\": [], \"h\": 0}\n";
    json_t *v = NULL;
    moe_error_t err;
    CHECK_INT_EQ(moe_json_load(text, strlen(text), "t", &v, &err), MOE_OK);
    CHECK_NEAR(moe_json_num(moe_json_path(v, "a.1"), 0), -2500.0, 0);
    CHECK(json_is_null(moe_json_path(v, "a.2.b")));
    CHECK(strcmp(moe_json_str(json_object_get(v, "c"), ""), "\xc3\xa9\xf0\x9f\x98\x80\n\"") == 0);
    CHECK(json_is_true(json_object_get(v, "d")));
    CHECK_INT_EQ(moe_json_count(json_object_get(v, "f")), 0);
    CHECK_INT_EQ(moe_json_count(v), 7);
    CHECK_INT_EQ(moe_json_count(json_object_get(v, "a")), 3);
    CHECK_INT_EQ(moe_json_count(json_object_get(v, "h")), 0);
    CHECK(moe_json_path(v, "a.9") == NULL && moe_json_path(v, "zz.y") == NULL);
    CHECK(json_object_get(json_object_get(v, "a"), "x") == NULL);
    json_decref(v);

    /* write helpers round-trip through the reader */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f != NULL) {
        fputc('[', f);
        moe_json_put_string(f, "q\"\\\t\x01 \xff ok");
        fputc(',', f);
        moe_json_put_number(f, 1.0 / 0.0);
        fputc(',', f);
        moe_json_put_number(f, 0.1);
        fputc(']', f);
        fclose(f);
        CHECK_INT_EQ(moe_json_load(buf, len, NULL, &v, &err), MOE_OK);
        CHECK(strcmp(moe_json_str(json_array_get(v, 0), ""), "q\"\\\t\x01 \xef\xbf\xbd ok") == 0);
        CHECK(json_is_null(json_array_get(v, 1)));
        CHECK_NEAR(moe_json_num(json_array_get(v, 2), 0), 0.1, 1e-12);
        json_decref(v);
        free(buf);
    }
}

static void test_json_malformed(void)
{
    static const char *const bad[] = {
        "",
        " ",
        "{",
        "}",
        "[",
        "[1,]",
        "{\"a\":1,}",
        "{\"a\" 1}",
        "{1:2}",
        "{\"a\":}",
        "01",
        "1.",
        "-",
        "+1",
        ".5",
        "1e",
        "1e+",
        "\"abc",
        "\"\\x\"",
        "\"\\u12\"",
        "\"\\ud800\"",
        "\"\\udc00\"",
        "\"\\ud800\\u0041\"",
        "\"\x01\"",
        "[1 2]",
        "nul",
        "tru",
        "falsey",
        "NaN",
        "Infinity",
        "1e999",
        "[1]x",
        "\xef\xbb\xbf{}",
        "\"\xc0\xaf\"",
        "\"\xed\xa0\x80\"",
        "\"\xf4\x90\x80\x80\"",
        "\"\xe2\x82\"",
        "[\"a\",]",
        "{\"a\":1 \"b\":2}",
        "// c\n{}",
        "{'a':1}",
        "[1,,2]",
        "{\"a\":1,\"a\":2}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *v = (json_t *)&v; /* must come back NULL */
        moe_error_t err;
        moe_error_clear(&err);
        moe_status_t st = moe_json_load(bad[i], strlen(bad[i]), "bad.json", &v, &err);
        CHECK_INT_EQ(st, MOE_ERR_FORMAT);
        CHECK(v == NULL);
        CHECK(strncmp(err.msg, "bad.json:1:", 11) == 0);
        if (st == MOE_OK) {
            fprintf(stderr, "  accepted: \"%s\"\n", bad[i]);
            json_decref(v);
        }
    }
    /* line:col of the offending byte */
    static const char where[] = "{\n  \"a\": 1,\n  \"b\": }";
    json_t *v = NULL;
    moe_error_t err;
    CHECK_INT_EQ(moe_json_load(where, strlen(where), "w.json", &v, &err), MOE_ERR_FORMAT);
    CHECK_STR_CONTAINS(err.msg, "w.json:3:8:");
    /* nesting is bounded (jansson stops at 2048 levels) */
    char deep[4096];
    memset(deep, '[', sizeof(deep));
    CHECK_INT_EQ(moe_json_load(deep, sizeof(deep), NULL, &v, &err), MOE_ERR_FORMAT);
    CHECK_STR_CONTAINS(err.msg, "maximum parsing depth reached");
    CHECK_INT_EQ(moe_json_load(NULL, 0, NULL, &v, &err), MOE_ERR_FORMAT);
    CHECK_INT_EQ(moe_json_load_file("/nonexistent/x.json", &v, &err), MOE_ERR_IO);
    CHECK_STR_CONTAINS(err.msg, "/nonexistent/x.json");
}

/* Every prefix and many single-byte mutations of a real summary.json: an error or a tree,
 * never a crash or a leak (ASan watches). */
static void test_json_mutations(const fixture_t *fx)
{
    size_t len = 0;
    char *text = slurp(fx->rep.run_dir, "summary.json", &len);
    static const char subst[] = "{}[]\",:0-eE.\\ a\x80\xff";
    int ok = 0, failed = 0;
    CHECK(text != NULL && len > 100);
    for (size_t cut = 0; text != NULL && cut < len; cut += 1 + cut / 64) {
        json_t *v = NULL;
        moe_error_t err;
        moe_status_t st = moe_json_load(text, cut, NULL, &v, &err);
        ok += st == MOE_OK;
        failed += st != MOE_OK;
        json_decref(v);
    }
    for (size_t i = 0; text != NULL && i < len; i += 7) {
        char saved = text[i];
        text[i] = subst[i % (sizeof(subst) - 1)];
        json_t *v = NULL;
        moe_error_t err;
        ok += moe_json_load(text, len, NULL, &v, &err) == MOE_OK;
        json_decref(v);
        text[i] = saved;
    }
    CHECK(failed > 0);
    CHECK(ok >= 0);
    free(text);
}

/* ---- main ------------------------------------------------------------------------ */

static void test_partial(const char *root)
{
    shape_t s = small_shape;
    s.partial = true;
    fixture_t *fx = fx_make(&s);
    CHECK(fx != NULL);
    if (fx == NULL) {
        return;
    }
    fx->cfg.prof_trace = false;
    CHECK(write_into(fx, root, "partial"));
    test_files_exist(fx);
    test_summary_txt(fx);
    test_summary_json(fx);
    test_html(fx);
    char *t = slurp(fx->rep.run_dir, "summary.json", NULL);
    CHECK_STR_CONTAINS(t, "\"missing\": \"rank 2 (node-b): its records did not arrive\"");
    free(t);
    remove_report(fx->rep.run_dir, fx->rep.world_size);
    fx_free(fx);
}

static int demo(const char *dir)
{
    static const shape_t shapes[4] = {{3, 2, 8, false, 11900.0, NULL, NULL},
                                      {8, 2, 64, false, 21234.5, NULL, NULL},
                                      {3, 2, 8, true, 11900.0, NULL, NULL},
                                      {16, 27, 64, false, 4321.0, NULL, NULL}};
    static const char *const names[4] = {"small", "big", "partial", "deep"};
    mkdir(dir, 0755);
    for (int i = 0; i < 4; i++) {
        fixture_t *fx = fx_make(&shapes[i]);
        if (fx == NULL || !write_into(fx, dir, names[i])) {
            fprintf(stderr, "demo: cannot write %s/%s\n", dir, names[i]);
            fx_free(fx);
            return 1;
        }
        moe_report_print_headline(&fx->rep, stdout);
        fx_free(fx);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--demo") == 0) {
        return demo(argv[2]);
    }
    char root[] = "/tmp/moed_test_report_XXXXXX";
    if (mkdtemp(root) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    test_json_valid();
    test_json_malformed();
    fixture_t *fx = fx_make(&small_shape);
    CHECK(fx != NULL);
    if (fx != NULL && write_into(fx, root, "a")) {
        test_files_exist(fx);
        test_summary_json(fx);
        test_trace(fx);
        test_trace_nesting(fx);
        test_csv(fx);
        test_html(fx);
        test_summary_txt(fx);
        test_find(fx);
        test_headline(fx);
        test_drops(fx);
        test_html_lines(fx);
        test_all_warmup(fx);
        test_write_errors(fx);
        test_escaping(fx);
        test_json_mutations(fx);
        test_compare(root, fx);
        test_compare_shapes(root, fx);
        test_compare_config(root, fx);
        test_compare_states(root, fx);
        test_compare_folders(root, fx);
        remove_report(fx->rep.run_dir, fx->rep.world_size);
    }
    fx_free(fx);
    test_partial(root);
    test_html_wide(root);
    test_html_scale(root);
    test_text_wide(root);
    test_merge_router(root);
    test_merge_waits_combine(root);
    test_merge_waits_balanced(root);
    test_merge_waits_dispatch(root);
    test_merge_waits_next_dispatch(root);
    test_merge_waits_windows(root);
    test_bytes_split(root);
    rmdir(root);
    return moe_test_finish("test_report");
}
