/* The live path's pure parts: the Prometheus text at scale (256 experts x 16 layers on 32
 * ranks: at most 2 MB, rendered well within 1 s), the series each histogram mode gives, the
 * buckets and the constant-time token check. `test_live --dump FILE` also writes the
 * large text for tests/live/scale.sh to parse with prometheus_client. */
#include <math.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "live/live_int.h"
#include "moe/clock.h"
#include "test_util.h"

/* Rank r's message into the view: keys as given, every counter after the header set to
 * fill (0: zero), the message checked as rank 0 checks what arrives. */
static void put_message(live_view_t *v, int r, bool routes, int64_t nr, const int64_t *rkey,
                        int64_t ng, const int64_t *hkey, int64_t fill)
{
    const live_dims_t *d = &v->dims;
    moe_live_layout_t lay;
    moe_live_layout_of(d->L, d->E, d->W, routes, nr, d->per_expert, ng, &lay);
    int64_t *m = calloc(lay.total, sizeof(int64_t));
    CHECK(m != NULL);
    for (size_t i = MOE_LIVE_HDR; fill != 0 && i < lay.total; i++) {
        m[i] = fill + (int64_t)(i % 977) * 13;
    }
    m[MOE_LIVE_HDR_MAGIC] = MOE_LIVE_MAGIC ^ MOE_LIVE_VERSION;
    m[MOE_LIVE_HDR_RANK] = r;
    m[MOE_LIVE_HDR_ROUTES] = routes;
    m[MOE_LIVE_HDR_RKEYS] = routes ? nr : 0;
    m[MOE_LIVE_HDR_GROUPS] = ng;
    m[MOE_LIVE_HDR_STEP] = 123456;
    for (int64_t i = 0; routes && rkey != NULL && i < nr; i++) {
        m[lay.rkey + (size_t)i] = rkey[i];
    }
    for (int64_t i = 0; d->per_expert && hkey != NULL && i < ng; i++) {
        m[lay.hkey + (size_t)i] = hkey[i];
    }
    moe_live_layout_t got;
    CHECK(live_layout_check(d, m, lay.total, r, &got));
    CHECK_INT_EQ((long long)got.total, (long long)lay.total);
    CHECK(live_view_store(v, r, m, lay.total) == 0);
    v->recv_ns[r] = moe_now_ns();
    free(m);
}

/* A view as rank 0 would hold it after every rank has reported (symmetric routing, each
 * rank hosting E / W experts, one histogram per layer and rank). */
static live_view_t *fake_view(int L, int E, int W)
{
    live_dims_t d = {.L = L, .E = E, .W = W, .per_expert = false, .row_bytes = 4096,
                     .tokens_per_step = 2048};
    live_view_t *v = calloc(1, sizeof(*v));
    CHECK(v != NULL && live_view_init(v, &d) == 0);
    int64_t *rkey = calloc((size_t)L * (size_t)E, sizeof(int64_t));
    CHECK(rkey != NULL);
    for (int64_t le = 0; le < (int64_t)L * E; le++) {
        rkey[le] = le * W + (le % E) / (E / W);
    }
    for (int r = 0; r < W; r++) {
        put_message(v, r, true, (int64_t)L * E, rkey, L, NULL, 1000000);
    }
    free(rkey);
    v->step = 123456;
    return v;
}

static size_t count_lines(const char *s, const char *prefix)
{
    size_t n = 0, k = strlen(prefix);
    for (const char *p = s; p != NULL && *p != '\0'; p = strchr(p, '\n'), p = p ? p + 1 : p) {
        n += strncmp(p, prefix, k) == 0;
    }
    return n;
}

/* The trace replayed, with a quote, a backslash and a newline in its path: escaped. */
#define LIVE_REPLAYED "replayed /data/a \"q\" \\b\nc.safetensors (vLLM routed_experts)"

