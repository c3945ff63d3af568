/* The report's common part: phase names, freeing, the findings every writer shows,
 * config.yaml, the headline printed at the end of a run, and the order of the writers. */
#include "report/report.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void moe_report_free(moe_report_t *r)
{
    if (r == NULL) {
        return;
    }
    for (int i = 0; r->ranks != NULL && i < r->world_size; i++) {
        free(r->ranks[i].mem);
        free(r->ranks[i].bytes_sent);
        free(r->ranks[i].bytes_recv);
    }
    for (int l = 0; r->layers != NULL && l < r->num_layers; l++) {
        free(r->layers[l].demand);
        free(r->layers[l].kept);
        free(r->layers[l].dropped);
    }
    free(r->experts);
    free(r->layers);
    free(r->ranks);
    free(r->bytes);
    free(r->msgs);
    free(r->wait_ns);
    free(r->metrics);
    free(r->steps);
    free(r->events);
    r->ranks = NULL;
    r->experts = NULL;
    r->layers = NULL;
    r->bytes = r->msgs = NULL;
    r->wait_ns = NULL;
    r->metrics = NULL;
    r->steps = NULL;
    r->events = NULL;
    r->num_metrics = r->num_steps = r->num_events = 0;
}

/* ---- bytes --------------------------------------------------------------------- */

moe_report_bytes_t moe_report_bytes_split(const moe_report_t *r)
{
    moe_report_bytes_t b = {0, 0};
    int w = r != NULL && r->bytes != NULL ? r->world_size : 0;
    for (int i = 0; i < w; i++) {
        for (int j = 0; j < w; j++) {
            uint64_t v = r->bytes[(size_t)i * (size_t)w + (size_t)j];
            b.between_ranks += i != j ? v : 0;
            b.local += i == j ? v : 0;
        }
    }
    return b;
}

moe_report_rank_bytes_t moe_report_rank_bytes(const moe_report_t *r, int rank)
{
    moe_report_rank_bytes_t b = {0, 0, 0};
    int w = r != NULL && r->bytes != NULL ? r->world_size : 0;
    if (rank < 0 || rank >= w) {
        return b;
    }
    for (int j = 0; j < w; j++) {
        uint64_t out = r->bytes[(size_t)rank * (size_t)w + (size_t)j];
        uint64_t in = r->bytes[(size_t)j * (size_t)w + (size_t)rank];
        b.sent += j != rank ? out : 0;
        b.recv += j != rank ? in : 0;
        b.local += j == rank ? out : 0;
    }
    return b;
}

/* ---- findings -------------------------------------------------------------------- */

/* GFLOP/s of an expert over its recorded calls (flops per ns = GFLOP/s), or -1 if it did
 * not run. */
static double find_gflops(const moe_rep_expert_t *e)
{
    return e->calls > 0 && e->hist.sum > 0.0 && e->flops > 0.0 ? e->flops / e->hist.sum : -1.0;
}

static uint64_t find_at(const uint64_t *v, int e)
{
    return v != NULL ? v[e] : 0;
}

/* By demand when the routing ranks recorded any, else by tokens computed. */
static void find_hot(const moe_report_t *r, moe_report_findings_t *f)
{
    int ne = r->num_experts;
    uint64_t best = 0;
    f->hot_by_demand = f->demand_total > 0;
    for (int i = 0; r->experts != NULL && r->layers != NULL && i < r->num_layers * ne; i++) {
        uint64_t v = f->hot_by_demand ? find_at(r->layers[i / ne].demand, i % ne)
                                      : r->experts[i].tokens;
        if (v > best) {
            best = v;
            f->hot_layer = i / ne;
            f->hot_expert = i % ne;
        }
    }
    if (f->hot_layer < 0) {
        return;
    }
    const moe_rep_layer_t *y = &r->layers[f->hot_layer];
    double sum = 0.0;
    for (int e = 0; e < ne; e++) {
        sum += f->hot_by_demand ? (double)find_at(y->demand, e)
                                : (double)r->experts[f->hot_layer * ne + e].tokens;
    }
    f->hot_share = (double)best / (sum / ne);
    f->hot_demand = find_at(y->demand, f->hot_expert);
    f->hot_kept = f->hot_by_demand ? find_at(y->kept, f->hot_expert) : best;
    f->hot_dropped = find_at(y->dropped, f->hot_expert);
}

