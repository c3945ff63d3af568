/* summary.json: everything summary.txt shows, machine-readable, schema "moed.summary"
 * version 1 (docs/report-files.md documents every field). Keys carry their unit as a
 * suffix (_ms, _ns, _s, _mib, _bytes) where one applies. Numbers are finite or null. */
#include "report/report.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report/json_write.h"

#define JSON_SCHEMA "moed.summary"
#define JSON_SCHEMA_VERSION 1
#define JSON_MAX_DEPTH 16
#define JSON_MIB 1048576.0

/* A small emitter that places commas and indentation; arrays opened `inline` keep their
 * elements on one line (number vectors), everything else is one member per line. */
typedef struct json_w {
    FILE *f;
    int depth;
    bool comma[JSON_MAX_DEPTH];
    bool inl[JSON_MAX_DEPTH];
} json_w_t;

static void jw_key(json_w_t *w, const char *key)
{
    int d = w->depth;
    if (w->comma[d]) {
        fputc(',', w->f);
    }
    if (w->inl[d]) {
        fputs(w->comma[d] ? " " : "", w->f);
    } else {
        fprintf(w->f, "\n%*s", 2 * d, "");
    }
    w->comma[d] = true;
    if (key != NULL) {
        moe_json_put_string(w->f, key);
        fputs(": ", w->f);
    }
}

static void jw_open(json_w_t *w, const char *key, char c, bool inl)
{
    jw_key(w, key);
    fputc(c, w->f);
    if (w->depth + 1 < JSON_MAX_DEPTH) {
        w->depth++;
    }
    w->comma[w->depth] = false;
    w->inl[w->depth] = inl || w->inl[w->depth - 1];
}

static void jw_close(json_w_t *w, char c)
{
    bool had = w->comma[w->depth], inl = w->inl[w->depth];
    w->depth--;
    if (had && !inl) {
        fprintf(w->f, "\n%*s", 2 * w->depth, "");
    }
    fputc(c, w->f);
}

static void jw_num(json_w_t *w, const char *key, double x)
{
    jw_key(w, key);
    moe_json_put_number(w->f, x);
}

static void jw_u64(json_w_t *w, const char *key, uint64_t x)
{
    jw_key(w, key);
    fprintf(w->f, "%" PRIu64, x);
}

/* A count, or null where it is unknown (never 0). */
static void jw_u64_known(json_w_t *w, const char *key, uint64_t x, bool known)
{
    if (known) {
        jw_u64(w, key, x);
    } else {
        jw_num(w, key, NAN);
    }
}

static void jw_i64(json_w_t *w, const char *key, int64_t x)
{
    jw_key(w, key);
    fprintf(w->f, "%" PRId64, x);
}

/* An index that is -1 when there is none: null. */
static void jw_index(json_w_t *w, const char *key, int x)
{
    jw_key(w, key);
    x >= 0 ? fprintf(w->f, "%d", x) : fputs("null", w->f);
}

static void jw_str(json_w_t *w, const char *key, const char *s)
{
    jw_key(w, key);
    moe_json_put_string(w->f, s);
}

static void jw_bool(json_w_t *w, const char *key, bool b)
{
    jw_key(w, key);
    fputs(b ? "true" : "false", w->f);
}

static void jw_u64_array(json_w_t *w, const char *key, const uint64_t *v, int n)
{
    jw_open(w, key, '[', true);
    for (int i = 0; i < n; i++) {
        jw_u64(w, NULL, v != NULL ? v[i] : 0);
    }
    jw_close(w, ']');
}

/* Counts that were never taken (a layer's demand with no routing rank's records): the
 * array keeps its length, every element null. */
static void jw_u64_counts(json_w_t *w, const char *key, const uint64_t *v, int n, bool known)
{
    if (known) {
        jw_u64_array(w, key, v, n);
        return;
    }
    jw_open(w, key, '[', true);
    for (int i = 0; i < n; i++) {
        jw_num(w, NULL, NAN);
    }
    jw_close(w, ']');
}

/* A latency histogram's figures in ms (mean, p50, p90, p99, max; null without samples)
 * and its samples. */
static void jw_latency(json_w_t *w, const char *key, const moe_hist_t *h)
{
    double known = h->count > 0 ? 1.0 : NAN;
    jw_open(w, key, '{', true);
    jw_num(w, "mean", known * moe_hist_mean(h) / 1e6);
    jw_num(w, "p50", known * moe_hist_quantile(h, 0.5) / 1e6);
    jw_num(w, "p90", known * moe_hist_quantile(h, 0.9) / 1e6);
    jw_num(w, "p99", known * moe_hist_quantile(h, 0.99) / 1e6);
    jw_num(w, "max", known * (double)h->max / 1e6);
    jw_u64(w, "samples", h->count);
    jw_close(w, '}');
}