static void test_scale(const char *dump)
{
    live_view_t *v = fake_view(16, 256, 32);
    v->routing = strdup(LIVE_REPLAYED); /* scale.sh reads it back with prometheus_client */
    live_buf_t b = {0};
    int64_t t0 = moe_now_ns();
    live_render_metrics(v, &b);
    double s = (double)(moe_now_ns() - t0) * 1e-9;
    CHECK(!b.failed);
    printf("scale: 256 experts x 16 layers x 32 ranks: %zu bytes in %.3f s\n", b.len, s);
    CHECK(b.len <= 2u << 20);
    CHECK(s < 0.5);
    CHECK_INT_EQ(count_lines(b.p, "moed_expert_tokens_total{"), 256 * 16);
    CHECK_INT_EQ(count_lines(b.p, "moed_expert_seconds_count{"), 16 * 32);
    CHECK_INT_EQ(count_lines(b.p, "moed_exchange_bytes_total{"), 32 * 31);
    if (dump != NULL) {
        FILE *f = fopen(dump, "w");
        CHECK(f != NULL && fwrite(b.p, 1, b.len, f) == b.len);
        if (f != NULL) {
            fclose(f);
        }
    }
    live_buf_free(&b);
    char *st = live_render_status(v), *data = live_render_data(v);
    CHECK(st != NULL && data != NULL);
    CHECK_STR_CONTAINS(st, "\"world\":32");
    /* the live page's data (/live.json, what the page draws), and the page itself */
    size_t page = strlen(live_page_html), json = data != NULL ? strlen(data) : 0;
    printf("scale: /live.json %zu bytes, the page %zu bytes\n", json, page);
    CHECK(json > 0 && json + page <= 5u << 20);
    free(st);
    free(data);
    live_view_free(v);
    free(v);
}

/* Labels name what ran: layer 0 has expert 5 on rank 2; in layer 1 expert 5 ran on rank 2
 * and then on rank 1 (moved), and expert 6 has copies on ranks 1 and 2. Master rank 0
 * routes; every other expert is on rank 1 (e < 4) or rank 2. */
