/* trace.json: the recorded spans in the Chrome trace event format (JSON object form), for
 * Perfetto (ui.perfetto.dev) and chrome://tracing.
 *
 * One process per rank and one thread per lane (steps, phases, row exchanges in flight,
 * each local expert), then counter tracks: memory per rank and tokens per expert per
 * routing step. Two choices
 * follow Perfetto's JSON importer rather than the obvious numbering:
 *   - pid = rank + 1: pid 0 is the kernel's swapper in Perfetto's model and gets special
 *     handling (its maintainers ask synthetic traces to start at 1);
 *   - tid = pid * 10000 + lane: the importer keys threads (and thread names) by tid alone,
 *     so a lane number reused by every rank would merge their tracks.
 * Complete (X) events of one thread must nest (any two disjoint or one inside the other):
 * Perfetto drops those that do not. Row exchanges of several chunks overlap in time, so
 * each lane is laid out first: a span that would partly overlap one already placed moves
 * to an extra lane of the same rank ("exchange #2", tid pid * 10000 + 5000 + n), the
 * first lane of that kind where it nests.
 * Timeline events (X and C) are bounded by profiler.trace_max_events; what does not fit is
 * counted in otherData.dropped_events. The per-rank name and sort metadata are always
 * written (without them the trace is unreadable) and are not counted. */
#include "report/report.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "report/json_write.h"

#define TRACE_TID_STRIDE 10000 /* > TRACE_LANE_EXTRA + the extra lanes of a rank */
#define TRACE_LANE_EXTRA 5000  /* > MOE_LANE_EXPERT0 + MOE_MAX_EXPERTS: extra lanes start here */
#define TRACE_EXTRA_MAX (TRACE_TID_STRIDE - TRACE_LANE_EXTRA) /* extra lanes per rank */

/* An extra lane: the k-th (k >= 1) lane of its parent lane's spans on one rank. */
typedef struct trace_extra {
    int rank, parent, k;
} trace_extra_t;

/* Where each span goes: lane[i] is events[i]'s lane in the tid (its own, or
 * TRACE_LANE_EXTRA + n for the rank's n-th extra lane, described by extra[]). */
typedef struct trace_layout {
    int32_t *lane;
    trace_extra_t *extra;
    int num_extra, cap_extra;
    int *extra_of_rank; /* [world] extra lanes so far */
    int64_t unplaced;   /* spans beyond TRACE_EXTRA_MAX extra lanes: not written */
} trace_layout_t;
#define TRACE_MIB 1048576.0

typedef struct trace_w {
    FILE *f;
    bool first;       /* no comma before the first event */
    int64_t budget;   /* timeline events still allowed */
    int64_t written;  /* timeline events written */
    int64_t skipped;  /* timeline events beyond the budget */
    int64_t shift_ns; /* added to every timestamp so none is negative */
} trace_w_t;

static int trace_pid(int rank)
{
    return rank + 1;
}

static int64_t trace_tid(int rank, int lane)
{
    return (int64_t)trace_pid(rank) * TRACE_TID_STRIDE + lane;
}

/* Starts one event object (the comma before it included). */
static void trace_begin(trace_w_t *w)
{
    fputs(w->first ? "\n" : ",\n", w->f);
    w->first = false;
}

/* Microseconds with nanosecond precision, from integer ns (no rounding through a double). */
static void trace_us(FILE *f, int64_t ns)
{
    int64_t a = ns < 0 ? -ns : ns;
    fprintf(f, "%s%" PRId64 ".%03" PRId64, ns < 0 ? "-" : "", a / 1000, a % 1000);
}

/* True when a timeline event may be written; counts it either way. */
static bool trace_take(trace_w_t *w)
{
    if (w->budget <= 0) {
        w->skipped++;
        return false;
    }
    w->budget--;
    w->written++;
    return true;
}

/* ---- metadata -------------------------------------------------------------------- */

static void trace_meta(trace_w_t *w, const char *what, int rank, int lane, const char *key,
                       const char *name, int64_t index)
{
    trace_begin(w);
    fprintf(w->f, "{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d", what, trace_pid(rank));
    if (lane >= 0) {
        fprintf(w->f, ",\"tid\":%" PRId64, trace_tid(rank, lane));
    }
    fprintf(w->f, ",\"args\":{\"%s\":", key);
    if (name != NULL) {
        moe_json_put_string(w->f, name);
    } else {
        fprintf(w->f, "%" PRId64, index);
    }
    fputs("}}", w->f);
}