/* ---- sections -------------------------------------------------------------------- */

static const char *json_routing(const moe_config_t *c)
{
    return c->routing == MOE_ROUTING_SYMMETRIC ? "symmetric" : "master";
}

/* Whether the run and its report are complete, as far as known when this is written:
 * summary.json goes first and is written again if a later file fails; INCOMPLETE, if
 * present in the folder, is the last word. metrics.csv's own bound and losses too. */
static void json_files(json_w_t *w, const moe_report_t *r)
{
    bool failed = r->metrics_write_failed;
    for (int i = 0; r->files != NULL && i < MOE_RFILE_COUNT; i++) {
        failed = failed || r->files->state[i] == MOE_RFILE_FAILED;
    }
    jw_bool(w, "complete", !r->interrupted && !r->partial && !failed);
    jw_i64(w, "metrics_rows", r->metrics_rows);
    jw_i64(w, "metrics_lost", r->metrics_lost);
    jw_i64(w, "metrics_stop_step", r->metrics_stop_step);
    jw_str(w, "metrics_stop_reason", r->metrics_stop_why);
    jw_open(w, "files_not_written", '[', false);
    for (int i = 0; r->files != NULL && i < MOE_RFILE_COUNT; i++) {
        if (r->files->state[i] == MOE_RFILE_FAILED) {
            char line[200];
            snprintf(line, sizeof(line), "%s: %s", moe_report_file_name(i), r->files->why[i]);
            jw_str(w, NULL, line);
        }
    }
    char cut[sizeof(r->metrics_stop_why) + 96];
    if (moe_report_metrics_cut_line(r, cut, sizeof(cut))) {
        jw_str(w, NULL, cut);
    }
    jw_close(w, ']');
}

static void json_run(json_w_t *w, const moe_report_t *r)
{
    const moe_config_t *c = r->cfg;
    char hash[24];
    snprintf(hash, sizeof(hash), "%016" PRIx64, c->text_hash);
    jw_open(w, "run", '{', false);
    jw_str(w, "version", r->version);
    jw_str(w, "build_id", r->build_id);
    jw_str(w, "started_at", r->started_at);
    jw_str(w, "run_dir", r->run_dir);
    jw_str(w, "config_source", c->source_name);
    jw_str(w, "config_hash", hash);
    jw_i64(w, "world_size", r->world_size);
    jw_i64(w, "num_hosts", r->num_hosts);
    jw_i64(w, "num_layers", r->num_layers);
    jw_i64(w, "num_experts", r->num_experts);
    jw_i64(w, "top_k", c->top_k);
    jw_i64(w, "hidden_dim", c->hidden_dim);
    jw_i64(w, "ffn_dim", c->ffn_dim);
    jw_str(w, "activation", moe_cfg_activation_name(c->activation));
    jw_num(w, "capacity_factor", c->capacity_factor);
    jw_str(w, "routing", json_routing(c));
    jw_i64(w, "master_rank", c->master_rank);
    jw_str(w, "transport", r->transport);
    jw_str(w, "device", c->device == MOE_DEVICE_CUDA ? "cuda" : "cpu");
    jw_str(w, "device_name", r->device);
    jw_str(w, "blas", r->blas);
    jw_str(w, "weights", r->weights);
    jw_i64(w, "threads", c->threads);
    jw_i64(w, "chunks", r->chunks);
    jw_i64(w, "steps_run", r->steps_run);
    jw_i64(w, "steps_planned", r->steps_planned);
    jw_bool(w, "interrupted", r->interrupted);
    jw_i64(w, "tokens_per_step", r->tokens_per_step);
    jw_num(w, "run_s", r->run_s);
    jw_num(w, "tokens_per_s", r->tokens_per_s);
    jw_latency(w, "step_latency_ms", &r->step_latency);
    jw_i64(w, "recorded_steps", r->recorded_steps);
    jw_bool(w, "all_warmup", r->all_warmup);
    jw_i64(w, "windows", r->windows);
    jw_num(w, "clock_skew_max_ns", r->clock_skew_max_ns);
    jw_num(w, "clock_uncertainty_max_ns", r->clock_uncertainty_max_ns);
    jw_num(w, "clock_drift_max_ns", r->clock_drift_max_ns);
    jw_i64(w, "metrics_dropped", r->metrics_dropped);
    jw_i64(w, "events_dropped", r->events_dropped);
    json_files(w, r);
    moe_report_findings_t x;
    moe_report_find(r, &x);
    jw_num(w, "exchange_hidden_share", x.hidden_share); /* NAN: null */
    jw_close(w, '}');
}

