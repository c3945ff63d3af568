/* Profiler pieces with known answers: balance figures, histogram quantiles, the window
 * schedule, and the profile record's round trip and rejection of bad bytes. */
#include <stdlib.h>
#include <string.h>

#include "balance.h"
#include "moe/config.h"
#include "moe/hist.h"
#include "moe/prof.h"
#include "moe/prof_record.h"
#include "test_util.h"

static void test_balance(void)
{
    moe_balance_t b;
    const uint64_t even[4] = {5, 5, 5, 5};
    moe_balance_compute(even, 4, &b);
    CHECK_NEAR(b.gini, 0.0, 1e-12);
    CHECK_NEAR(b.cv, 0.0, 1e-12);
    CHECK_NEAR(b.entropy_norm, 1.0, 1e-12);
    CHECK_NEAR(b.max_mean, 1.0, 1e-12);
    const uint64_t one[4] = {0, 4, 0, 0};
    moe_balance_compute(one, 4, &b);
    CHECK_NEAR(b.gini, 0.75, 1e-12);      /* (n-1)/n */
    CHECK_NEAR(b.cv, 1.7320508, 1e-6);    /* sqrt(3) */
    CHECK_NEAR(b.entropy_norm, 0.0, 1e-12);
    CHECK_NEAR(b.max_mean, 4.0, 1e-12);
    const uint64_t ramp[4] = {3, 1, 4, 2};
    moe_balance_compute(ramp, 4, &b);
    CHECK_NEAR(b.gini, 0.25, 1e-12);      /* (-3*1 - 1*2 + 1*3 + 3*4) / (4 * 10) */
    CHECK_NEAR(b.cv, 0.4472136, 1e-6);    /* sqrt(1.25) / 2.5 */
    CHECK_NEAR(b.entropy_norm, 0.9232197, 1e-6);
    CHECK_NEAR(b.max_mean, 1.6, 1e-12);
    const uint64_t zero[3] = {0, 0, 0};
    moe_balance_compute(zero, 3, &b);
    CHECK_NEAR(b.gini + b.cv + b.entropy_norm + b.max_mean, 0.0, 1e-12);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void check_quantiles(const int64_t *v, int n)
{
    moe_hist_t h;
    moe_hist_reset(&h);
    for (int i = 0; i < n; i++) {
        moe_hist_add(&h, v[i]);
    }
    int64_t *s = malloc(sizeof(int64_t) * (size_t)n);
    memcpy(s, v, sizeof(int64_t) * (size_t)n);
    qsort(s, (size_t)n, sizeof(int64_t), cmp_i64);
    const double qs[5] = {0.1, 0.5, 0.9, 0.99, 0.999};
    for (int i = 0; i < 5; i++) {
        int rank = (int)(qs[i] * n + 0.999999999); /* nearest rank, 1-based */
        double exact = (double)s[rank - 1];
        double got = moe_hist_quantile(&h, qs[i]);
        CHECK(got >= exact * (1.0 - 1.0 / 32) - 1 && got <= exact * (1.0 + 1.0 / 32) + 1);
    }
    CHECK_NEAR(moe_hist_quantile(&h, 0.0), (double)s[0], 0);
    CHECK_NEAR(moe_hist_quantile(&h, 1.0), (double)s[n - 1], 0);
    CHECK_INT_EQ(h.count, n);
    free(s);
}

static void test_hist(void)
{
    enum { N = 100000 };
    int64_t *v = malloc(sizeof(int64_t) * N);
    for (int i = 0; i < N; i++) {
        v[i] = i + 1; /* uniform 1..N ns */
    }
    check_quantiles(v, N);
    unsigned x = 7;
    for (int i = 0; i < N; i++) { /* a long-tailed mix: mostly ~1 ms, some 20 ms */
        x = x * 1103515245u + 12345u;
        v[i] = (x >> 8) % 100 < 97 ? 900000 + (int64_t)((x >> 4) % 200000)
                                   : 20000000 + (int64_t)((x >> 3) % 5000000);
    }
    check_quantiles(v, N);
    /* merging two halves equals adding everything */
    moe_hist_t a, b, all;
    moe_hist_reset(&a);
    moe_hist_reset(&b);
    moe_hist_reset(&all);
    for (int i = 0; i < N; i++) {
        moe_hist_add(i % 2 ? &a : &b, v[i]);
        moe_hist_add(&all, v[i]);
    }
    moe_hist_merge(&a, &b);
    CHECK(memcmp(a.buckets, all.buckets, sizeof(a.buckets)) == 0);
    CHECK_INT_EQ(a.count, all.count);
    CHECK_INT_EQ(a.min, all.min);
    CHECK_INT_EQ(a.max, all.max);
    for (int b2 = 1; b2 < MOE_HIST_BUCKETS; b2++) { /* buckets tile the line */
        CHECK(moe_hist_bucket_of(moe_hist_bucket_low(b2)) == b2);
        CHECK(moe_hist_bucket_of(moe_hist_bucket_low(b2) - 1) == b2 - 1);
    }
    free(v);
}

static void test_schedule(void)
{
    moe_config_t cfg;
    moe_cfg_defaults(&cfg); /* warmup 5, measure 10, wait 0, repeat 1, sampling 1 */
    bool rec, closes;
    CHECK_INT_EQ(moe_prof_schedule(&cfg, 4, &rec, &closes), -1);
    CHECK(!rec);
    CHECK_INT_EQ(moe_prof_schedule(&cfg, 5, &rec, &closes), 0);
    CHECK(rec && !closes);
    CHECK_INT_EQ(moe_prof_schedule(&cfg, 14, &rec, &closes), 0);
    CHECK(rec && closes);
    CHECK_INT_EQ(moe_prof_schedule(&cfg, 15, &rec, &closes), -1);
    cfg.prof_wait_steps = 2;
    cfg.prof_repeat = 2;
    cfg.prof_sampling_rate = 3;
    CHECK_INT_EQ(moe_prof_schedule(&cfg, 15, &rec, &closes), -1); /* waiting */
    CHECK_INT_EQ(moe_prof_schedule(&cfg, 17, &rec, &closes), 1);
    CHECK(rec);
    CHECK_INT_EQ(moe_prof_schedule(&cfg, 18, &rec, &closes), 1);
    CHECK(!rec); /* off the sampling grid */
    CHECK_INT_EQ(moe_prof_schedule(&cfg, 26, &rec, &closes), 1);
    CHECK(closes);
    CHECK_INT_EQ(moe_prof_schedule(&cfg, 27, &rec, &closes), -1); /* past repeat */
    cfg.prof_repeat = 0;
    CHECK_INT_EQ(moe_prof_schedule(&cfg, 5 + 12 * 99, &rec, &closes), 99);
}

static void fill_record(moe_prof_record_t *r)
{
    CHECK(moe_prof_record_alloc(r, 3, 2, 8, 4) == MOE_OK);
    r->rank = 2;
    r->window = 1;
    strcpy(r->host, "node-b");
    for (int i = 0; i < 4; i++) {
        r->local_ids[i] = 4 + i;
    }
    r->expert_weight_bytes = 123456789;
    r->clock_offset_ns = -1234.5;
    r->steps_recorded = 3;
    r->phase_sum[5] = 3e6;
    moe_hist_add(&r->experts[5].hist, 1000000);
    moe_hist_add(&r->experts[5].hist, 2000000);
    r->experts[5].tokens = 512;
    r->kept[9] = 77;
    r->bytes_sent[0] = 1 << 20;
    r->wait_ns[0] = 5e5;
    r->steps = calloc(2, sizeof(*r->steps));
    r->num_steps = 2;
    r->steps[1].step = 9;
    r->steps[1].phase_ns[5] = 1000;
    r->metrics = calloc(1, sizeof(*r->metrics));
    r->num_metrics = 1;
    r->metrics[0] = (moe_rec_metric_t){.step = 9, .layer = 1, .local = 3, .tokens = 10, .ns = 99};
    r->mem = calloc(1, sizeof(*r->mem));
    r->num_mem = 1;
    r->mem[0].rss_bytes = 4096;
    r->flags = MOE_PROF_FLAG_FINAL;
}

static void test_record(void)
{
    moe_prof_record_t r, d;
    fill_record(&r);
    moe_wbuf_t w;
    moe_wbuf_init(&w);
    moe_prof_record_encode(&r, &w);
    CHECK(w.ok && w.len > MOE_PROF_HEADER_SIZE);
    moe_error_t err;
    CHECK(moe_prof_record_decode(w.data, w.len, &d, &err) == MOE_OK);
    CHECK_INT_EQ(d.rank, 2);
    CHECK_INT_EQ(d.window, 1);
    CHECK(strcmp(d.host, "node-b") == 0);
    CHECK_INT_EQ(d.local_ids[3], 7);
    CHECK_INT_EQ(d.expert_weight_bytes, 123456789);
    CHECK_NEAR(d.clock_offset_ns, -1234.5, 0);
    CHECK_INT_EQ(d.experts[5].tokens, 512);
    CHECK_INT_EQ(d.experts[5].hist.count, 2);
    CHECK(memcmp(d.experts[5].hist.buckets, r.experts[5].hist.buckets, sizeof(d.experts[5].hist.buckets)) == 0);
    CHECK_INT_EQ(d.kept[9], 77);
    CHECK_INT_EQ(d.bytes_sent[0], 1 << 20);
    CHECK_INT_EQ(d.num_steps, 2);
    CHECK_INT_EQ(d.steps[1].step, 9);
    CHECK_INT_EQ(d.metrics[0].ns, 99);
    CHECK_INT_EQ(d.mem[0].rss_bytes, 4096);
    CHECK(d.flags & MOE_PROF_FLAG_FINAL);
    moe_prof_record_free(&d);

    /* every truncation is rejected, none crashes */
    int rejected = 0;
    for (size_t n = 0; n < w.len; n++) {
        rejected += moe_prof_record_decode(w.data, n, &d, &err) != MOE_OK;
    }
    CHECK_INT_EQ(rejected, (long long)w.len);
    /* every flipped payload byte is caught (checksum) */
    uint8_t *copy = malloc(w.len);
    rejected = 0;
    for (size_t i = MOE_PROF_HEADER_SIZE; i < w.len; i++) {
        memcpy(copy, w.data, w.len);
        copy[i] ^= 0x5a;
        rejected += moe_prof_record_decode(copy, w.len, &d, &err) != MOE_OK;
    }
    CHECK_INT_EQ(rejected, (long long)(w.len - MOE_PROF_HEADER_SIZE));
    /* a newer format this build cannot read */
    memcpy(copy, w.data, w.len);
    copy[6] = 9; /* min_version */
    CHECK(moe_prof_record_decode(copy, w.len, &d, &err) == MOE_ERR_UNSUPPORTED);
    CHECK_STR_CONTAINS(err.msg, "version");
    memcpy(copy, w.data, w.len);
    copy[0] = 'X';
    CHECK(moe_prof_record_decode(copy, w.len, &d, &err) == MOE_ERR_FORMAT);
    free(copy);
    moe_wbuf_free(&w);
    moe_prof_record_free(&r);
}

/* A record whose checksum is right but whose counts lie is still rejected. */
static void test_record_lies(void)
{
    moe_prof_record_t r, d;
    CHECK(moe_prof_record_alloc(&r, 2, 1, 2, 1) == MOE_OK);
    moe_wbuf_t w;
    moe_wbuf_init(&w);
    moe_prof_record_encode(&r, &w);
    /* find the STEPS section (tag 7) and claim 2^40 steps follow */
    size_t pos = MOE_PROF_HEADER_SIZE;
    bool patched = false;
    while (pos + 12 <= w.len) {
        uint16_t tag = (uint16_t)(w.data[pos] | w.data[pos + 1] << 8);
        uint64_t len = 0;
        for (int i = 0; i < 8; i++) {
            len |= (uint64_t)w.data[pos + 4 + (size_t)i] << (8 * i);
        }
        if (tag == 7) {
            moe_wbuf_patch_u64(&w, pos + 12, 1ULL << 40);
            patched = true;
            break;
        }
        pos += 12 + (size_t)len;
    }
    CHECK(patched);
    moe_wbuf_patch_u64(&w, 24, moe_hash64(w.data + MOE_PROF_HEADER_SIZE, w.len - MOE_PROF_HEADER_SIZE));
    moe_error_t err;
    CHECK(moe_prof_record_decode(w.data, w.len, &d, &err) == MOE_ERR_TRUNCATED);
    CHECK_STR_CONTAINS(err.msg, "list count");
    moe_wbuf_free(&w);
    moe_prof_record_free(&r);
}

int main(void)
{
    test_balance();
    test_hist();
    test_schedule();
    test_record();
    test_record_lies();
    return moe_test_finish("test_prof");
}