/* The name of lane `lane` of a rank hosting ids[0..n-1]. */
static void trace_lane_name(int lane, const int32_t *ids, int n, char *buf, size_t cap)
{
    if (lane == MOE_LANE_STEPS || lane == MOE_LANE_PHASES || lane == MOE_LANE_EXCHANGE) {
        snprintf(buf, cap, "%s",
                 lane == MOE_LANE_STEPS    ? "steps"
                 : lane == MOE_LANE_PHASES ? "phases"
                                           : "exchange");
    } else if (lane >= MOE_LANE_EXPERT0 && lane - MOE_LANE_EXPERT0 < n) {
        snprintf(buf, cap, "expert %d", ids[lane - MOE_LANE_EXPERT0]);
    } else {
        snprintf(buf, cap, "lane %d", lane);
    }
}

static void trace_rank_meta(trace_w_t *w, const moe_report_t *r, const trace_layout_t *lo,
                            int rank, int32_t *ids)
{
    char name[128];
    if (r->ranks[rank].host[0] != '\0') {
        snprintf(name, sizeof(name), "rank %d (%.64s)", rank, r->ranks[rank].host);
    } else {
        snprintf(name, sizeof(name), "rank %d", rank);
    }
    trace_meta(w, "process_name", rank, -1, "name", name, 0);
    trace_meta(w, "process_sort_index", rank, -1, "sort_index", NULL, rank);
    int n = moe_cfg_experts_of_rank(r->cfg, rank, ids);
    for (int lane = 0; lane < MOE_LANE_EXPERT0 + n; lane++) {
        trace_lane_name(lane, ids, n, name, sizeof(name));
        trace_meta(w, "thread_name", rank, lane, "name", name, 0);
        trace_meta(w, "thread_sort_index", rank, lane, "sort_index", NULL, lane);
    }
    /* extra lanes sort right after their parent lane */
    for (int i = 0, at = 0; i < lo->num_extra; i++) {
        const trace_extra_t *x = &lo->extra[i];
        if (x->rank != rank) {
            continue;
        }
        size_t len;
        trace_lane_name(x->parent, ids, n, name, sizeof(name));
        len = strlen(name);
        snprintf(name + len, sizeof(name) - len, " #%d", x->k + 1);
        trace_meta(w, "thread_name", rank, TRACE_LANE_EXTRA + at, "name", name, 0);
        trace_meta(w, "thread_sort_index", rank, TRACE_LANE_EXTRA + at, "sort_index", NULL,
                   x->parent);
        at++;
    }
}

static moe_status_t trace_metadata(trace_w_t *w, const moe_report_t *r, const trace_layout_t *lo)
{
    int32_t *ids = malloc(sizeof(int32_t) * MOE_MAX_EXPERTS);
    if (ids == NULL) {
        return MOE_ERR_NO_MEMORY;
    }
    for (int k = 0; k < r->world_size; k++) {
        /* rank 0 always: the tokens counters live on its process */
        if (r->ranks[k].present || k == 0) {
            trace_rank_meta(w, r, lo, k, ids);
        }
    }
    free(ids);
    return MOE_OK;
}

/* ---- lane layout: spans of one lane nest ----------------------------------------- */

typedef struct trace_key {
    int64_t ts, end, idx;
    int32_t rank, lane;
} trace_key_t;

/* The open spans of one lane, innermost last; their ends never increase upwards. */
typedef struct trace_stack {
    int64_t *end;
    int depth, cap;
    int32_t lane; /* its lane in the tid */
} trace_stack_t;

