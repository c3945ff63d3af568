/* The report's common part: phase names, freeing, the findings every writer shows,
 * config.yaml, the files' table and INCOMPLETE, the headline printed at the end of a run.
 * The order of the writers is report_write.c's: this file calls no writer. */
#include "report/report.h"
#include "report/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
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
    free(r->replicas);
    free(r->rebalances);
    free(r->layers);
    free(r->ranks);
    free(r->bytes);
    free(r->msgs);
    free(r->rows);
    free(r->pairs);
    free(r->wait_ns);
    free(r->idle_for_ns);
    free(r->metrics);
    free(r->steps);
    free(r->events);
    r->ranks = NULL;
    r->experts = NULL;
    r->layers = NULL;
    r->bytes = r->msgs = r->rows = r->pairs = NULL;
    r->wait_ns = r->idle_for_ns = NULL;
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

moe_report_rows_t moe_report_rows_split(const moe_report_t *r)
{
    moe_report_rows_t b = {0, 0, 0, 0};
    int w = r != NULL && r->rows != NULL && r->pairs != NULL ? r->world_size : 0;
    for (int i = 0; i < w; i++) {
        for (int j = 0; j < w; j++) {
            size_t at = (size_t)i * (size_t)w + (size_t)j;
            b.rows_between_ranks += i != j ? r->rows[at] : 0;
            b.pairs_between_ranks += i != j ? r->pairs[at] : 0;
            b.rows_local += i == j ? r->rows[at] : 0;
            b.pairs_local += i == j ? r->pairs[at] : 0;
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

/* By demand when the routing ranks recorded any, else by tokens computed, in the layers
 * whose every expert's tokens are known (kept known): a layer's mean over a part of them
 * would make its expert look hotter than it is. */
static void find_hot(const moe_report_t *r, moe_report_findings_t *f)
{
    int ne = r->num_experts;
    uint64_t best = 0;
    f->hot_by_demand = f->demand_total > 0;
    for (int i = 0; r->experts != NULL && r->layers != NULL && i < r->num_layers * ne; i++) {
        if (!f->hot_by_demand && r->layers[i / ne].kept_unknown) {
            continue;
        }
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

double moe_report_wait_ms(const moe_report_t *r, int i, int j)
{
    int w = r->world_size;
    if (r->wait_ns == NULL || r->ranks == NULL || i < 0 || i >= w || j < 0 || j >= w ||
        !r->ranks[i].present) {
        return NAN;
    }
    return r->wait_ns[(size_t)i * (size_t)w + (size_t)j] / 1e6;
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

double moe_report_expert_per_step_ns(const moe_rep_rank_t *k)
{
    return k->steps > 0 ? k->phase[MOE_PHASE_EXPERT].sum / (double)k->steps : 0.0;
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
        double c = moe_report_expert_per_step_ns(k);
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

double moe_report_cpu_cores(const moe_rep_rank_t *k, bool whole_run)
{
    if (k == NULL || !k->present) {
        return NAN;
    }
    double cpu = whole_run ? k->cpu_run_ns : k->cpu_steps_ns;
    double wall = whole_run ? k->wall_run_ns : k->wall_steps_ns;
    return wall > 0.0 ? cpu / wall : NAN;
}

/* Why a present rank's designed wait is unknown (see exchange_wait_unknown), or NULL: it
 * hosts no experts and no rank with experts is present, or routes no tokens and no routing
 * rank is present (the merge books that wait as 0: it cannot place the ranks' arrival); or
 * over 1% of the exchanges lack some present rank's record (a part of its records lost:
 * their waits stay in the exchange, unsplit). */
static const char *find_wait_unknown(const moe_report_t *r)
{
    bool hosts = false, routes = false, hosts_profiled = false, routes_profiled = false;
    bool hosts_any = false, routes_any = false; /* false: not known (an older report) */
    for (int i = 0; i < r->world_size; i++) {
        const moe_rep_rank_t *k = &r->ranks[i];
        hosts = hosts || (k->present && k->num_local > 0);
        routes = routes || (k->present && k->routes);
        hosts_profiled = hosts_profiled || (k->profiled && k->num_local > 0);
        routes_profiled = routes_profiled || (k->profiled && k->routes);
        hosts_any = hosts_any || k->num_local > 0;
        routes_any = routes_any || k->routes;
    }
    for (int i = 0; i < r->world_size; i++) {
        const moe_rep_rank_t *k = &r->ranks[i];
        if (!k->present || !(k->phase[MOE_PHASE_STEP].sum > 0.0)) {
            continue;
        }
        if (k->num_local == 0 && hosts_any && !hosts) {
            return hosts_profiled ? "expert ranks' records missing" : "expert ranks not profiled";
        }
        if (!k->routes && routes_any && !routes) {
            return routes_profiled ? "routing ranks' records missing"
                                   : "routing ranks not profiled";
        }
    }
    if (r->exchanges_unsplit * 100 > r->exchanges_recorded) {
        return "some ranks' records of some exchanges missing";
    }
    return NULL;
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
    f->idle_most_rank = f->idle_most_for = -1;
    f->idle_most_share = 0.0;
    for (int i = 0; r->idle_for_ns != NULL && r->ranks != NULL && i < r->world_size; i++) {
        const moe_rep_rank_t *k = &r->ranks[i];
        double step = k->phase[MOE_PHASE_STEP].sum;
        for (int j = 0; k->present && step > 0.0 && j < r->world_size; j++) {
            double s = r->idle_for_ns[(size_t)i * (size_t)r->world_size + (size_t)j] / step;
            if (s > f->idle_most_share) {
                f->idle_most_rank = i;
                f->idle_most_for = j;
                f->idle_most_share = s;
            }
        }
    }
    f->exchange_share = n > 0 ? ex / n : 0.0;
    f->idle_share = n > 0 ? idle / n : 0.0;
    f->structural_wait_share = n > 0 ? designed / n : 0.0;
    f->exchange_wait_unknown = r->ranks != NULL ? find_wait_unknown(r) : NULL;
    /* sums, not a mean of shares: a rank that exchanges more weighs more */
    f->hidden_share = inflight > 0.0 ? hidden / inflight : NAN;
}

void moe_report_print_straggler(const moe_report_findings_t *f, FILE *out)
{
    if (f->straggler_rank >= 0) {
        fprintf(out, "straggler: rank %d, %.2fx the mean expert time of the ranks with "
                     "experts (named from %.2fx)",
                f->straggler_rank, f->straggler_ratio, MOE_STRAGGLER_MIN_RATIO);
    } else if (f->straggler_n > 1) {
        fprintf(out, "no straggler (ranks with experts within %.2fx of their mean expert "
                     "time; named from %.2fx)",
                f->straggler_ratio, MOE_STRAGGLER_MIN_RATIO);
    } else {
        fprintf(out, "no straggler (%d rank%s with experts %s recorded steps: nothing to "
                     "compare)",
                f->straggler_n, f->straggler_n == 1 ? "" : "s",
                f->straggler_n == 1 ? "has" : "have");
    }
}

void moe_report_print_waits(const moe_report_findings_t *f, FILE *out)
{
    if (f->exchange_wait_unknown != NULL) { /* its wait is in it: not "moving bytes" */
        fprintf(out, "%.1f%% of step time in the exchange (incl. waiting; %s), ",
                100.0 * f->exchange_share, f->exchange_wait_unknown);
    } else {
        fprintf(out, "%.1f%% of step time moving bytes, ", 100.0 * f->exchange_share);
    }
    fprintf(out, "%.1f%% waiting for slower ranks", 100.0 * f->idle_share);
    bool most = f->idle_most_rank >= 0 && f->idle_most_share > 0.0005; /* shows as 0.1% */
    if (most) {
        fprintf(out, " (most: rank %d waiting for rank %d, %.1f%% of its step", f->idle_most_rank,
                f->idle_most_for, 100.0 * f->idle_most_share);
    }
    if (f->structural_wait_share > 0.0005) { /* shows as 0.1% or more */
        fprintf(out, "%srouting rank's designed wait: %.1f%%, not imbalance", most ? "; " : " (",
                100.0 * f->structural_wait_share);
    }
    if (most || f->structural_wait_share > 0.0005) {
        fputc(')', out);
    }
}

void moe_report_find(const moe_report_t *r, moe_report_findings_t *f)
{
    memset(f, 0, sizeof(*f));
    f->hot_layer = f->hot_expert = -1;
    f->slow_layer = f->slow_expert = -1;
    f->straggler_rank = -1;
    f->idle_most_rank = f->idle_most_for = -1;
    f->hidden_share = NAN;
    f->drop_share = NAN;
    if (r == NULL) {
        return;
    }
    for (int l = 0; r->layers != NULL && l < r->num_layers; l++) {
        f->demand_unknown = f->demand_unknown || r->layers[l].demand_unknown;
    }
    find_drops(r, f); /* first: find_hot needs demand_total */
    find_hot(r, f);
    find_slow(r, f);
    find_straggler(r, f);
    find_exchange(r, f);
}

/* ---- the report's files: whole or absent, and the INCOMPLETE marker ------------ */

static const char *const rfile_names[MOE_RFILE_COUNT] = {
    [MOE_RFILE_SUMMARY_JSON] = "summary.json",  [MOE_RFILE_SUMMARY_TXT] = "summary.txt",
    [MOE_RFILE_RANK_SUMMARIES] = "summary_rank_*.txt", [MOE_RFILE_CONFIG] = "config.yaml",
    [MOE_RFILE_COMM_CSV] = "comm.csv",          [MOE_RFILE_METRICS_CSV] = "metrics.csv",
    [MOE_RFILE_HTML] = "report.html",           [MOE_RFILE_TRACE] = "trace.json",
    [MOE_RFILE_ROUTING] = "routing.safetensors",
};

const char *moe_report_file_name(moe_rfile_t which)
{
    return which >= 0 && which < MOE_RFILE_COUNT ? rfile_names[which] : "?";
}

void moe_report_files_init(moe_report_files_t *t, const moe_config_t *cfg)
{
    memset(t, 0, sizeof(*t));
    if (cfg != NULL && !cfg->prof_trace) {
        t->state[MOE_RFILE_TRACE] = MOE_RFILE_OFF;
    }
    t->state[MOE_RFILE_ROUTING] = MOE_RFILE_OFF; /* until a writer is given: write_all */
}

/* Which entry a writer's file name belongs to; MOE_RFILE_COUNT for none. */
static moe_rfile_t rfile_of(const char *name)
{
    if (strncmp(name, "summary_rank_", 13) == 0) {
        return MOE_RFILE_RANK_SUMMARIES;
    }
    for (int i = 0; i < MOE_RFILE_COUNT; i++) {
        if (strcmp(name, rfile_names[i]) == 0) {
            return (moe_rfile_t)i;
        }
    }
    return MOE_RFILE_COUNT;
}

/* A failure stays: of several rank summaries, one lost one makes the entry failed. */
static void rfile_set(const moe_report_t *r, moe_rfile_t which, const char *name, int errnum)
{
    moe_report_files_t *t = r->files;
    if (t == NULL || which >= MOE_RFILE_COUNT) {
        return;
    }
    if (errnum != 0 && t->state[which] != MOE_RFILE_FAILED) {
        t->state[which] = MOE_RFILE_FAILED;
        bool group = which == MOE_RFILE_RANK_SUMMARIES; /* name the one that failed */
        snprintf(t->why[which], sizeof(t->why[which]), "%s%snot written: %s%s",
                 group ? name : "", group ? " " : "", strerror(errnum),
                 group ? " (and the ranks after it)" : "");
    } else if (errnum != 0) {
        return;
    } else if (t->state[which] != MOE_RFILE_FAILED) {
        t->state[which] = MOE_RFILE_WRITTEN;
    }
}

void moe_report_file_done(const moe_report_t *r, moe_rfile_t which, int errnum)
{
    if (r != NULL) {
        rfile_set(r, which, rfile_names[which < MOE_RFILE_COUNT ? which : 0], errnum);
    }
}

void moe_report_file_failed(const moe_report_t *r, moe_rfile_t which, const char *why)
{
    moe_report_files_t *t = r != NULL ? r->files : NULL;
    if (t != NULL && which < MOE_RFILE_COUNT) {
        t->state[which] = MOE_RFILE_FAILED;
        snprintf(t->why[which], sizeof(t->why[which]), "not written: %.140s", why);
    }
}

void moe_report_file_off(const moe_report_t *r, moe_rfile_t which)
{
    if (r != NULL && r->files != NULL && which < MOE_RFILE_COUNT) {
        r->files->state[which] = MOE_RFILE_OFF;
    }
}

/* File i in state s is metrics.csv, not written because its stream lost rows from a known
 * step on: INCOMPLETE and the headline say from which. */
static bool metrics_rows_lost(const moe_report_t *r, int i, moe_rfile_state_t s)
{
    return i == MOE_RFILE_METRICS_CSV && s == MOE_RFILE_FAILED && r->metrics_write_failed &&
           r->metrics_stop_step >= 0;
}

bool moe_report_metrics_cut_line(const moe_report_t *r, char *line, size_t size)
{
    if (!r->metrics_write_failed || r->files == NULL ||
        r->files->state[MOE_RFILE_METRICS_CSV] == MOE_RFILE_FAILED) {
        return false; /* a metrics.csv not written at all has its own line */
    }
    snprintf(line, size, "metrics.csv: %lld rows from step %lld on not written: %s",
             (long long)r->metrics_lost, (long long)r->metrics_stop_step, r->metrics_stop_why);
    return true;
}

bool moe_report_incomplete(const moe_report_t *r)
{
    bool missing = r->metrics_write_failed;
    for (int i = 0; r->files != NULL && i < MOE_RFILE_COUNT; i++) {
        missing = missing || r->files->state[i] == MOE_RFILE_PENDING ||
                  r->files->state[i] == MOE_RFILE_FAILED;
    }
    return missing;
}

/* A full disk has no block for INCOMPLETE.part: overwrite the marker written at start in
 * its own blocks instead (not atomic, but a marker that is there says "incomplete"
 * whatever its state; better than one that lists as pending what was written). */
static void incomplete_in_place(const char *path, const char *text, size_t n)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        return;
    }
    bool ok = pwrite(fd, text, n, 0) == (ssize_t)n;
    if (ok && ftruncate(fd, (off_t)n) == 0) {
        fsync(fd);
    }
    close(fd);
}

void moe_report_mark_incomplete(const moe_report_t *r)
{
    char text[MOE_RFILE_COUNT * 200 + 512], path[MOE_PATH_MAX + 16];
    size_t n = 0;
    if (r->files == NULL || r->run_dir[0] == '\0') {
        return;
    }
    n += (size_t)snprintf(text, sizeof(text),
                          "This report is not complete: the files below are missing (a file "
                          "that is here is whole).\n");
    for (int i = 0; i < MOE_RFILE_COUNT && n < sizeof(text); i++) {
        moe_rfile_state_t s = r->files->state[i];
        if (s == MOE_RFILE_PENDING || s == MOE_RFILE_FAILED) {
            const char *why = s == MOE_RFILE_PENDING ? "not yet written" : r->files->why[i];
            if (s == MOE_RFILE_PENDING && i == MOE_RFILE_METRICS_CSV && r->metrics_streamed) {
                why = "not yet written: until the report is complete its rows stream into "
                      "metrics.csv.part (the same CSV: header, then whole rows), which is what "
                      "a run that ends early leaves";
            }
            n += (size_t)snprintf(text + n, sizeof(text) - n, "%s: %s", rfile_names[i], why);
            if (n < sizeof(text) && metrics_rows_lost(r, i, s)) { /* one line */
                n += (size_t)snprintf(text + n, sizeof(text) - n, " (%lld rows from step %lld on)",
                                      (long long)r->metrics_lost,
                                      (long long)r->metrics_stop_step);
            }
            n += n < sizeof(text) ? (size_t)snprintf(text + n, sizeof(text) - n, "\n") : 0;
        }
    }
    if (n < sizeof(text) && moe_report_metrics_cut_line(r, text + n, sizeof(text) - n)) {
        n += strlen(text + n);
        n += n < sizeof(text) ? (size_t)snprintf(text + n, sizeof(text) - n, "\n") : 0;
    }
    n = n < sizeof(text) ? n : sizeof(text) - 1;
    snprintf(path, sizeof(path), "%s/INCOMPLETE", r->run_dir);
    if (moe_afile_write(path, text, n) == ENOSPC) {
        incomplete_in_place(path, text, n);
    }
}

/* ---- opening and closing a file, config.yaml, the reserve --------------------------- */

FILE *moe_report_open(const moe_report_t *r, const char *name, moe_error_t *err)
{
    char path[MOE_PATH_MAX + 64];
    if (r->dir_error[0] != '\0') {
        rfile_set(r, rfile_of(name), name, ENOENT);
        moe_error_set(err, MOE_ERR_IO, "%s", r->dir_error);
        return NULL;
    }
    snprintf(path, sizeof(path), "%s/%s", r->run_dir, name);
    int e = 0;
    FILE *f = moe_afile_open(path, &e);
    if (f == NULL) {
        rfile_set(r, rfile_of(name), name, e);
        moe_error_set(err, MOE_ERR_IO, "%s: cannot create: %s", path, strerror(e));
    }
    return f;
}

moe_status_t moe_report_close(FILE *f, const moe_report_t *r, const char *name, moe_error_t *err)
{
    char path[MOE_PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", r->run_dir, name);
    int e = moe_afile_commit(f, path);
    rfile_set(r, rfile_of(name), name, e);
    if (e != 0) {
        return moe_error_set(err, MOE_ERR_IO, "%s: not written: %s", path, strerror(e));
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
    /* the text as the run read it, but for profiler.control_token's value: a secret */
    size_t n = 0;
    char *text = r->config_text != NULL && r->cfg != NULL
                     ? moe_cfg_redacted_text(r->cfg, r->config_text, r->config_len, &n)
                     : NULL;
    if (text != NULL) {
        fwrite(text, 1, n, f); /* a short write shows in ferror at close */
    } else if (r->config_text != NULL && r->config_len > 0) {
        fputs("# not copied: the config text could not be told apart from its control token\n",
              f);
    }
    free(text);
    return moe_report_close(f, r, "config.yaml", err);
}

void moe_report_reserve(const moe_report_t *r, int64_t bytes)
{
    char path[MOE_PATH_MAX + 32];
    off_t want = (off_t)bytes;
    snprintf(path, sizeof(path), "%s/" MOE_REPORT_RESERVE, r->run_dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        return;
    }
    if (posix_fallocate(fd, 0, want) != 0) { /* not every file system can: write zeros */
        static const char zeros[4096];
        for (off_t at = 0; at < want && write(fd, zeros, sizeof(zeros)) > 0;) {
            at += (off_t)sizeof(zeros);
        }
    }
    close(fd);
}

void moe_report_unreserve(const moe_report_t *r)
{
    char path[MOE_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/" MOE_REPORT_RESERVE, r->run_dir);
    unlink(path);
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

/* The files written, and only those; then what is missing and why. */
static void headline_files(const moe_report_t *r, FILE *out)
{
    static const moe_rfile_t listed[] = {MOE_RFILE_HTML, MOE_RFILE_SUMMARY_JSON, MOE_RFILE_TRACE};
    const moe_report_files_t *t = r->files;
    if (r->dir_error[0] != '\0') {
        fprintf(out, "  report: not written: %s\n", r->dir_error);
        return;
    }
    if (t == NULL) {
        fprintf(out, "  report: %s/summary.txt (report.html, summary.json%s)\n", r->run_dir,
                r->cfg != NULL && r->cfg->prof_trace ? ", trace.json" : "");
        return;
    }
    bool txt = t->state[MOE_RFILE_SUMMARY_TXT] == MOE_RFILE_WRITTEN;
    int n = 0;
    fprintf(out, "  report: %s%s", r->run_dir, txt ? "/summary.txt" : "");
    for (size_t i = 0; i < sizeof(listed) / sizeof(listed[0]); i++) {
        if (t->state[listed[i]] == MOE_RFILE_WRITTEN) {
            fprintf(out, "%s%s", n++ ? ", " : " (", rfile_names[listed[i]]);
        }
    }
    fputs(n ? ")\n" : "\n", out);
    if (!moe_report_incomplete(r)) {
        return;
    }
    fputs("  INCOMPLETE report:", out);
    n = 0;
    for (int i = 0; i < MOE_RFILE_COUNT; i++) {
        if (t->state[i] == MOE_RFILE_FAILED || t->state[i] == MOE_RFILE_PENDING) {
            fprintf(out, "%s %s: %s", n++ ? ";" : "", rfile_names[i],
                    t->state[i] == MOE_RFILE_FAILED ? t->why[i] : "not written");
            if (metrics_rows_lost(r, i, t->state[i])) {
                fprintf(out, " (stopped at step %lld)", (long long)r->metrics_stop_step);
            }
        }
    }
    if (r->metrics_write_failed && t->state[MOE_RFILE_METRICS_CSV] != MOE_RFILE_FAILED) {
        fprintf(out, "%s metrics.csv: stopped at step %lld: %s", n++ ? ";" : "",
                (long long)r->metrics_stop_step, r->metrics_stop_why);
    }
    fprintf(out, "; see %s/INCOMPLETE\n", r->run_dir);
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
    bool recorded = n > 0 && r->recorded_steps > 0;
    if (f.hot_layer >= 0) {
        fprintf(out, "  hottest expert: layer %d expert %d, %s %.2fx its layer's mean", f.hot_layer,
                f.hot_expert, f.hot_by_demand ? "demand" : "tokens", f.hot_share);
        if (f.hot_by_demand) {
            fprintf(out, " (kept %llu, dropped %llu)", (unsigned long long)f.hot_kept,
                    (unsigned long long)f.hot_dropped);
        }
        fputs("; ", out);
    } else if (recorded) { /* no layer's counts known: the other findings alone */
        fputs("  ", out);
    }
    if (f.hot_layer >= 0 || recorded) {
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
        moe_report_rows_t rw = moe_report_rows_split(r);
        fprintf(out, "  bytes per recorded step: %.3f MB between ranks, %.3f MB local copies "
                     "(a rank's rows to its own experts, not sent)",
                (double)b.between_ranks / per, (double)b.local / per);
        if (rw.rows_between_ranks > 0) {
            fprintf(out, "; rows between ranks carry %.3f (token, expert) pairs each",
                    (double)rw.pairs_between_ranks / (double)rw.rows_between_ranks);
        }
        fputc('\n', out);
    }
    headline_files(r, out);
}