static void test_per_expert(void)
{
    enum { L = 2, E = 8, W = 3 };
    live_dims_t d = {.L = L, .E = E, .W = W, .per_expert = true};
    live_view_t v;
    CHECK(live_view_init(&v, &d) == 0);
    int64_t rkey[L * E + 2];
    int nr = 0;
    for (int le = 0; le < L * E; le++) {
        rkey[nr++] = (int64_t)le * W + (le % E < 4 ? 1 : 2);
    }
    rkey[nr++] = (int64_t)(1 * E + 5) * W + 1; /* layer 1 expert 5 after the move */
    rkey[nr++] = (int64_t)(1 * E + 6) * W + 1; /* layer 1 expert 6's copy on rank 1 */
    put_message(&v, 0, true, nr, rkey, 0, NULL, 0);
    moe_live_layout_t lay0;
    CHECK(live_layout_check(&d, v.snap[0], v.snap_len[0], 0, &lay0));
    int64_t *rows = v.snap[0] + lay0.rrows;
    rows[0 * E + 5] = 10; /* (0, 5, 2) */
    rows[1 * E + 5] = 7;  /* (1, 5, 2) before the move */
    rows[L * E] = 42;     /* (1, 5, 1) after it */
    rows[1 * E + 6] = 4;  /* (1, 6, 2) */
    rows[L * E + 1] = 3;  /* (1, 6, 1) */
    int64_t h1[] = {1 * E + 0, 1 * E + 5, 1 * E + 6}, h2[] = {0 * E + 5, 1 * E + 5, 1 * E + 6};
    put_message(&v, 1, false, 0, NULL, 3, h1, 0);
    put_message(&v, 2, false, 0, NULL, 3, h2, 0);
    moe_live_layout_t lay1;
    CHECK(live_layout_check(&d, v.snap[1], v.snap_len[1], 1, &lay1));
    v.snap[1][lay1.ehist + 1 * (MOE_LIVE_NB + 1) + 3] = 9; /* (1, 5) on rank 1: 9 calls */
    live_buf_t b = {0};
    live_render_metrics(&v, &b);
    CHECK(!b.failed);
    CHECK_STR_CONTAINS(b.p, "moed_expert_tokens_total{layer=\"0\",expert=\"5\",rank=\"2\"} 10\n");
    CHECK_STR_CONTAINS(b.p, "moed_expert_tokens_total{layer=\"1\",expert=\"5\",rank=\"2\"} 7\n");
    CHECK_STR_CONTAINS(b.p, "moed_expert_tokens_total{layer=\"1\",expert=\"5\",rank=\"1\"} 42\n");
    CHECK_STR_CONTAINS(b.p, "moed_expert_tokens_total{layer=\"1\",expert=\"6\",rank=\"1\"} 3\n");
    CHECK_STR_CONTAINS(b.p, "moed_expert_tokens_total{layer=\"1\",expert=\"6\",rank=\"2\"} 4\n");
    CHECK(strstr(b.p, "moed_expert_tokens_total{layer=\"0\",expert=\"5\",rank=\"1\"}") == NULL);
    CHECK_INT_EQ(count_lines(b.p, "moed_expert_tokens_total{"), L * E + 2);
    CHECK_STR_CONTAINS(b.p, "moed_expert_seconds_count{layer=\"1\",expert=\"5\",rank=\"1\"} 9\n");
    CHECK_STR_CONTAINS(b.p, "moed_expert_seconds_count{layer=\"1\",expert=\"5\",rank=\"2\"} 0\n");
    CHECK_STR_CONTAINS(b.p, "moed_expert_seconds_count{layer=\"0\",expert=\"5\",rank=\"2\"} 0\n");
    CHECK(strstr(b.p, "moed_expert_seconds_count{layer=\"0\",expert=\"5\",rank=\"1\"}") == NULL);
    CHECK_INT_EQ(count_lines(b.p, "moed_expert_seconds_count{"), 6);
    CHECK_STR_CONTAINS(b.p, "# TYPE moed_layer_imbalance gauge\n");
    /* layer 1: expert 5 has 49 of 56 routed rows: 49 * 8 / 56 */
    CHECK_STR_CONTAINS(b.p, "moed_layer_imbalance{layer=\"1\"} 7.000000\n");
    live_buf_free(&b);
    /* the page's data names the ranks each expert's tokens went to (its hover titles): both
     * holders of the moved expert 5 and both copies of expert 6 in layer 1 */
    char *data = live_render_data(&v);
    CHECK(data != NULL);
    CHECK_STR_CONTAINS(data, "\"expert_ranks\":[[[1],[1],[1],[1],[2],[2],[2],[2]],"
                             "[[1],[1],[1],[1],[2],[1,2],[1,2],[2]]]");
    free(data);
    /* the imbalance is over the last ~10 s: a snapshot 11 s old is its baseline, so only
     * what came since counts (8 more rows on each expert of layer 1 since) */
    live_view_sample_routed(&v, moe_now_ns() - 11000000000LL);
    for (int e = 0; e < E; e++) {
        rows[1 * E + e] += 8;
    }
    live_view_sample_routed(&v, moe_now_ns() - 5000000000LL); /* too recent: not the base */
    live_render_metrics(&v, &b);
    CHECK_STR_CONTAINS(b.p, "moed_layer_imbalance{layer=\"1\"} 1.000000\n");
    live_buf_free(&b);
    /* malformed: a key out of range, a length that does not match, a wrong rank */
    int64_t bad[MOE_LIVE_HDR + MOE_LIVE_NB + 1 + W + L * E + 2];
    memset(bad, 0, sizeof(bad));
    bad[MOE_LIVE_HDR_MAGIC] = MOE_LIVE_MAGIC ^ MOE_LIVE_VERSION;
    bad[MOE_LIVE_HDR_RANK] = 0;
    bad[MOE_LIVE_HDR_ROUTES] = 1;
    bad[MOE_LIVE_HDR_RKEYS] = 1;
    size_t n = MOE_LIVE_HDR + MOE_LIVE_NB + 1 + W + L * E + 2;
    moe_live_layout_t lay;
    CHECK(live_layout_check(&d, bad, n, 0, &lay)); /* one key, no groups: well formed */
    bad[n - 2] = (int64_t)L * E * W;               /* the key past the last */
    CHECK(!live_layout_check(&d, bad, n, 0, &lay));
    bad[n - 2] = 0;
    CHECK(!live_layout_check(&d, bad, n - 1, 0, &lay));
    CHECK(!live_layout_check(&d, bad, n, 1, &lay));
    bad[MOE_LIVE_HDR_GROUPS] = L * E + 1;
    CHECK(!live_layout_check(&d, bad, n, 0, &lay));
    live_view_free(&v);
}

/* moed_routing_info: where the expert choices come from (moe_prof_static_t.routing_source,
 * NULL: the router), its label values escaped as the exposition format wants. */