static int trace_cmp_key(const void *a, const void *b)
{
    const trace_key_t *x = a, *y = b;
    if (x->rank != y->rank || x->lane != y->lane) {
        return x->rank != y->rank ? (x->rank > y->rank) - (x->rank < y->rank)
                                  : (x->lane > y->lane) - (x->lane < y->lane);
    }
    if (x->ts != y->ts) {
        return x->ts < y->ts ? -1 : 1;
    }
    if (x->end != y->end) {
        return x->end > y->end ? -1 : 1; /* the longer first: it holds the shorter */
    }
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* True when [ts, end) nests in the lane: after closing the spans that ended by ts (spans
 * come in start order, so no later one can overlap those), none open or it fits inside the
 * innermost. */
static bool trace_stack_fits(trace_stack_t *s, int64_t ts, int64_t end)
{
    while (s->depth > 0 && s->end[s->depth - 1] <= ts) {
        s->depth--;
    }
    return s->depth == 0 || s->end[s->depth - 1] >= end;
}

static bool trace_stack_push(trace_stack_t *s, int64_t end)
{
    if (s->depth == s->cap) {
        int cap = s->cap ? 2 * s->cap : 8;
        int64_t *p = realloc(s->end, sizeof(int64_t) * (size_t)cap);
        if (p == NULL) {
            return false;
        }
        s->end = p;
        s->cap = cap;
    }
    s->end[s->depth++] = end;
    return true;
}

/* A new lane for the k-th (k >= 1) overflow of `parent` on a rank; -1 when the rank has
 * no tid left or memory ran out. */
static int32_t trace_extra_lane(trace_layout_t *lo, int rank, int parent, int k)
{
    if (lo->extra_of_rank[rank] >= TRACE_EXTRA_MAX) {
        return -1;
    }
    if (lo->num_extra == lo->cap_extra) {
        int cap = lo->cap_extra ? 2 * lo->cap_extra : 16;
        trace_extra_t *p = realloc(lo->extra, sizeof(*p) * (size_t)cap);
        if (p == NULL) {
            return -1;
        }
        lo->extra = p;
        lo->cap_extra = cap;
    }
    lo->extra[lo->num_extra++] = (trace_extra_t){rank, parent, k};
    return TRACE_LANE_EXTRA + lo->extra_of_rank[rank]++;
}

/* Lays out the spans keys[from, to) of one (rank, lane), in start order: each on the first
 * of that lane's lanes where it nests, a new one when none fits. */
static moe_status_t trace_layout_group(trace_layout_t *lo, const trace_key_t *keys, size_t from,
                                       size_t to)
{
    trace_stack_t *subs = NULL;
    int n = 0;
    moe_status_t st = MOE_OK;
    for (size_t i = from; i < to && st == MOE_OK; i++) {
        const trace_key_t *k = &keys[i];
        int s = 0;
        while (s < n && !trace_stack_fits(&subs[s], k->ts, k->end)) {
            s++;
        }
        if (s == n) {
            int32_t lane = n == 0 ? k->lane : trace_extra_lane(lo, k->rank, k->lane, n);
            trace_stack_t *p = lane >= 0 ? realloc(subs, sizeof(*subs) * (size_t)(n + 1)) : NULL;
            if (p == NULL) {
                lo->lane[k->idx] = -1; /* not written: counted by the writer */
                lo->unplaced++;
                continue;
            }
            subs = p;
            subs[n++] = (trace_stack_t){NULL, 0, 0, lane};
        }
        st = trace_stack_push(&subs[s], k->end) ? MOE_OK : MOE_ERR_NO_MEMORY;
        lo->lane[k->idx] = subs[s].lane;
    }
    for (int s = 0; s < n; s++) {
        free(subs[s].end);
    }
    free(subs);
    return st;
}

static void trace_layout_free(trace_layout_t *lo)
{
    free(lo->lane);
    free(lo->extra);
    free(lo->extra_of_rank);
    memset(lo, 0, sizeof(*lo));
}

/* Fills lo for every span of r (lo zeroed by the caller; freed on failure too). */
static moe_status_t trace_layout(const moe_report_t *r, trace_layout_t *lo)
{
    size_t n = r->events != NULL && r->num_events > 0 ? (size_t)r->num_events : 0;
    trace_key_t *keys = malloc(sizeof(*keys) * (n > 0 ? n : 1));
    lo->lane = malloc(sizeof(int32_t) * (n > 0 ? n : 1));
    lo->extra_of_rank = calloc((size_t)r->world_size, sizeof(int));
    moe_status_t st = keys && lo->lane && lo->extra_of_rank ? MOE_OK : MOE_ERR_NO_MEMORY;
    size_t m = 0;
    for (size_t i = 0; st == MOE_OK && i < n; i++) {
        const moe_rep_event_t *e = &r->events[i];
        lo->lane[i] = -1;
        if (e->rank >= 0 && e->rank < r->world_size) { /* others are not written */
            keys[m++] = (trace_key_t){e->ts_ns, e->ts_ns + (e->dur_ns > 0 ? e->dur_ns : 0),
                                      (int64_t)i, e->rank, e->lane < 0 ? 0 : e->lane};
        }
    }
    if (st == MOE_OK) {
        qsort(keys, m, sizeof(*keys), trace_cmp_key);
    }
    for (size_t from = 0; st == MOE_OK && from < m;) {
        size_t to = from + 1;
        while (to < m && keys[to].rank == keys[from].rank && keys[to].lane == keys[from].lane) {
            to++;
        }
        st = trace_layout_group(lo, keys, from, to);
        from = to;
    }
    free(keys);
    if (st != MOE_OK) {
        trace_layout_free(lo);
    }
    return st;
}

/* ---- spans ----------------------------------------------------------------------- */

static void trace_event_name(const moe_rep_event_t *e, char *buf, size_t n)
{
    if (e->kind == MOE_TEV_STEP) {
        snprintf(buf, n, "step %" PRId64, e->step);
    } else if (e->kind == MOE_TEV_EXPERT) {
        snprintf(buf, n, "expert %d L%d", (int)e->id, (int)e->layer);
    } else if (e->kind == MOE_TEV_REBALANCE) {
        snprintf(buf, n, "rebalance (%d experts moved)", (int)e->id);
    } else if (e->kind == MOE_TEV_EXCHANGE) {
        snprintf(buf, n, "%s c%" PRId64 " L%d",
                 e->id == 0 ? "dispatch" : e->id == 1 ? "combine" : "exchange", e->arg,
                 (int)e->layer);
    } else {
        const char *p =
            e->id >= 0 && e->id < MOE_PHASE_COUNT ? moe_phase_name(e->id) : "phase";
        snprintf(buf, n, "%s L%d", p, (int)e->layer);
    }
}

/* The report's row of the rebalance before `step` (its critical path), or NULL. */
static const moe_rep_rebalance_t *trace_rebalance(const moe_report_t *r, int64_t step)
{
    for (int i = 0; r->rebalances != NULL && i < r->num_rebalances; i++) {
        if (r->rebalances[i].step == step) {
            return &r->rebalances[i];
        }
    }
    return NULL;
}

static void trace_span(trace_w_t *w, const moe_report_t *r, const moe_rep_event_t *e,
                       int32_t lane)
{
    static const char *const cats[5] = {"phase", "expert", "step", "exchange", "rebalance"};
    char name[64];
    trace_event_name(e, name, sizeof(name));
    trace_begin(w);
    fprintf(w->f,
            "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%" PRId64 ",\"ts\":",
            name, e->kind >= 0 && e->kind <= 4 ? cats[e->kind] : "other", trace_pid(e->rank),
            trace_tid(e->rank, lane));
    trace_us(w->f, e->ts_ns + w->shift_ns);
    fputs(",\"dur\":", w->f);
    trace_us(w->f, e->dur_ns > 0 ? e->dur_ns : 0);
    fprintf(w->f, ",\"args\":{\"step\":%" PRId64, e->step);
    if (e->kind == MOE_TEV_REBALANCE) {
        /* the span is this rank's; the rebalance's cost is the slowest rank's */
        const moe_rep_rebalance_t *x = trace_rebalance(r, e->step);
        fprintf(w->f, ",\"experts_moved\":%d,\"bytes\":%" PRId64, (int)e->id, e->arg);
        if (x != NULL) {
            fprintf(w->f, ",\"critical_path_ms\":%.3f,\"slowest_rank\":%d", x->seconds * 1e3,
                    x->slowest_rank);
        }
    } else if (e->kind != MOE_TEV_STEP) {
        fprintf(w->f, ",\"layer\":%d", (int)e->layer);
    }
    if (e->kind == MOE_TEV_EXPERT) {
        fprintf(w->f, ",\"rows\":%" PRId64, e->arg);
    } else if (e->kind == MOE_TEV_EXCHANGE) {
        fprintf(w->f, ",\"chunk\":%" PRId64, e->arg);
    }
    fputs("}}", w->f);
}

static void trace_spans(trace_w_t *w, const moe_report_t *r, const trace_layout_t *lo)
{
    for (int64_t i = 0; r->events != NULL && i < r->num_events; i++) {
        const moe_rep_event_t *e = &r->events[i];
        if (e->rank < 0 || e->rank >= r->world_size) {
            continue; /* not a rank of this world: nothing to attach it to */
        }
        if (lo->lane[i] < 0) {
            w->skipped++; /* no lane left where it nests */
        } else if (trace_take(w)) {
            trace_span(w, r, e, lo->lane[i]);
        }
    }
}

/* ---- counters -------------------------------------------------------------------- */

static void trace_memory(trace_w_t *w, const moe_report_t *r)
{
    for (int k = 0; k < r->world_size; k++) {
        const moe_rep_rank_t *rk = &r->ranks[k];
        for (int i = 0; rk->present && rk->mem != NULL && i < rk->num_mem; i++) {
            if (!trace_take(w)) {
                continue;
            }
            trace_begin(w);
            fprintf(w->f,
                    "{\"name\":\"memory (MiB)\",\"ph\":\"C\",\"pid\":%d,\"ts\":", trace_pid(k));
            trace_us(w->f, rk->mem[i].t_ns + w->shift_ns);
            fputs(",\"args\":{\"rss\":", w->f);
            moe_json_put_number(w->f, (double)rk->mem[i].rss_bytes / TRACE_MIB);
            if (rk->dev_peak > 0) {
                fputs(",\"device\":", w->f);
                moe_json_put_number(w->f, (double)rk->mem[i].dev_bytes / TRACE_MIB);
            }
            fputs("}}", w->f);
        }
    }
}

static int trace_cmp_metric(const void *a, const void *b)
{
    const moe_rep_metric_t *x = *(const moe_rep_metric_t *const *)a;
    const moe_rep_metric_t *y = *(const moe_rep_metric_t *const *)b;
    if (x->step != y->step) {
        return x->step < y->step ? -1 : 1;
    }
    if (x->layer != y->layer) {
        return x->layer < y->layer ? -1 : 1;
    }
    return (x->expert > y->expert) - (x->expert < y->expert);
}

/* Begin of a step: the earliest begin any rank recorded for it; false if none did. */
static bool trace_step_begin(const moe_report_t *r, int64_t step, int64_t *ts)
{
    bool found = false;
    for (int64_t i = 0; r->steps != NULL && i < r->num_steps; i++) {
        if (r->steps[i].step == step && (!found || r->steps[i].begin_ns < *ts)) {
            *ts = r->steps[i].begin_ns;
            found = true;
        }
    }
    return found;
}

/* One "tokens L<l>" counter event from the sorted metrics [from, to). */
static void trace_tokens_event(trace_w_t *w, const moe_rep_metric_t *const *m, size_t from,
                               size_t to, int64_t ts)
{
    trace_begin(w);
    fprintf(w->f, "{\"name\":\"tokens L%d\",\"ph\":\"C\",\"pid\":%d,\"ts\":", m[from]->layer,
            trace_pid(0));
    trace_us(w->f, ts + w->shift_ns);
    fputs(",\"args\":{", w->f);
    const char *sep = "";
    for (size_t i = from; i < to;) {
        /* one key per expert; several rows of one expert in a step are summed */
        int expert = m[i]->expert;
        int64_t tokens = 0;
        for (; i < to && m[i]->expert == expert; i++) {
            tokens += m[i]->tokens;
        }
        fprintf(w->f, "%s\"e%d\":%" PRId64, sep, expert, tokens);
        sep = ",";
    }
    fputs("}}", w->f);
}

static moe_status_t trace_tokens(trace_w_t *w, const moe_report_t *r)
{
    size_t n = r->metrics != NULL && r->num_metrics > 0 ? (size_t)r->num_metrics : 0;
    if (n == 0) {
        return MOE_OK;
    }
    const moe_rep_metric_t **m = malloc(sizeof(*m) * n);
    if (m == NULL) {
        return MOE_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < n; i++) {
        m[i] = &r->metrics[i];
    }
    qsort(m, n, sizeof(*m), trace_cmp_metric);
    for (size_t from = 0; from < n;) {
        size_t to = from + 1;
        while (to < n && m[to]->step == m[from]->step && m[to]->layer == m[from]->layer) {
            to++;
        }
        int64_t ts = 0;
        if (!trace_step_begin(r, m[from]->step, &ts)) {
            w->skipped++; /* no recorded begin to place it at */
        } else if (trace_take(w)) {
            trace_tokens_event(w, m, from, to, ts);
        }
        from = to;
    }
    free(m);
    return MOE_OK;
}

/* ---- the document ---------------------------------------------------------------- */

/* The shift that makes the earliest timestamp 0 when some are before t0 (samples taken
 * before the first step): viewers handle negative times poorly. */
static int64_t trace_shift(const moe_report_t *r)
{
    int64_t lo = 0;
    for (int64_t i = 0; r->events != NULL && i < r->num_events; i++) {
        lo = r->events[i].ts_ns < lo ? r->events[i].ts_ns : lo;
    }
    for (int64_t i = 0; r->steps != NULL && i < r->num_steps; i++) {
        lo = r->steps[i].begin_ns < lo ? r->steps[i].begin_ns : lo;
    }
    for (int k = 0; k < r->world_size; k++) {
        for (int i = 0; r->ranks[k].mem != NULL && i < r->ranks[k].num_mem; i++) {
            lo = r->ranks[k].mem[i].t_ns < lo ? r->ranks[k].mem[i].t_ns : lo;
        }
    }
    return -lo;
}

static void trace_other(trace_w_t *w, const moe_report_t *r, int64_t max_events, int extra)
{
    FILE *f = w->f;
    fputs("\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": {\n  \"moed_version\": ", f);
    moe_json_put_string(f, r->version);
    fputs(",\n  \"build_id\": ", f);
    moe_json_put_string(f, r->build_id);
    fputs(",\n  \"started_at\": ", f);
    moe_json_put_string(f, r->started_at);
    fputs(",\n  \"run_dir\": ", f);
    moe_json_put_string(f, r->run_dir);
    fprintf(f,
            ",\n  \"world_size\": %d,\n  \"pid\": \"rank + 1\",\n  \"tid\": \"pid * %d + lane "
            "(0 steps, 1 phases, 2 exchange, 3 + local expert index, %d + n the rank's n-th extra "
            "lane: spans that overlap their lane's, so that every lane's spans nest)\",\n"
            "  \"extra_lanes\": %d,\n",
            r->world_size, TRACE_TID_STRIDE, TRACE_LANE_EXTRA, extra);
    fprintf(f, "  \"ts_shift_us\": ");
    trace_us(f, w->shift_ns);
    fputs(",\n  \"clock_skew_ns\": ", f);
    moe_json_put_number(f, r->clock_skew_max_ns);
    fputs(",\n  \"clock_uncertainty_ns\": ", f);
    moe_json_put_number(f, r->clock_uncertainty_max_ns);
    fputs(",\n  \"clock_drift_ns\": ", f);
    moe_json_put_number(f, r->clock_drift_max_ns);
    fprintf(f,
            ",\n  \"max_events\": %" PRId64 ",\n  \"events_written\": %" PRId64
            ",\n  \"dropped_events\": %" PRId64 ",\n  \"dropped_by_recorder\": %" PRId64
            ",\n  \"dropped_by_writer\": %" PRId64 ",\n  \"partial\": %s,\n  \"missing\": ",
            max_events, w->written, r->events_dropped + w->skipped, r->events_dropped, w->skipped,
            r->partial ? "true" : "false");
    moe_json_put_string(f, r->partial ? r->missing : "");
    fputs("\n}\n}\n", f);
}

static moe_status_t trace_document(FILE *f, const moe_report_t *r)
{
    int64_t max_events = r->cfg->prof_trace_max_events > 0 ? r->cfg->prof_trace_max_events : 0;
    trace_w_t w = {f, true, max_events, 0, 0, trace_shift(r)};
    trace_layout_t lo;
    memset(&lo, 0, sizeof(lo));
    moe_status_t st = trace_layout(r, &lo);
    if (st != MOE_OK) {
        return st;
    }
    fputs("{\"traceEvents\": [", f);
    st = trace_metadata(&w, r, &lo);
    trace_spans(&w, r, &lo);
    trace_memory(&w, r);
    if (st == MOE_OK) {
        st = trace_tokens(&w, r);
    }
    trace_other(&w, r, max_events, lo.num_extra);
    trace_layout_free(&lo);
    return st;
}

moe_status_t moe_report_write_trace(const moe_report_t *r, moe_error_t *err)
{
    if (r == NULL || r->cfg == NULL || r->ranks == NULL) {
        return moe_error_set(err, MOE_ERR_INVALID_ARG, "trace.json: no report");
    }
    FILE *f = moe_report_open(r, "trace.json", err);
    if (f == NULL) {
        return MOE_ERR_IO;
    }
    moe_status_t st = trace_document(f, r);
    moe_status_t cst = moe_report_close(f, r, "trace.json", err);
    if (st != MOE_OK) {
        return moe_error_set(err, st, "%s/trace.json: out of memory writing it", r->run_dir);
    }
    return cst;
}