/* Where the expert choices came from and their shape over the run: means over the layers
 * with choices, the least even layer, the hottest (layer, expert) pairs by share of their
 * layer (docs/report-files.md, "routing"). */
static moe_status_t json_routing_src(json_w_t *w, const moe_report_t *r)
{
    moe_report_routing_src_t *src = malloc(sizeof(*src));
    moe_report_hot_t top[MOE_REPORT_TOP_HOT_JSON];
    if (src == NULL) {
        return MOE_ERR_NO_MEMORY;
    }
    moe_report_routing_parse(r->routing_source, src);
    bool replayed = strcmp(src->kind, "replayed") == 0;
    moe_report_run_routing_t y;
    moe_report_run_routing(r, &y);
    jw_open(w, "routing", '{', false);
    jw_str(w, "source", src->kind);
    jw_str(w, "detail", src->detail);
    jw_str(w, "file", replayed ? src->file : NULL); /* NULL: null */
    jw_str(w, "trace_source", replayed ? src->trace_source : NULL);
    jw_u64_known(w, "choices", y.choices, !y.choices_unknown);
    jw_i64(w, "layers_with_choices", y.layers_with_choices);
    jw_num(w, "hottest_share_mean", y.hottest_share_mean);
    jw_num(w, "entropy_bits_mean", y.entropy_bits_mean);
    jw_num(w, "entropy_norm_mean", y.entropy_norm_mean);
    jw_num(w, "entropy_norm_min", y.entropy_norm_min);
    jw_index(w, "entropy_norm_min_layer", y.entropy_norm_min_layer);
    int n = moe_report_hottest(r, top, MOE_REPORT_TOP_HOT_JSON);
    jw_open(w, "top", '[', false);
    for (int i = 0; i < n; i++) {
        jw_open(w, NULL, '{', true);
        jw_i64(w, "layer", top[i].layer);
        jw_i64(w, "expert", top[i].expert);
        jw_u64(w, "demand", top[i].demand);
        jw_num(w, "share", top[i].share);
        jw_num(w, "x_layer_mean", top[i].x_mean);
        jw_close(w, '}');
    }
    jw_close(w, ']');
    jw_close(w, '}');
    free(src);
    return MOE_OK;
}

/* One key of the resolved config: numbers and booleans as JSON values, the rest as strings. */
static void json_config_key(void *ctx, const char *path, const char *value, bool quoted)
{
    json_w_t *w = ctx;
    if (quoted) {
        jw_str(w, path, value);
    } else {
        jw_key(w, path);
        fputs(value, w->f);
    }
}

/* Every config key as this run resolved it (defaults filled in, `auto` placement and
 * `all` ranks written out, --steps applied): what `moed compare` compares, so an absent
 * key and its default, or `auto` and the placement it became, read the same. */
static void json_config(json_w_t *w, const moe_report_t *r)
{
    jw_open(w, "config", '{', false);
    moe_cfg_each_value(r->cfg, json_config_key, w);
    jw_close(w, '}');
}

/* The keys "config" keeps as written (`auto`, -1, 0) with the values the run resolved them
 * to: a planned config (moed plan) writes "config" back, and `auto` there resolves again on
 * the machine that runs it; `moed compare` compares these. A value not known is left out;
 * a whole number is a JSON number, as in "config" ("32-64": ranks differ, a string). */
static void json_config_resolved(json_w_t *w, const moe_report_t *r)
{
    static const char *const keys[MOE_PROF_RESOLVED_COUNT] = {
        [MOE_PROF_RESOLVED_DTYPE] = "model.dtype",
        [MOE_PROF_RESOLVED_SHARED_FFN_DIM] = "model.shared_ffn_dim",
        [MOE_PROF_RESOLVED_COMPUTE_DTYPE] = "runtime.compute_dtype",
        [MOE_PROF_RESOLVED_WIRE_DTYPE] = "runtime.wire_dtype",
        [MOE_PROF_RESOLVED_SMALL_BATCH_ROWS] = "runtime.small_batch_rows",
        [MOE_PROF_RESOLVED_BIND] = "runtime.bind",
        [MOE_PROF_RESOLVED_DEDUP] = "runtime.dedup",
        [MOE_PROF_RESOLVED_EXPERT_HISTOGRAMS] = "profiler.expert_histograms"};
    jw_open(w, "config_resolved", '{', false);
    for (int i = 0; i < MOE_PROF_RESOLVED_COUNT; i++) {
        const char *v = r->resolved[i];
        char *end = NULL;
        long long n = v[0] != '\0' ? strtoll(v, &end, 10) : 0;
        if (end != NULL && end != v && *end == '\0') {
            jw_i64(w, keys[i], n);
        } else if (v[0] != '\0') {
            jw_str(w, keys[i], v);
        }
    }
    jw_close(w, '}');
}