/* Totals, and the MOE_REPORT_TOP_DROPS experts with the most dropped choices. */
static void find_drops(const moe_report_t *r, moe_report_findings_t *f)
{
    int ne = r->num_experts;
    for (int l = 0; r->layers != NULL && l < r->num_layers; l++) {
        for (int e = 0; e < ne; e++) {
            uint64_t d = find_at(r->layers[l].dropped, e);
            f->demand_total += find_at(r->layers[l].demand, e);
            f->dropped_total += d;
            int at = f->num_drops < MOE_REPORT_TOP_DROPS ? f->num_drops : MOE_REPORT_TOP_DROPS - 1;
            if (d == 0 || (f->num_drops == MOE_REPORT_TOP_DROPS && d <= f->drop_count[at])) {
                continue;
            }
            for (; at > 0 && f->drop_count[at - 1] < d; at--) { /* insert, most first */
                f->drop_layer[at] = f->drop_layer[at - 1];
                f->drop_expert[at] = f->drop_expert[at - 1];
                f->drop_count[at] = f->drop_count[at - 1];
                f->drop_demand[at] = f->drop_demand[at - 1];
            }
            f->drop_layer[at] = l;
            f->drop_expert[at] = e;
            f->drop_count[at] = d;
            f->drop_demand[at] = find_at(r->layers[l].demand, e);
            f->num_drops += f->num_drops < MOE_REPORT_TOP_DROPS;
        }
    }
    f->drop_share = f->demand_total > 0 ? (double)f->dropped_total / (double)f->demand_total : NAN;
}

int moe_report_ranks_recorded(const moe_report_t *r)
{
    int n = 0;
    for (int i = 0; r != NULL && r->ranks != NULL && i < r->world_size; i++) {
        n += r->ranks[i].present && r->ranks[i].steps > 0;
    }
    return n;
}

static int find_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of v[n] (sorts v). */
static double find_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), find_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void find_slow(const moe_report_t *r, moe_report_findings_t *f)
{
    int total = r->experts != NULL ? r->num_layers * r->num_experts : 0, n = 0;
    double *rates = total > 0 ? malloc(sizeof(double) * (size_t)total) : NULL;
    if (rates == NULL) {
        return;
    }
    for (int i = 0; i < total; i++) {
        double g = find_gflops(&r->experts[i]);
        if (g < 0.0) {
            continue;
        }
        if (n == 0 || g < f->slow_gflops) {
            f->slow_gflops = g;
            f->slow_layer = i / r->num_experts;
            f->slow_expert = i % r->num_experts;
            f->slow_p99_ns = moe_hist_quantile(&r->experts[i].hist, 0.99);
        }
        rates[n++] = g;
    }
    if (n > 0) {
        double med = find_median(rates, n);
        f->slow_vs_median = med > 0.0 ? f->slow_gflops / med : 0.0;
    }
    free(rates);
}

/* Compute time per recorded step: ranks may have recorded different numbers of steps. */
static double find_compute_per_step(const moe_rep_rank_t *k)
{
    return k->steps > 0 ? k->compute_ns / (double)k->steps : 0.0;
}

static void find_straggler(const moe_report_t *r, moe_report_findings_t *f)
{
    double sum = 0.0, best = -1.0;
    int n = 0, top = -1;
    for (int i = 0; r->ranks != NULL && i < r->world_size; i++) {
        const moe_rep_rank_t *k = &r->ranks[i];
        if (!k->present || k->num_local <= 0 || k->steps <= 0) {
            continue;
        }
        double c = find_compute_per_step(k);
        sum += c;
        n++;
        if (c > best) {
            best = c;
            top = k->rank;
        }
    }
    f->straggler_ratio = n > 0 && sum > 0.0 ? best / (sum / n) : 0.0;
    f->straggler_n = n;
    /* the threshold less a rounding margin, so a printed "1.10x" is never "no straggler" */
    f->straggler_rank = f->straggler_ratio >= MOE_STRAGGLER_MIN_RATIO - 1e-9 ? top : -1;
}

double moe_report_hidden_share(const moe_rep_rank_t *k)
{
    return k != NULL && k->inflight_ns > 0.0 ? k->hidden_ns / k->inflight_ns : NAN;
}