static void test_routing_info(void)
{
    live_view_t *v = fake_view(2, 4, 2);
    live_buf_t b = {0};
    live_render_metrics(v, &b);
    CHECK(!b.failed);
    CHECK_STR_CONTAINS(b.p, "# TYPE moed_routing_info gauge\n");
    CHECK_STR_CONTAINS(b.p, "\nmoed_routing_info{source=\"router\",file=\"\",trace_source=\"\"} 1\n");
    CHECK_INT_EQ(count_lines(b.p, "moed_routing_info{"), 1);
    live_buf_free(&b);
    v->routing = strdup(LIVE_REPLAYED);
    live_render_metrics(v, &b);
    CHECK_STR_CONTAINS(b.p, "\nmoed_routing_info{source=\"replayed\",file=\"/data/a \\\"q\\\" "
                            "\\\\b\\nc.safetensors\",trace_source=\"vLLM routed_experts\"} 1\n");
    CHECK_INT_EQ(count_lines(b.p, "moed_routing_info{"), 1);
    live_buf_free(&b);
    live_view_free(v); /* frees the copy */
    free(v);
}

/* The value of the series line that starts with `prefix` (NAN when there is none). */
static double series_value(const char *text, const char *prefix)
{
    size_t k = strlen(prefix);
    for (const char *p = text; p != NULL && *p != '\0'; p = strchr(p, '\n'), p = p ? p + 1 : p) {
        if (strncmp(p, prefix, k) == 0) {
            return strtod(p + k, NULL);
        }
    }
    return NAN;
}

/* moed_step_latency_seconds and moed_layer_latency_seconds: summaries of rank 0's step and
 * layer times, p50 / p90 / p99 of known samples within 1/32; NaN before the first one. */
static void test_latency_summaries(void)
{
    live_view_t *v = fake_view(3, 4, 2);
    for (int i = 1; i <= 100; i++) {
        moe_hist_add(&v->lat[1], (int64_t)i * 1000000);  /* layer 1: 1 .. 100 ms */
        moe_hist_add(&v->lat[3], i == 100 ? 500000000 : 20000000); /* the step: 20 ms, one 500 */
    }
    moe_hist_add(&v->lat[2], 7000000);
    live_buf_t b = {0};
    live_render_metrics(v, &b);
    CHECK(!b.failed);
    CHECK_STR_CONTAINS(b.p, "# TYPE moed_step_latency_seconds summary\n");
    CHECK_STR_CONTAINS(b.p, "# TYPE moed_layer_latency_seconds summary\n");
    CHECK_INT_EQ(count_lines(b.p, "moed_layer_latency_seconds{"), 3 * 3);
    CHECK_INT_EQ(count_lines(b.p, "moed_step_latency_seconds{"), 3);
    static const char *const q[3] = {"0.5", "0.9", "0.99"};
    static const double want[3] = {0.050, 0.090, 0.099};
    for (int i = 0; i < 3; i++) {
        char prefix[96];
        snprintf(prefix, sizeof(prefix), "moed_layer_latency_seconds{layer=\"1\",quantile=\"%s\"} ",
                 q[i]);
        CHECK_NEAR(series_value(b.p, prefix), want[i], want[i] / 32);
    }
    CHECK_NEAR(series_value(b.p, "moed_step_latency_seconds{quantile=\"0.9\"} "), 0.020, 0.020 / 32);
    CHECK_NEAR(series_value(b.p, "moed_step_latency_seconds{quantile=\"0.99\"} "), 0.020, 0.020 / 32);
    CHECK_NEAR(series_value(b.p, "moed_step_latency_seconds_count "), 100, 0);
    CHECK_NEAR(series_value(b.p, "moed_layer_latency_seconds_sum{layer=\"1\"} "), 5.050, 1e-9);
    CHECK_NEAR(series_value(b.p, "moed_layer_latency_seconds{layer=\"2\",quantile=\"0.5\"} "),
               0.007, 0.007 / 32);
    CHECK_STR_CONTAINS(b.p, "\nmoed_layer_latency_seconds{layer=\"0\",quantile=\"0.99\"} NaN\n");
    CHECK_STR_CONTAINS(b.p, "\nmoed_layer_latency_seconds_count{layer=\"0\"} 0\n");
    live_buf_free(&b);
    live_view_free(v);
    free(v);
}

static void test_buckets_and_token(void)
{
    CHECK_INT_EQ(moe_live_bucket_of_ns(0), 0);
    CHECK_INT_EQ(moe_live_bucket_of_ns(10000), 0);
    CHECK_INT_EQ(moe_live_bucket_of_ns(10001), 1);
    CHECK_INT_EQ(moe_live_bucket_of_ns(1000000), 6);
    CHECK_INT_EQ(moe_live_bucket_of_ns(INT64_MAX), MOE_LIVE_NB - 1);
    CHECK(live_token_equal("secret", 6, "secret"));
    CHECK(!live_token_equal("secreT", 6, "secret"));
    CHECK(!live_token_equal("secret1", 7, "secret"));
    CHECK(!live_token_equal("secre", 5, "secret"));
    CHECK(!live_token_equal("", 0, ""));
    CHECK(!live_token_equal("x", 1, ""));
}