/* Per recorded step: unknown (null) with no recorded step, never 0. */
static double json_per_step_ms(double ns, int64_t steps)
{
    return steps > 0 ? ns / (double)steps / 1e6 : NAN;
}

static double json_share(double part, double whole)
{
    return whole > 0.0 ? part / whole : NAN;
}

/* 1 where a rank's figures are known (its records came), NAN (null) where they are not:
 * a rank not profiled, or lost, measured nothing. */
static double json_known(const moe_rep_rank_t *k)
{
    return k->present ? 1.0 : NAN;
}

static void json_rank_phases(json_w_t *w, const moe_rep_rank_t *k)
{
    jw_open(w, "phases_ms", '{', false);
    for (int p = 0; p < MOE_PHASE_COUNT; p++) {
        const moe_rep_stat_t *s = &k->phase[p];
        double seen = s->n > 0 ? json_known(k) : NAN; /* min, max: no step, no extreme */
        jw_open(w, moe_phase_name(p), '{', true);
        jw_num(w, "min", seen * s->min / 1e6);
        jw_num(w, "mean", s->n > 0 ? s->sum / (double)s->n / 1e6 : NAN);
        jw_num(w, "max", seen * s->max / 1e6);
        jw_num(w, "total", json_known(k) * s->sum / 1e6);
        jw_u64(w, "steps", s->n);
        jw_close(w, '}');
    }
    jw_close(w, '}');
}

static void json_rank_split(json_w_t *w, const moe_rep_rank_t *k)
{
    double step = k->phase[MOE_PHASE_STEP].sum;
    jw_open(w, "per_step_ms", '{', true);
    jw_num(w, "step", json_per_step_ms(step, k->steps));
    jw_num(w, "compute", json_per_step_ms(k->compute_ns, k->steps));
    jw_num(w, "weights", json_per_step_ms(k->weights_ns, k->steps));
    jw_num(w, "exchange", json_per_step_ms(k->exchange_ns, k->steps));
    jw_num(w, "idle", json_per_step_ms(k->idle_ns, k->steps));
    jw_num(w, "structural_wait", json_per_step_ms(k->structural_wait_ns, k->steps));
    jw_close(w, '}');
    jw_open(w, "share_of_step", '{', true);
    jw_num(w, "compute", json_share(k->compute_ns, step));
    jw_num(w, "weights", json_share(k->weights_ns, step));
    jw_num(w, "exchange", json_share(k->exchange_ns, step));
    jw_num(w, "idle", json_share(k->idle_ns, step));
    jw_num(w, "structural_wait", json_share(k->structural_wait_ns, step));
    jw_close(w, '}');
}

static void json_rank(json_w_t *w, const moe_report_t *r, int i, int32_t *ids)
{
    const moe_rep_rank_t *k = &r->ranks[i];
    int n = moe_cfg_experts_of_rank(r->cfg, i, ids);
    jw_open(w, NULL, '{', false);
    jw_i64(w, "rank", i);
    jw_str(w, "host", k->host);
    jw_bool(w, "profiled", k->profiled);
    jw_bool(w, "present", k->present);
    jw_bool(w, "routes", k->routes);
    jw_i64(w, "num_local", k->num_local);
    jw_open(w, "experts", '[', true);
    for (int e = 0; e < n; e++) {
        jw_i64(w, NULL, ids[e]);
    }
    jw_close(w, ']');
    jw_i64(w, "steps", k->steps);
    jw_str(w, "device", k->device);
    json_rank_split(w, k);
    /* idle_ns split by the rank waited for: ms per recorded step, one per rank */
    jw_open(w, "idle_waiting_for_ms", '[', true);
    for (int j = 0; j < r->world_size; j++) {
        size_t at = (size_t)i * (size_t)r->world_size + (size_t)j;
        jw_num(w, NULL, json_per_step_ms(r->idle_for_ns != NULL ? r->idle_for_ns[at] : NAN,
                                         k->steps));
    }
    jw_close(w, ']');
    jw_num(w, "exchange_ms", json_per_step_ms(k->inflight_ns, k->steps));
    jw_num(w, "hidden_ms", json_per_step_ms(k->hidden_ns, k->steps));
    jw_num(w, "exchange_hidden_share", moe_report_hidden_share(k));
    jw_open(w, "cpu_cores", '{', true); /* CPU time over wall time; null: not measured */
    jw_num(w, "recorded_steps", moe_report_cpu_cores(k, false));
    jw_num(w, "run", moe_report_cpu_cores(k, true));
    jw_close(w, '}');
    if (k->present && k->bytes_sent != NULL && k->bytes_recv != NULL) {
        jw_u64_array(w, "bytes_sent", k->bytes_sent, r->world_size);
        jw_u64_array(w, "bytes_recv", k->bytes_recv, r->world_size);
    }
    json_rank_phases(w, k);
    jw_open(w, "clock", '{', true);
    jw_num(w, "offset_ns", json_known(k) * k->clock_offset_ns);
    jw_num(w, "offset_end_ns", json_known(k) * k->clock_offset_end_ns);
    jw_num(w, "uncertainty_ns", json_known(k) * k->clock_uncertainty_ns);
    jw_close(w, '}');
    jw_close(w, '}');
}

