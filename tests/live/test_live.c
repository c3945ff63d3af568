/* The live path's pure parts: the Prometheus text at scale (256 experts x 16 layers on 32
 * ranks: at most 2 MB, rendered well within 1 s), the series each histogram mode gives, the
 * buckets and the constant-time token check. `test_live --dump FILE` also writes the
 * large text for tests/live/scale.sh to parse with prometheus_client. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "live/live_int.h"
#include "moe/clock.h"
#include "test_util.h"

/* A view as rank 0 would hold it after every rank has reported (symmetric routing). */
static live_view_t *fake_view(int L, int E, int W, bool per_expert)
{
    live_dims_t d = {.L = L, .E = E, .W = W, .per_expert = per_expert, .row_bytes = 4096,
                     .tokens_per_step = 2048};
    d.local_ids = calloc((size_t)W * (size_t)E, sizeof(int32_t));
    for (int e = 0; e < E; e++) {
        int r = e / (E / W);
        d.owner[e] = r;
        d.local_ids[(size_t)r * E + d.nlocal[r]++] = e;
    }
    live_view_t *v = calloc(1, sizeof(*v));
    CHECK(live_view_init(v, &d) == 0);
    for (int r = 0; r < W; r++) {
        moe_live_layout_t lay;
        live_layout_of(&d, r, true, &lay);
        int64_t *m = v->snap[r];
        for (size_t i = 0; i < lay.total; i++) {
            m[i] = 1000000 + (int64_t)(i % 977) * 13;
        }
        m[MOE_LIVE_HDR_MAGIC] = MOE_LIVE_MAGIC ^ MOE_LIVE_VERSION;
        m[MOE_LIVE_HDR_RANK] = r;
        m[MOE_LIVE_HDR_ROUTES] = 1;
        m[MOE_LIVE_HDR_STEP] = 123456;
        v->snap_len[r] = lay.total;
        v->recv_ns[r] = moe_now_ns();
    }
    v->step = 123456;
    return v; /* v->dims.local_ids is the caller's to free */
}

static size_t count_lines(const char *s, const char *prefix)
{
    size_t n = 0, k = strlen(prefix);
    for (const char *p = s; p != NULL && *p != '\0'; p = strchr(p, '\n'), p = p ? p + 1 : p) {
        n += strncmp(p, prefix, k) == 0;
    }
    return n;
}

static void test_scale(const char *dump)
{
    live_view_t *v = fake_view(16, 256, 32, false);
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
    free(st);
    free(data);
    free(v->dims.local_ids);
    live_view_free(v);
    free(v);
}

static void test_per_expert(void)
{
    live_dims_t d = {.L = 2, .E = 8, .W = 3, .per_expert = true};
    int32_t ids[3 * 8] = {0};
    d.local_ids = ids;
    for (int e = 0; e < 8; e++) { /* ranks 1, 2 host 4 each; rank 0 none */
        int r = 1 + e / 4;
        d.owner[e] = r;
        ids[r * 8 + d.nlocal[r]++] = e;
    }
    live_view_t v;
    CHECK(live_view_init(&v, &d) == 0);
    for (int r = 0; r < 3; r++) {
        moe_live_layout_t lay;
        live_layout_of(&d, r, r == 0, &lay);
        CHECK_INT_EQ(lay.groups, 2 * d.nlocal[r]);
        v.snap[r][MOE_LIVE_HDR_ROUTES] = r == 0;
        v.snap[r][MOE_LIVE_HDR_RANK] = r;
        v.snap_len[r] = lay.total;
        if (r == 0) {
            v.snap[0][lay.routed + 8 + 5] = 42; /* layer 1 expert 5 */
        }
    }
    live_buf_t b = {0};
    live_render_metrics(&v, &b);
    CHECK_STR_CONTAINS(b.p, "moed_expert_tokens_total{layer=\"1\",expert=\"5\",rank=\"2\"} 42\n");
    CHECK_STR_CONTAINS(b.p, "moed_expert_seconds_count{layer=\"1\",expert=\"6\",rank=\"2\"} 0\n");
    CHECK_INT_EQ(count_lines(b.p, "moed_expert_seconds_count{"), 2 * 8);
    CHECK_STR_CONTAINS(b.p, "# TYPE moed_layer_imbalance gauge\n");
    CHECK_STR_CONTAINS(b.p, "moed_layer_imbalance{layer=\"1\"} 8.000000\n");
    live_buf_free(&b);
    /* the imbalance is over the last ~10 s: a snapshot 11 s old is its baseline, so only
     * what came since counts (layer 1: 42 on expert 5 then, 8 more on each expert since) */
    live_view_sample_routed(&v, moe_now_ns() - 11000000000LL);
    moe_live_layout_t lay0;
    live_layout_of(&d, 0, true, &lay0);
    for (int e = 0; e < 8; e++) {
        v.snap[0][lay0.routed + 8 + e] += 8;
    }
    live_view_sample_routed(&v, moe_now_ns() - 5000000000LL); /* too recent: not the base */
    live_render_metrics(&v, &b);
    CHECK_STR_CONTAINS(b.p, "moed_layer_imbalance{layer=\"1\"} 1.000000\n");
    live_buf_free(&b);
    live_view_free(&v);
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

int main(int argc, char **argv)
{
    const char *dump = argc == 3 && strcmp(argv[1], "--dump") == 0 ? argv[2] : NULL;
    test_buckets_and_token();
    test_per_expert();
    test_scale(dump);
    return moe_test_finish("test_live");
}