/* Which listen addresses are this host's only: the rest get the warning at start. */
static bool loopback(const char *host)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_flags = AI_NUMERICHOST}, *ai = NULL;
    CHECK(getaddrinfo(host, "0", &hints, &ai) == 0 && ai != NULL);
    bool lo = ai != NULL && live_addr_loopback(ai->ai_addr);
    freeaddrinfo(ai);
    return lo;
}

static void test_listen_exposed(void)
{
    CHECK(loopback("127.0.0.1"));
    CHECK(loopback("127.3.2.1"));
    CHECK(loopback("::1"));
    CHECK(loopback("::ffff:127.0.0.1"));
    CHECK(!loopback("0.0.0.0"));
    CHECK(!loopback("::"));
    CHECK(!loopback("10.1.2.3"));
    CHECK(!loopback("192.168.0.7"));
    CHECK(!loopback("fe80::1"));
}

/* The window folders /status lists: the newest LIVE_MAX_REPORTS (the 65th once left the list
 * at the 64th for ever); a window's error names no path (the output folder's once did). */
static void test_window_results(void)
{
    live_view_t *v = fake_view(2, 4, 2);
    for (int i = 1; i <= LIVE_MAX_REPORTS + 6; i++) {
        char name[32], folder[64];
        snprintf(name, sizeof(name), "window-%d", i);
        snprintf(folder, sizeof(folder), "/srv/out/%s", name);
        live_window_result_locked(v, i, name, folder, true, "");
    }
    CHECK(v->num_reports == LIVE_MAX_REPORTS);
    CHECK(strcmp(v->reports[0], "window-7") == 0);
    CHECK(strcmp(v->reports[LIVE_MAX_REPORTS - 1], "window-70") == 0);
    CHECK(v->reports_written == LIVE_MAX_REPORTS + 6); /* every one written, listed or not */
    char *st = live_render_status(v);
    CHECK(st != NULL && strstr(st, "\"reports_written\":70") != NULL);
    free(st);
    snprintf(v->output_dir, sizeof(v->output_dir), "/srv/deep/out/");
    live_window_result_locked(v, 71, "window-71", "/srv/deep/out//window-71", false,
                              "/srv/deep/out/: cannot create the output folder: Not a directory");
    CHECK(strstr(v->last_error, "/srv") == NULL);
    CHECK(strstr(v->last_error, "window 71: out") == v->last_error);
    live_window_result_locked(v, 72, "window-72", "/srv/deep/out//window-72", false,
                              "/srv/deep/out//window-72/summary.txt: cannot write: No space");
    CHECK(strcmp(v->last_error, "window 72: window-72/summary.txt: cannot write: No space") == 0);
    /* an output folder of 699 bytes (the config takes up to 895) named in the message: the
     * message was cut at 511 bytes before its path was replaced, and the cut path stayed */
    char deep[720], msg[800], folder[760];
    snprintf(deep, sizeof(deep), "/srv/%0690d/out", 0);
    snprintf(v->output_dir, sizeof(v->output_dir), "%s", deep);
    snprintf(msg, sizeof(msg), "%s: cannot create the output folder: Not a directory", deep);
    snprintf(folder, sizeof(folder), "%s/window-73", deep);
    live_window_result_locked(v, 73, "window-73", folder, false, msg);
    CHECK(strstr(v->last_error, "/srv") == NULL);
    CHECK(strcmp(v->last_error, "window 73: out: cannot create the output folder: Not a directory") == 0);
    CHECK(v->num_reports == LIVE_MAX_REPORTS);
    CHECK(v->reports_written == LIVE_MAX_REPORTS + 6); /* a folder not written: not counted */
    live_view_free(v);
    free(v);
}

int main(int argc, char **argv)
{
    const char *dump = argc == 3 && strcmp(argv[1], "--dump") == 0 ? argv[2] : NULL;
    test_buckets_and_token();
    test_latency_summaries();
    test_routing_info();
    test_listen_exposed();
    test_window_results();
    test_per_expert();
    test_scale(dump);
    return moe_test_finish("test_live");
}