static moe_status_t json_ranks(json_w_t *w, const moe_report_t *r)
{
    int32_t *ids = malloc(sizeof(int32_t) * MOE_MAX_EXPERTS);
    if (ids == NULL) {
        return MOE_ERR_NO_MEMORY;
    }
    jw_open(w, "ranks", '[', false);
    for (int i = 0; i < r->world_size; i++) {
        json_rank(w, r, i, ids);
    }
    jw_close(w, ']');
    free(ids);
    return MOE_OK;
}

static void json_expert(json_w_t *w, const moe_report_t *r, const moe_rep_expert_t *e)
{
    const moe_hist_t *h = &e->hist;
    bool host_ok = e->rank >= 0 && e->rank < r->world_size;
    jw_open(w, NULL, '{', true);
    jw_i64(w, "layer", e->layer);
    jw_i64(w, "expert", e->expert);
    jw_i64(w, "rank", e->rank);
    jw_str(w, "host", host_ok ? r->ranks[e->rank].host : "");
    /* unknown figures (no recorded call, or the host not profiled) are null, never 0 */
    double known = h->count > 0 ? 1.0 : NAN;
    jw_u64_known(w, "tokens", e->tokens, !e->tokens_unknown);
    jw_bool(w, "router_count", e->router_count);
    if (e->router_count || e->tokens_unknown) {
        jw_num(w, "calls", NAN);
        jw_num(w, "flops", NAN);
    } else {
        jw_u64(w, "calls", e->calls);
        jw_num(w, "flops", e->flops);
    }
    jw_num(w, "gflops", h->sum > 0.0 ? e->flops / h->sum : NAN);
    jw_open(w, "latency_ms", '{', true);
    jw_num(w, "mean", known * moe_hist_mean(h) / 1e6);
    jw_num(w, "p50", known * moe_hist_quantile(h, 0.5) / 1e6);
    jw_num(w, "p90", known * moe_hist_quantile(h, 0.9) / 1e6);
    jw_num(w, "p99", known * moe_hist_quantile(h, 0.99) / 1e6);
    jw_num(w, "max", known * (double)h->max / 1e6);
    jw_close(w, '}');
    jw_close(w, '}');
}

static void json_experts(json_w_t *w, const moe_report_t *r)
{
    jw_open(w, "experts", '[', false);
    for (int i = 0; r->experts != NULL && i < r->num_layers * r->num_experts; i++) {
        json_expert(w, r, &r->experts[i]);
    }
    jw_close(w, ']');
}

/* Copies of replicated experts: each copy's load on its own rank. */
static void json_replicas(json_w_t *w, const moe_report_t *r)
{
    jw_open(w, "replicas", '[', false);
    for (int i = 0; i < r->num_replicas; i++) {
        const moe_rep_replica_t *x = &r->replicas[i];
        bool present = x->rank >= 0 && x->rank < r->world_size && r->ranks[x->rank].present;
        jw_open(w, NULL, '{', true);
        jw_i64(w, "layer", x->layer);
        jw_i64(w, "expert", x->expert);
        jw_i64(w, "rank", x->rank);
        jw_num(w, "tokens", present ? (double)x->tokens : NAN);
        jw_num(w, "calls", present ? (double)x->calls : NAN);
        jw_num(w, "busy_ms", present ? x->busy_ns / 1e6 : NAN);
        jw_close(w, '}');
    }
    jw_close(w, ']');
}