static void find_exchange(const moe_report_t *r, moe_report_findings_t *f)
{
    double ex = 0.0, idle = 0.0, designed = 0.0, inflight = 0.0, hidden = 0.0;
    int n = 0;
    for (int i = 0; r->ranks != NULL && i < r->world_size; i++) {
        const moe_rep_rank_t *k = &r->ranks[i];
        double step = k->phase[MOE_PHASE_STEP].sum;
        if (k->present) {
            inflight += k->inflight_ns;
            hidden += k->hidden_ns;
        }
        if (!k->present || !(step > 0.0)) {
            continue;
        }
        ex += k->exchange_ns / step;
        idle += k->idle_ns / step;
        designed += k->structural_wait_ns / step;
        n++;
    }
    f->exchange_share = n > 0 ? ex / n : 0.0;
    f->idle_share = n > 0 ? idle / n : 0.0;
    f->structural_wait_share = n > 0 ? designed / n : 0.0;
    /* sums, not a mean of shares: a rank that exchanges more weighs more */
    f->hidden_share = inflight > 0.0 ? hidden / inflight : NAN;
}

void moe_report_print_straggler(const moe_report_findings_t *f, FILE *out)
{
    if (f->straggler_rank >= 0) {
        fprintf(out, "straggler: rank %d, %.2fx the mean compute of the ranks with experts "
                     "(named from %.2fx)",
                f->straggler_rank, f->straggler_ratio, MOE_STRAGGLER_MIN_RATIO);
    } else if (f->straggler_n > 1) {
        fprintf(out, "no straggler (ranks with experts within %.2fx of their mean compute; "
                     "named from %.2fx)",
                f->straggler_ratio, MOE_STRAGGLER_MIN_RATIO);
    } else {
        fprintf(out, "no straggler (%d rank%s with experts present: nothing to compare)",
                f->straggler_n, f->straggler_n == 1 ? "" : "s");
    }
}

void moe_report_print_waits(const moe_report_findings_t *f, FILE *out)
{
    fprintf(out, "%.1f%% of step time moving bytes, %.1f%% waiting for slower ranks",
            100.0 * f->exchange_share, 100.0 * f->idle_share);
    if (f->structural_wait_share > 0.0005) { /* shows as 0.1% or more */
        fprintf(out, " (routing rank's designed wait: %.1f%%, not imbalance)",
                100.0 * f->structural_wait_share);
    }
}

void moe_report_find(const moe_report_t *r, moe_report_findings_t *f)
{
    memset(f, 0, sizeof(*f));
    f->hot_layer = f->hot_expert = -1;
    f->slow_layer = f->slow_expert = -1;
    f->straggler_rank = -1;
    f->hidden_share = NAN;
    f->drop_share = NAN;
    if (r == NULL) {
        return;
    }
    find_drops(r, f); /* first: find_hot needs demand_total */
    find_hot(r, f);
    find_slow(r, f);
    find_straggler(r, f);
    find_exchange(r, f);
}

/* ---- config.yaml and the writers' order ------------------------------------------ */

FILE *moe_report_open(const moe_report_t *r, const char *name, moe_error_t *err)
{
    char path[MOE_PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", r->run_dir, name);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        moe_error_set(err, MOE_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    }
    return f;
}

moe_status_t moe_report_close(FILE *f, const moe_report_t *r, const char *name, moe_error_t *err)
{
    bool bad = ferror(f) != 0;
    bad |= fclose(f) != 0;
    if (bad) {
        return moe_error_set(err, MOE_ERR_IO, "%s/%s: write failed (disk full?)", r->run_dir, name);
    }
    return MOE_OK;
}

moe_status_t moe_report_write_config(const moe_report_t *r, moe_error_t *err)
{
    if (r == NULL) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "config.yaml: no report");
    }
    FILE *f = moe_report_open(r, "config.yaml", err);
    if (f == NULL) {
        return MOE_ERR_IO;
    }
    size_t n = r->config_text != NULL ? r->config_len : 0;
    if (n > 0) {
        fwrite(r->config_text, 1, n, f); /* a short write shows in ferror at close */
    }
    return moe_report_close(f, r, "config.yaml", err);
}

