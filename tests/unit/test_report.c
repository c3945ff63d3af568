/* Unit tests for the report writers and the findings (`moed compare` and the JSON reader:
 * test_compare.c; rank 0's merge: test_merge.c).
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
#include "report_fixture.h"
#include "report_util.h"
#include "test_util.h"

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

/* r's summary.json, read back (the caller frees it); NULL, said, where it cannot be. */
static json_t *summary_doc(const moe_report_t *r)
{
    char path[MOE_PATH_MAX + 32];
    json_t *doc = NULL;
    moe_error_t err;
    snprintf(path, sizeof(path), "%s/summary.json", r->run_dir);
    CHECK_INT_EQ(moe_json_load_file(path, &doc, &err), MOE_OK);
    if (doc == NULL) {
        fprintf(stderr, "  %s\n", err.msg);
    }
    return doc;
}

static void test_summary_json(const fixture_t *fx)
{
    const moe_report_t *r = &fx->rep;
    json_t *doc = summary_doc(r);
    if (doc == NULL) {
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
    /* the fixture's exchange buffers: 2048 rows x 2 x 1024 hidden x 4 B = 16 MiB a rank */
    CHECK_NEAR(moe_json_num(moe_json_path(doc, "memory.1.exchange_buffers_mib"), -1), 16.0, 1e-9);
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
    /* layer 1 drops nothing: its dropped cells have no mean to compare with (not 0/0) */
    char cell[512];
    snprintf(cell, sizeof(cell), "dropped 0; dropped: none in the layer, no mean to compare "
                                 "with</title>");
    CHECK_INT_EQ(count_substr(h, cell), fx->rep.num_experts);
    /* layer 0 drops 40 (its expert 3): a mean of 5, its other experts 0.00x of it */
    CHECK_INT_EQ(count_substr(h, "dropped 0; dropped 0.00x the layer mean</title>"),
                 fx->rep.num_experts - 1);
    CHECK_STR_CONTAINS(h, "dropped 40; dropped 8.00x the layer mean</title>");
    free(h);
}

static void test_summary_txt(const fixture_t *fx)
{
    char *t = slurp(fx->rep.run_dir, "summary.txt", NULL);
    CHECK_STR_CONTAINS(t, "Hottest expert: layer 0 expert 3");
    CHECK_STR_CONTAINS(t, "Slowest expert: layer 1 expert 5");
    /* the straggler (rank 2) is the missing rank of the partial variant */
    CHECK_STR_CONTAINS(t, fx->rep.partial ? "Straggler: no straggler (1 rank with experts has recorded "
                                            "steps: nothing to compare)."
                                          : "Straggler rank: rank 2");
    CHECK_STR_CONTAINS(t, "Exchange:");
    CHECK_STR_CONTAINS(t, "tokens/s");
    CHECK_STR_CONTAINS(t, "p99 ms");
    CHECK_STR_CONTAINS(t, "from\\to");
    if (fx->rep.partial) { /* rank 2's records missing: the figures say whose they are */
        CHECK_STR_CONTAINS(t, "*** PARTIAL: missing rank 2");
        CHECK_STR_CONTAINS(t, "*** Figures below cover only the ranks whose records reached "
                              "rank 0. ***");
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
    /* 10 recorded calls: the nearest-rank p99 is the largest, the last step's (its jitter
     * 1.49 against at most 1.12 before), which the fixture's formula gives exactly */
    int64_t slow_t = fx_tokens(SLOW_LAYER, SLOW_EXPERT, fx->rep.num_experts);
    double slow_max = (double)fx_call_ns(SLOW_LAYER, SLOW_EXPERT, slow_t, REC_STEPS - 1, false);
    CHECK_NEAR(f.slow_p99_ns, slow_max, 0.5);
    char said[96];
    snprintf(said, sizeof(said), "its p99 call took %.3f ms.", slow_max / 1e6);
    char *t = slurp(fx->rep.run_dir, "summary.txt", NULL);
    CHECK_STR_CONTAINS(t, said);
    free(t);
    t = slurp(fx->rep.run_dir, "summary_rank_1.txt", NULL); /* 16 MiB: summary_json's */
    CHECK_STR_CONTAINS(t, ", exchange buffers 16.0 MiB\n");
    free(t);
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

/* The straggler compares the ranks' expert time, not their compute: a routing rank that
 * hosts experts also runs the gate and the merge, which no placement moves. 3 ranks with 4
 * experts each, 10 recorded steps; rank 0 routes (gate 3 ms, merge 1 ms a step). */
static void test_find_straggler_router(void)
{
    static const struct {
        double expert_ms[3];
        int want_rank;
        double want_ratio;
    } cases[] = {
        {{5.0, 5.0, 5.0}, -1, 1.0},         /* compute 9 / 5 / 5 ms: was "rank 0, 1.42x" */
        {{5.0, 7.5, 5.0}, 1, 7.5 / (17.5 / 3)}, /* a slow expert rank is still named */
        {{6.0, 5.0, 5.0}, 0, 6.0 / (16.0 / 3)}, /* and so is the router, by its experts */
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        moe_rep_rank_t ranks[3];
        memset(ranks, 0, sizeof(ranks));
        for (int k = 0; k < 3; k++) {
            moe_rep_rank_t *rk = &ranks[k];
            double gate = k == 0 ? 3e6 : 0, merge = k == 0 ? 1e6 : 0;
            double expert = cases[c].expert_ms[k] * 1e6;
            rk->rank = k;
            rk->present = rk->profiled = true;
            rk->routes = k == 0;
            rk->num_local = 4;
            rk->steps = 10;
            rk->phase[MOE_PHASE_GATE] = (moe_rep_stat_t){gate * 10, gate, gate, 10};
            rk->phase[MOE_PHASE_EXPERT] = (moe_rep_stat_t){expert * 10, expert, expert, 10};
            rk->phase[MOE_PHASE_MERGE] = (moe_rep_stat_t){merge * 10, merge, merge, 10};
            rk->compute_ns = (gate + expert + merge) * 10;
            CHECK_NEAR(moe_report_expert_per_step_ns(rk), expert, 1e-6);
        }
        moe_report_t r;
        memset(&r, 0, sizeof(r));
        r.world_size = 3;
        r.ranks = ranks;
        moe_report_findings_t f;
        moe_report_find(&r, &f);
        CHECK_INT_EQ(f.straggler_rank, cases[c].want_rank);
        CHECK_INT_EQ(f.straggler_n, 3);
        CHECK_NEAR(f.straggler_ratio, cases[c].want_ratio, 1e-9);
        char *t = NULL;
        size_t len = 0;
        FILE *out = open_memstream(&t, &len);
        CHECK(out != NULL);
        if (out != NULL) {
            moe_report_print_straggler(&f, out);
            fclose(out);
            CHECK_STR_CONTAINS(t, cases[c].want_rank < 0 ? "no straggler (ranks with experts "
                                                           "within 1.00x of their mean expert "
                                                           "time; named from 1.10x)"
                                                         : "x the mean expert time of the ranks "
                                                           "with experts (named from 1.10x)");
            free(t);
        }
    }
    moe_rep_rank_t none; /* no recorded step: 0, not a division by 0 */
    memset(&none, 0, sizeof(none));
    CHECK_NEAR(moe_report_expert_per_step_ns(&none), 0.0, 0.0);
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
    json_t *doc = summary_doc(r);
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

/* 256 and 512 experts (2 layers: up to MOE_REPORT_HEATMAP_MAX_CELLS cells, so the heat maps
 * are drawn): every expert of every chart lies inside the drawing width (1200 px: the charts
 * wrap experts into rows), so each can be seen and hovered. */
static void test_html_wide(const char *root)
{
    static const int widths[2] = {256, 512};
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

/* The scale, 256 experts x 16 layers on 32 ranks: report.html stays <= 5 MB and
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
    /* 4096 cells: the hottest pairs and a strip per layer instead of the heat maps
     * (test_report_routing checks their figures) */
    CHECK(h != NULL && strstr(h, "<svg id=\"chart-demand\"") == NULL);
    CHECK(h != NULL && strstr(h, "<table id=\"hot-top\">") != NULL);
    CHECK(h != NULL && strstr(h, "<table id=\"hot-layers\">") != NULL);
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
    CHECK_STR_CONTAINS(t, "Straggler: no straggler (0 ranks with experts have recorded steps: "
                          "nothing to compare).");
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

/* The routing rank not profiled: a layer's demand and dropped unknown ("-" in report.html's
 * balance table and summary.txt, "unknown" in the heatmap's tooltip), and with a host
 * missing too its kept and balance. The expert ranks not profiled: the routing rank's
 * exchange share holds its designed wait, so the headline does not call it moving bytes. */
static void test_unknown_counts(fixture_t *fx)
{
    moe_report_t *r = &fx->rep;
    moe_error_t err;
    moe_rep_layer_t *y = &r->layers[1];
    moe_rep_layer_t saved = *y;
    y->demand_unknown = y->kept_unknown = true;
    y->gini = y->cv = y->entropy_norm = y->max_mean = NAN;
    CHECK_INT_EQ(moe_report_write_html(r, &err), MOE_OK);
    CHECK_INT_EQ(moe_report_write_summary(r, &err), MOE_OK);
    char *h = slurp(r->run_dir, "report.html", NULL);
    CHECK_STR_CONTAINS(h, "<tr><td class=\"num\">1</td><td class=\"num\">-</td><td "
                          "class=\"num\">-</td><td class=\"num\">-</td><td class=\"num\">-"
                          "</td><td class=\"num\">-</td><td class=\"num\">-</td><td "
                          "class=\"num\">-</td></tr>");
    CHECK_STR_CONTAINS(h, "layer 1 expert 0 (rank 1, node-a): demand unknown, kept ");
    free(h);
    char *t = slurp(r->run_dir, "summary.txt", NULL);
    CHECK_STR_CONTAINS(t, "      1             -             -           -        -        -"
                          "         -         -\n");
    free(t);
    /* every layer's counts unknown: no hottest expert, but the headline still gives the
     * straggler and the exchange findings (once dropped with the hottest) */
    moe_rep_layer_t saved0 = r->layers[0], saved1 = r->layers[1];
    for (int l = 0; l < 2; l++) { /* as the merge leaves them: no counts */
        moe_rep_layer_t *u = &r->layers[l];
        u->demand_unknown = u->kept_unknown = true;
        u->demand = u->kept = u->dropped = NULL;
        u->gini = u->cv = u->entropy_norm = u->max_mean = NAN;
    }
    t = headline_of(r);
    CHECK(t == NULL || strstr(t, "hottest expert") == NULL);
    CHECK_STR_CONTAINS(t, "\n  straggler: rank 2, ");
    CHECK_STR_CONTAINS(t, "; exchange: ");
    free(t);
    r->layers[0] = saved0;
    r->layers[1] = saved1;
    *y = saved;
    for (int k = 1; k < r->world_size; k++) {
        r->ranks[k].present = r->ranks[k].profiled = false;
    }
    t = headline_of(r);
    CHECK_STR_CONTAINS(t, "% of step time in the exchange (incl. waiting; expert ranks not "
                          "profiled), ");
    CHECK(t == NULL || strstr(t, "moving bytes") == NULL);
    free(t);
    for (int k = 1; k < r->world_size; k++) {
        r->ranks[k].present = r->ranks[k].profiled = true;
    }
    t = headline_of(r);
    CHECK_STR_CONTAINS(t, "% of step time moving bytes, ");
    free(t);
    CHECK_INT_EQ(moe_report_write_all(r, &err), MOE_OK);
}

/* The opening <rect ...> tag of the cell (l, e) of heat map `id` in page h, into out[n]
 * ("" when not found). */
static void map_cell(const char *h, const char *id, int l, int e, char *out, size_t n)
{
    char key[96];
    out[0] = '\0';
    snprintf(key, sizeof(key), "<svg id=\"%s\"", id);
    const char *svg = h != NULL ? strstr(h, key) : NULL;
    const char *end = svg != NULL ? strstr(svg, "</svg>") : NULL;
    snprintf(key, sizeof(key), "<title>layer %d expert %d (", l, e);
    const char *title = svg != NULL ? strstr(svg, key) : NULL;
    if (title == NULL || title > end) {
        return;
    }
    const char *rect = title;
    while (rect > svg && strncmp(rect, "<rect ", 6) != 0) {
        rect--;
    }
    snprintf(out, n, "%.*s", (int)(title - rect), rect);
}

/* Heat map cells whose figure is unknown (demand and dropped where not every routing
 * rank's records came; kept where an expert's tokens are unknown) are drawn apart:
 * hatched grey with "-", not the scale's colour of 0, which read as "no choice". */
static void test_unknown_cells(fixture_t *fx)
{
    moe_report_t *r = &fx->rep;
    moe_error_t err;
    moe_rep_layer_t *y = &r->layers[1];
    moe_rep_layer_t saved = *y;
    uint64_t zeros[8] = {0};
    CHECK(r->num_experts <= 8);
    y->demand_unknown = true;
    y->demand = y->dropped = zeros; /* as the merge leaves them */
    CHECK_INT_EQ(moe_report_write_html(r, &err), MOE_OK);
    char *h = slurp(r->run_dir, "report.html", NULL);
    char cell[512];
    for (int m = 0; m < 2; m++) {
        const char *id = m == 0 ? "chart-demand" : "chart-dropped";
        map_cell(h, id, 1, 0, cell, sizeof(cell));
        CHECK_STR_CONTAINS(cell, "class=\"unknown\"");
        CHECK_STR_CONTAINS(cell, "fill=\"url(#unknown-");
        map_cell(h, id, 0, 0, cell, sizeof(cell)); /* layer 0 is known: the scale's colour */
        CHECK(cell[0] != '\0' && strstr(cell, "unknown") == NULL);
    }
    map_cell(h, "chart-load", 1, 0, cell, sizeof(cell)); /* kept: the hosts' rows, known */
    CHECK(cell[0] != '\0' && strstr(cell, "unknown") == NULL);
    CHECK_STR_CONTAINS(h, "layer 1 expert 0 (rank 1, node-a): demand unknown, kept ");
    CHECK_STR_CONTAINS(h, "; demand unknown</title></rect>\n<text x=");
    CHECK_STR_CONTAINS(h, "class=\"in\">-</text>");
    CHECK_STR_CONTAINS(h, "hatched grey cells with - are unknown (a routing rank");
    free(h);
    /* an expert's tokens unknown (its host and a routing rank missing): its kept cell too */
    moe_rep_expert_t *x = &r->experts[1 * r->num_experts + 2];
    moe_rep_expert_t xs = *x;
    x->tokens_unknown = true;
    x->tokens = 0;
    CHECK_INT_EQ(moe_report_write_html(r, &err), MOE_OK);
    h = slurp(r->run_dir, "report.html", NULL);
    map_cell(h, "chart-load", 1, 2, cell, sizeof(cell));
    CHECK_STR_CONTAINS(cell, "class=\"unknown\"");
    CHECK_STR_CONTAINS(h, "(rank 1, node-a): demand unknown, kept unknown, dropped unknown; "
                          "kept unknown</title>");
    /* layer 1's other kept cells: known, but their layer mean is not */
    CHECK_STR_CONTAINS(h, "; kept against the layer mean: unknown</title>");
    free(h);
    *x = xs;
    *y = saved;
    CHECK_INT_EQ(moe_report_write_all(r, &err), MOE_OK);
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
    /* rank 1 present but its last record lost (killed mid-run): its peaks, read at the end,
     * are unknown (null, "-"), not 0; what its parts carried stays known */
    fx->rep.ranks[1].peak_known = false;
    CHECK(write_into(fx, root, "partial-peak"));
    json_error_t jerr;
    char path[MOE_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/summary.json", fx->rep.run_dir);
    json_t *doc = json_load_file(path, 0, &jerr);
    CHECK(doc != NULL && json_is_null(moe_json_path(doc, "memory.1.rss_peak_mib")));
    CHECK(doc != NULL && json_is_null(moe_json_path(doc, "memory.1.dev_peak_mib")));
    CHECK(doc != NULL && json_is_number(moe_json_path(doc, "memory.1.expert_weights_mib")));
    CHECK(doc != NULL && json_is_number(moe_json_path(doc, "memory.0.rss_peak_mib")));
    json_decref(doc);
    t = slurp(fx->rep.run_dir, "summary_rank_1.txt", NULL);
    CHECK_STR_CONTAINS(t, "  peak RSS - (its last record did not come); expert weights ");
    free(t);
    remove_report(fx->rep.run_dir, fx->rep.world_size);
    fx_free(fx);
}

/* A rank not profiled measured nothing: its figures in summary.json are null (not 0), its
 * waits in comm.csv empty, in summary.json null, in report.html's tooltips "not profiled";
 * a present rank's stay numbers. */
static void unprofiled_rank_2(fixture_t *fx)
{
    fx->rep.ranks[2].profiled = false;
    fx->rep.partial = false;
    fx->rep.missing[0] = '\0';
    fx->cfg.prof_trace = false;
}

static void test_unprofiled(const char *root)
{
    shape_t s = small_shape;
    s.partial = true; /* the fixture's last rank without records */
    fixture_t *fx = fx_written(root, "unprofiled", &s, unprofiled_rank_2);
    if (fx == NULL) {
        return;
    }
    const moe_report_t *r = &fx->rep;
    json_t *doc = summary_doc(r);
    static const char *const unknown[] = {
        "ranks.2.per_step_ms.step", "ranks.2.per_step_ms.compute", "ranks.2.per_step_ms.idle",
        "ranks.2.share_of_step.compute", "ranks.2.share_of_step.exchange",
        "ranks.2.phases_ms.gate.mean", "ranks.2.phases_ms.step.min",
        "ranks.2.phases_ms.step.total", "ranks.2.idle_waiting_for_ms.0",
        "ranks.2.exchange_ms", "ranks.2.clock.offset_ns", "ranks.2.clock.uncertainty_ns",
        "memory.2.rss_peak_mib", "memory.2.rss_min_mib", "memory.2.rss_mean_mib",
        "memory.2.rss_max_mib", "memory.2.expert_weights_mib", "comm.wait_ms.2.0",
        "comm.wait_ms.2.1"};
    for (size_t i = 0; doc != NULL && i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        if (!json_is_null(moe_json_path(doc, unknown[i]))) {
            fprintf(stderr, "  %s: not null\n", unknown[i]);
            CHECK(false);
        }
    }
    static const char *const known[] = {"ranks.0.per_step_ms.step", "ranks.1.share_of_step.compute",
                                        "ranks.1.phases_ms.gate.mean", "ranks.1.clock.offset_ns",
                                        "memory.1.rss_peak_mib", "comm.wait_ms.1.2"};
    for (size_t i = 0; doc != NULL && i < sizeof(known) / sizeof(known[0]); i++) {
        CHECK(json_is_number(moe_json_path(doc, known[i])));
    }
    json_decref(doc);
    char *c = slurp(r->run_dir, "comm.csv", NULL), row[96];
    snprintf(row, sizeof(row), "\n2,0,%" PRIu64 ",%" PRIu64 ",,0\n", r->bytes[6], r->msgs[6]);
    CHECK_STR_CONTAINS(c, row);
    free(c);
    char *h = slurp(r->run_dir, "report.html", NULL);
    CHECK_STR_CONTAINS(h, "rank 2's wait for rank 0: unknown (not profiled)</title>");
    CHECK(h == NULL || strstr(h, "rank 2 waited 0.000 ms") == NULL);
    free(h);
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
        test_find_straggler_router();
        test_headline(fx);
        test_drops(fx);
        test_html_lines(fx);
        test_unknown_counts(fx);
        test_unknown_cells(fx);
        test_all_warmup(fx);
        test_write_errors(fx);
        test_escaping(fx);
        remove_report(fx->rep.run_dir, fx->rep.world_size);
    }
    fx_free(fx);
    test_partial(root);
    test_unprofiled(root);
    test_html_wide(root);
    test_html_scale(root);
    test_text_wide(root);
    rmdir(root);
    return moe_test_finish("test_report");
}