/* Online rebalances (runtime.rebalance_every), in step order. */
static void json_rebalances(json_w_t *w, const moe_report_t *r)
{
    jw_open(w, "rebalances", '[', false);
    for (int i = 0; r->rebalances != NULL && i < r->num_rebalances; i++) {
        const moe_rep_rebalance_t *x = &r->rebalances[i];
        jw_open(w, NULL, '{', true);
        jw_i64(w, "step", x->step);
        jw_i64(w, "experts_moved", x->moved);
        jw_i64(w, "bytes", x->bytes);
        jw_num(w, "seconds", x->seconds);
        jw_i64(w, "slowest_rank", x->slowest_rank);
        jw_num(w, "imbalance_before", x->before);
        jw_num(w, "imbalance_after_predicted", x->after);
        jw_close(w, '}');
    }
    jw_close(w, ']');
}

static uint64_t json_sum(const uint64_t *v, int n)
{
    uint64_t s = 0;
    for (int i = 0; v != NULL && i < n; i++) {
        s += v[i];
    }
    return s;
}

/* Layer l's experts' tokens (experts[].tokens), null where unknown. */
static void json_layer_tokens(json_w_t *w, const moe_report_t *r, int l)
{
    int ne = r->num_experts;
    jw_open(w, "tokens", '[', true);
    for (int e = 0; e < ne; e++) {
        const moe_rep_expert_t *x = r->experts != NULL ? &r->experts[l * ne + e] : NULL;
        jw_u64_known(w, NULL, x != NULL ? x->tokens : 0, x == NULL || !x->tokens_unknown);
    }
    jw_close(w, ']');
}

static void json_layer(json_w_t *w, const moe_report_t *r, int l)
{
    const moe_rep_layer_t *y = &r->layers[l];
    int ne = r->num_experts;
    jw_open(w, NULL, '{', false);
    jw_i64(w, "layer", l);
    jw_num(w, "gini", y->gini);
    jw_num(w, "cv", y->cv);
    jw_num(w, "entropy_norm", y->entropy_norm);
    jw_num(w, "max_mean", y->max_mean);
    jw_latency(w, "latency_ms", &y->latency);
    /* unknown counts (no routing rank's records) are null, never 0 */
    jw_u64_known(w, "demand_total", json_sum(y->demand, ne), !y->demand_unknown);
    jw_u64_known(w, "kept_total", json_sum(y->kept, ne), !y->kept_unknown);
    jw_u64_known(w, "dropped_total", json_sum(y->dropped, ne), !y->demand_unknown);
    jw_u64_counts(w, "demand", y->demand, ne, !y->demand_unknown);
    jw_u64_counts(w, "kept", y->kept, ne, !y->kept_unknown);
    jw_u64_counts(w, "dropped", y->dropped, ne, !y->demand_unknown);
    json_layer_tokens(w, r, l);
    moe_report_layer_routing_t g; /* the shape of its demand: the router's choices */
    moe_report_layer_routing(r, l, &g);
    jw_open(w, "routing", '{', true);
    jw_index(w, "hottest_expert", g.hottest_expert);
    jw_u64(w, "hottest_demand", g.hottest_count);
    jw_num(w, "hottest_share", g.hottest_share);
    jw_num(w, "entropy_bits", g.entropy_bits);
    jw_num(w, "entropy_norm", g.entropy_norm);
    jw_close(w, '}');
    if (y->shared_rows > 0) { /* the shared experts' row: models that have them */
        int64_t steps = 0;
        for (int k = 0; r->ranks != NULL && k < r->world_size; k++) {
            steps = r->ranks[k].steps > steps ? r->ranks[k].steps : steps;
        }
        jw_open(w, "shared", '{', false);
        jw_u64(w, "tokens", y->shared_rows);
        jw_num(w, "busy_ms_per_step", steps > 0 ? y->shared_ns / 1e6 / (double)steps : 0.0);
        jw_close(w, '}');
    }
    jw_close(w, '}');
}

static void json_layers(json_w_t *w, const moe_report_t *r)
{
    jw_open(w, "layers", '[', false);
    for (int l = 0; r->layers != NULL && l < r->num_layers; l++) {
        json_layer(w, r, l);
    }
    jw_close(w, ']');
}

/* One W x W matrix: kind 0 bytes, 1 messages, 2 wait in ms, 3 rows, 4 pairs; one row per
 * line. */