moe_status_t moe_report_write_all(const moe_report_t *r, moe_error_t *err)
{
    typedef moe_status_t (*writer_fn)(const moe_report_t *, moe_error_t *);
    const writer_fn writers[] = {
        moe_report_write_config, moe_report_write_summary, moe_report_write_rank_summaries,
        moe_report_write_json,   moe_report_write_csv,     moe_report_write_html,
        moe_report_write_trace, /* last: the largest, and the least needed after a signal */
    };
    if (r == NULL || r->cfg == NULL) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "report: no report or no config");
    }
    /* Keep going after a failure: the other files may still be written and useful; the
     * first error is the one returned. */
    moe_status_t first = MOE_OK;
    for (size_t i = 0; i < sizeof(writers) / sizeof(writers[0]); i++) {
        if (writers[i] == moe_report_write_trace && !r->cfg->prof_trace) {
            continue;
        }
        moe_error_t e;
        moe_error_clear(&e);
        moe_status_t st = writers[i](r, &e);
        if (st != MOE_OK && first == MOE_OK) {
            first = st;
            if (err != NULL) {
                *err = e;
            }
        }
    }
    return first;
}

/* ---- headline -------------------------------------------------------------------- */

/* "s" unless n is 1. */
static const char *plural(int64_t n)
{
    return n == 1 ? "" : "s";
}

/* The drops line: share of choices dropped and the experts that dropped most. */
static void headline_drops(const moe_report_findings_t *f, FILE *out)
{
    fprintf(out, "  dropped: %.1f%% of %llu expert choices (capacity limit); most:",
            100.0 * f->drop_share, (unsigned long long)f->demand_total);
    for (int i = 0; i < f->num_drops; i++) {
        fprintf(out, "%s layer %d expert %d (%llu of %llu)", i ? "," : "", f->drop_layer[i],
                f->drop_expert[i], (unsigned long long)f->drop_count[i],
                (unsigned long long)f->drop_demand[i]);
    }
    fputc('\n', out);
}

/* tokens/s is not repeated here: the run's own summary (app/main.c) prints it. */
void moe_report_print_headline(const moe_report_t *r, FILE *out)
{
    moe_report_findings_t f;
    if (r == NULL || out == NULL) {
        return;
    }
    moe_report_find(r, &f);
    int n = moe_report_ranks_recorded(r);
    if (r->all_warmup) {
        fprintf(out, "moed: profile: no step recorded: all %lld step%s were warm-up "
                     "(profiler.warmup_steps %lld)\n",
                (long long)r->steps_run, plural(r->steps_run),
                r->cfg != NULL ? (long long)r->cfg->prof_warmup_steps : 0LL);
    } else {
        fprintf(out, "moed: profile: %lld step%s recorded on %d of %d rank%s\n",
                (long long)r->recorded_steps, plural(r->recorded_steps), n, r->world_size,
                plural(r->world_size));
    }
    if (r->partial) {
        fprintf(out, "  PARTIAL report: missing %s\n", r->missing[0] ? r->missing : "some ranks");
    }
    if (f.hot_layer >= 0) {
        fprintf(out, "  hottest expert: layer %d expert %d, %s %.2fx its layer's mean", f.hot_layer,
                f.hot_expert, f.hot_by_demand ? "demand" : "tokens", f.hot_share);
        if (f.hot_by_demand) {
            fprintf(out, " (kept %llu, dropped %llu)", (unsigned long long)f.hot_kept,
                    (unsigned long long)f.hot_dropped);
        }
        fputs("; ", out);
        moe_report_print_straggler(&f, out);
        fputs("; exchange: ", out);
        moe_report_print_waits(&f, out);
        fputc('\n', out);
    }
    if (f.dropped_total > 0) {
        headline_drops(&f, out);
    }
    if (r->recorded_steps > 0 && r->bytes != NULL) {
        moe_report_bytes_t b = moe_report_bytes_split(r);
        double per = 1e6 * (double)r->recorded_steps; /* MB per recorded step */
        fprintf(out, "  bytes per recorded step: %.3f MB between ranks, %.3f MB local copies "
                     "(a rank's rows to its own experts, not sent)\n",
                (double)b.between_ranks / per, (double)b.local / per);
    }
    fprintf(out, "  report: %s/summary.txt (report.html, summary.json%s)\n", r->run_dir,
            r->cfg != NULL && r->cfg->prof_trace ? ", trace.json" : "");
}