static void json_matrix(json_w_t *w, const moe_report_t *r, const char *key, int kind)
{
    int n = r->world_size;
    jw_open(w, key, '[', false);
    for (int i = 0; i < n; i++) {
        jw_open(w, NULL, '[', true);
        for (int j = 0; j < n; j++) {
            size_t at = (size_t)i * (size_t)n + (size_t)j;
            if (kind == 0) {
                jw_u64(w, NULL, r->bytes != NULL ? r->bytes[at] : 0);
            } else if (kind == 1) {
                jw_u64(w, NULL, r->msgs != NULL ? r->msgs[at] : 0);
            } else if (kind == 3 || kind == 4) {
                const uint64_t *m = kind == 3 ? r->rows : r->pairs;
                jw_u64(w, NULL, m != NULL ? m[at] : 0);
            } else {
                jw_num(w, NULL, moe_report_wait_ms(r, i, j));
            }
        }
        jw_close(w, ']');
    }
    jw_close(w, ']');
}

/* bytes_total is the whole matrix; bytes_between_ranks leaves out the diagonal (a rank's
 * rows to its own experts), which is bytes_local: a change in traffic between ranks must
 * not hide behind local copies that did not move. */
static void json_comm(json_w_t *w, const moe_report_t *r)
{
    moe_report_bytes_t b = moe_report_bytes_split(r);
    double steps = r->recorded_steps > 0 ? (double)r->recorded_steps : 0.0;
    jw_open(w, "comm", '{', false);
    jw_i64(w, "world_size", r->world_size);
    jw_u64(w, "bytes_between_ranks", b.between_ranks);
    jw_u64(w, "bytes_local", b.local);
    jw_u64(w, "bytes_total", b.between_ranks + b.local);
    jw_num(w, "bytes_between_ranks_per_recorded_step",
           steps > 0.0 ? (double)b.between_ranks / steps : 0.0);
    jw_num(w, "bytes_local_per_recorded_step", steps > 0.0 ? (double)b.local / steps : 0.0);
    jw_num(w, "bytes_per_recorded_step",
           steps > 0.0 ? (double)(b.between_ranks + b.local) / steps : 0.0);
    /* the rows on the wire and the (token, expert) pairs they carried (runtime.dedup) */
    moe_report_rows_t rw = moe_report_rows_split(r);
    jw_u64(w, "rows_between_ranks", rw.rows_between_ranks);
    jw_u64(w, "pairs_between_ranks", rw.pairs_between_ranks);
    jw_num(w, "pairs_per_row", rw.rows_between_ranks > 0 ? (double)rw.pairs_between_ranks /
                                                               (double)rw.rows_between_ranks
                                                         : NAN);
    jw_u64(w, "rows_local", rw.rows_local);
    jw_u64(w, "pairs_local", rw.pairs_local);
    json_matrix(w, r, "bytes", 0);
    json_matrix(w, r, "msgs", 1);
    json_matrix(w, r, "wait_ms", 2);
    json_matrix(w, r, "rows", 3);
    json_matrix(w, r, "pairs", 4);
    jw_close(w, '}');
}

static void json_memory_rank(json_w_t *w, const moe_rep_rank_t *k)
{
    double lo = 0, hi = 0, sum = 0;
    for (int i = 0; k->mem != NULL && i < k->num_mem; i++) {
        double v = (double)k->mem[i].rss_bytes / JSON_MIB;
        lo = i == 0 || v < lo ? v : lo;
        hi = i == 0 || v > hi ? v : hi;
        sum += v;
    }
    jw_open(w, NULL, '{', true);
    jw_i64(w, "rank", k->rank);
    jw_bool(w, "present", k->present);
    bool sampled = k->num_mem > 0 && k->mem != NULL;
    double peak = k->present && k->peak_known ? 1.0 : NAN; /* its last record: the peaks */
    jw_num(w, "rss_peak_mib", peak * (double)k->rss_peak / JSON_MIB);
    jw_num(w, "dev_peak_mib", peak * (double)k->dev_peak / JSON_MIB);
    jw_num(w, "expert_weights_mib", json_known(k) * (double)k->expert_weight_bytes / JSON_MIB);
    jw_num(w, "exchange_buffers_mib",
           json_known(k) * (double)k->exchange_buffer_bytes / JSON_MIB);
    jw_i64(w, "samples", k->mem != NULL ? k->num_mem : 0);
    jw_num(w, "rss_min_mib", sampled ? lo : NAN);
    jw_num(w, "rss_mean_mib", sampled ? sum / k->num_mem : NAN);
    jw_num(w, "rss_max_mib", sampled ? hi : NAN);
    /* the series itself: [ms since the first step on rank 0's clock, RSS MiB] */
    jw_open(w, "series", '[', true);
    for (int i = 0; k->mem != NULL && i < k->num_mem; i++) {
        jw_open(w, NULL, '[', true);
        jw_num(w, NULL, (double)k->mem[i].t_ns * 1e-6);
        jw_num(w, NULL, (double)k->mem[i].rss_bytes / 1048576.0);
        jw_close(w, ']');
    }
    jw_close(w, ']');
    jw_close(w, '}');
}

static void json_memory(json_w_t *w, const moe_report_t *r)
{
    jw_open(w, "memory", '[', false);
    for (int i = 0; i < r->world_size; i++) {
        json_memory_rank(w, &r->ranks[i]);
    }
    jw_close(w, ']');
}

static void json_findings(json_w_t *w, const moe_report_t *r)
{
    moe_report_findings_t x;
    moe_report_find(r, &x);
    jw_open(w, "findings", '{', false);
    jw_index(w, "hot_layer", x.hot_layer);
    jw_index(w, "hot_expert", x.hot_expert);
    jw_bool(w, "hot_by_demand", x.hot_by_demand);
    jw_num(w, "hot_share", x.hot_share);
    jw_u64_known(w, "hot_demand", x.hot_demand, !x.demand_unknown);
    jw_u64(w, "hot_kept", x.hot_kept);
    jw_u64_known(w, "hot_dropped", x.hot_dropped, !x.demand_unknown);
    jw_u64_known(w, "demand_total", x.demand_total, !x.demand_unknown);
    jw_u64_known(w, "dropped_total", x.dropped_total, !x.demand_unknown);
    jw_num(w, "drop_share", x.drop_share);
    jw_open(w, "top_drops", '[', false);
    for (int i = 0; i < x.num_drops; i++) {
        jw_open(w, NULL, '{', true);
        jw_i64(w, "layer", x.drop_layer[i]);
        jw_i64(w, "expert", x.drop_expert[i]);
        jw_u64(w, "dropped", x.drop_count[i]);
        jw_u64(w, "demand", x.drop_demand[i]);
        jw_close(w, '}');
    }
    jw_close(w, ']');
    jw_index(w, "slow_layer", x.slow_layer);
    jw_index(w, "slow_expert", x.slow_expert);
    jw_num(w, "slow_gflops", x.slow_gflops);
    jw_num(w, "slow_vs_median", x.slow_vs_median);
    jw_num(w, "slow_p99_ms", x.slow_p99_ns / 1e6);
    jw_index(w, "straggler_rank", x.straggler_rank);
    jw_num(w, "straggler_ratio", x.straggler_ratio);
    jw_num(w, "straggler_threshold", MOE_STRAGGLER_MIN_RATIO);
    jw_num(w, "exchange_share", x.exchange_share);
    jw_str(w, "exchange_share_includes_wait", x.exchange_wait_unknown); /* null: it does not */
    jw_num(w, "idle_share", x.idle_share);
    jw_num(w, "structural_wait_share", x.structural_wait_share);
    jw_index(w, "idle_most_rank", x.idle_most_rank);
    jw_index(w, "idle_most_waiting_for", x.idle_most_for);
    jw_num(w, "idle_most_share", x.idle_most_share);
    jw_close(w, '}');
}

static moe_status_t json_document(FILE *f, const moe_report_t *r)
{
    json_w_t w;
    memset(&w, 0, sizeof(w));
    w.f = f;
    fputc('{', f);
    jw_str(&w, "schema", JSON_SCHEMA);
    jw_i64(&w, "schema_version", JSON_SCHEMA_VERSION);
    jw_bool(&w, "partial", r->partial);
    jw_str(&w, "missing", r->partial ? r->missing : "");
    json_run(&w, r);
    moe_status_t st = json_routing_src(&w, r);
    json_config(&w, r);
    json_config_resolved(&w, r);
    st = st == MOE_OK ? json_ranks(&w, r) : st;
    json_experts(&w, r);
    json_replicas(&w, r);
    json_rebalances(&w, r);
    if (st == MOE_OK) {
        json_layers(&w, r);
    }
    json_comm(&w, r);
    json_memory(&w, r);
    json_findings(&w, r);
    fputs("\n}\n", f);
    return st;
}

moe_status_t moe_report_write_json(const moe_report_t *r, moe_error_t *err)
{
    if (r == NULL || r->cfg == NULL || r->ranks == NULL) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "summary.json: no report");
    }
    FILE *f = moe_report_open(r, "summary.json", err);
    if (f == NULL) {
        return MOE_ERR_IO;
    }
    moe_status_t st = json_document(f, r);
    moe_status_t cst = moe_report_close(f, r, "summary.json", err);
    if (st != MOE_OK) {
        return moe_error_set(err, st, "%s/summary.json: out of memory writing it", r->run_dir);
    }
    return cst;
}
