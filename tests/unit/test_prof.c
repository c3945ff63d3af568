/* Profiler pieces with known answers: balance figures, histogram quantiles, the window
 * schedule, the overlap of exchange spans and expert calls, and the profile record's round
 * trip and rejection of bad bytes. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "gather/balance.h"
#include "moe/clock.h"
#include "moe_config/config.h"
#include "moe_proto/hist.h"
#include "moe_prof/prof.h"
#include "moe_proto/prof_record.h"
#include "record/overlap.h"
#include "record/record.h"
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
        if (rank == n || rank == 1) { /* the largest or the smallest sample: exact */
            CHECK_NEAR(got, exact, 0);
        }
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
    /* few samples, as a report of 10 recorded steps has: p99 (and p90 of 10) is the largest
     * sample, exact; p10 of 10 the smallest */
    for (int n = 1; n <= 10; n++) {
        check_quantiles(v + 1000, n);
    }
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

/* ---- overlap ---------------------------------------------------------------------- */

#define OV_MAX 64

/* moe_overlap_measure on copies of a and b against the expected measures. */
static void check_overlap(int line, const moe_ival_t *a, int na, const moe_ival_t *b, int nb,
                          int64_t want_a, int64_t want_both)
{
    moe_ival_t ca[OV_MAX], cb[OV_MAX];
    int64_t got_a = -1, got_both = -1;
    memcpy(ca, a, sizeof(*a) * (size_t)na);
    memcpy(cb, b, sizeof(*b) * (size_t)nb);
    moe_overlap_measure(ca, na, cb, nb, &got_a, &got_both);
    CHECK_INT_EQ(got_a, want_a);
    CHECK_INT_EQ(got_both, want_both);
    if (got_a != want_a || got_both != want_both) {
        fprintf(stderr, "  (the case at line %d)\n", line);
    }
}

#define OVERLAP(a, b, want_a, want_both)                                                   \
    check_overlap(__LINE__, a, (int)(sizeof(a) / sizeof(a[0])), b,                        \
                  (int)(sizeof(b) / sizeof(b[0])), want_a, want_both)

static void test_overlap_known(void)
{
    const moe_ival_t disjoint_a[] = {{0, 10}, {20, 30}}, disjoint_b[] = {{10, 20}, {30, 40}};
    OVERLAP(disjoint_a, disjoint_b, 20, 0); /* touching shares nothing */
    const moe_ival_t outer[] = {{0, 100}}, inner[] = {{10, 20}, {30, 40}};
    OVERLAP(outer, inner, 100, 20);         /* b nested in a */
    OVERLAP(inner, outer, 20, 20);          /* a nested in b */
    const moe_ival_t part_a[] = {{0, 10}}, part_b[] = {{5, 15}};
    OVERLAP(part_a, part_b, 10, 5);
    OVERLAP(part_b, part_a, 10, 5);
    const moe_ival_t unsorted_a[] = {{50, 60}, {0, 10}, {20, 30}};
    const moe_ival_t unsorted_b[] = {{25, 55}, {5, 8}};
    OVERLAP(unsorted_a, unsorted_b, 30, 13); /* [25,30) + [50,55) + [5,8) */
    const moe_ival_t dup_a[] = {{0, 10}, {0, 10}, {0, 10}}, dup_b[] = {{5, 10}, {5, 10}};
    OVERLAP(dup_a, dup_b, 10, 5);
    const moe_ival_t chain_a[] = {{5, 15}, {0, 10}, {14, 16}}, chain_b[] = {{12, 20}};
    OVERLAP(chain_a, chain_b, 16, 4);        /* a's own overlaps merge into [0, 16) */
    const moe_ival_t zero_a[] = {{5, 5}, {0, 10}, {12, 12}}, zero_b[] = {{7, 7}, {3, 3}};
    OVERLAP(zero_a, zero_b, 10, 0);          /* zero-length: nothing */
    const moe_ival_t only_zero[] = {{4, 4}}, inverted[] = {{10, 5}};
    OVERLAP(only_zero, outer, 0, 0);
    OVERLAP(inverted, outer, 0, 0);          /* end before begin: empty */
    OVERLAP(outer, inverted, 100, 0);
    const moe_ival_t neg_a[] = {{-30, -10}}, neg_b[] = {{-20, 5}};
    OVERLAP(neg_a, neg_b, 20, 10);           /* clocks are only compared, never signed */
    moe_ival_t none[1] = {{0, 0}}, one[1] = {{0, 100}};
    int64_t a_ns = -1, both = -1;
    moe_overlap_measure(none, 0, one, 1, &a_ns, &both);
    CHECK(a_ns == 0 && both == 0);           /* empty a */
    moe_overlap_measure(one, 1, none, 0, &a_ns, &both);
    CHECK(a_ns == 100 && both == 0);         /* empty b */
    moe_overlap_measure(none, 0, none, 0, &a_ns, &both);
    CHECK(a_ns == 0 && both == 0);
}

/* Random sets on a small grid against a unit-by-unit count. */
static void test_overlap_random(void)
{
    unsigned x = 12345;
    for (int round = 0; round < 2000; round++) {
        moe_ival_t a[OV_MAX], b[OV_MAX];
        bool in_a[512] = {false}, in_b[512] = {false};
        x = x * 1103515245u + 12345u;
        int na = (int)((x >> 8) % OV_MAX), nb = (int)((x >> 16) % OV_MAX);
        for (int i = 0; i < na + nb; i++) {
            x = x * 1103515245u + 12345u;
            /* lengths -2..21: some inverted, some empty */
            int64_t lo = (int64_t)((x >> 8) % 240), len = (int64_t)((x >> 20) % 24) - 2;
            moe_ival_t v = {lo, lo + len};
            bool *mark = i < na ? in_a : in_b;
            for (int64_t t = v.begin; t < v.end; t++) {
                mark[t] = true;
            }
            if (i < na) {
                a[i] = v;
            } else {
                b[i - na] = v;
            }
        }
        int64_t want_a = 0, want_both = 0;
        for (int t = 0; t < 512; t++) {
            want_a += in_a[t];
            want_both += in_a[t] && in_b[t];
        }
        check_overlap(__LINE__, a, na, b, nb, want_a, want_both);
    }
}

/* A layer as the runtime hands it over: chunks 1 hides nothing, exactly; chunks 2
 * pipelined hides what its expert calls cover; scratch bounds what is counted. */
static void test_overlap_layer(void)
{
    moe_ival_t spans[4], calls[4];
    int64_t inflight = -1, hidden = -1;
    /* chunks 1: dispatch, then the experts, then combine */
    const moe_prof_span_t s1[2] = {{MOE_PROF_SPAN_DISPATCH, 0, 1000, 1100},
                                   {MOE_PROF_SPAN_COMBINE, 0, 1300, 1400}};
    const moe_prof_call_t c1[2] = {{0, 0, 10, 1100, 1200}, {1, 0, 20, 1200, 1300}};
    moe_prof_layer_sample_t s = {.num_spans = 2, .spans = s1, .num_calls = 2, .calls = c1};
    moe_overlap_layer(&s, spans, 2, calls, 2, &inflight, &hidden);
    CHECK_INT_EQ(inflight, 200);
    CHECK_INT_EQ(hidden, 0);
    /* chunks 2: c1's dispatch and c0's combine run while the expert computes */
    const moe_prof_span_t s2[4] = {{MOE_PROF_SPAN_DISPATCH, 0, 0, 100},
                                   {MOE_PROF_SPAN_DISPATCH, 1, 100, 200},
                                   {MOE_PROF_SPAN_COMBINE, 0, 180, 260},
                                   {MOE_PROF_SPAN_COMBINE, 1, 280, 350}};
    const moe_prof_call_t c2[2] = {{0, 0, 8, 100, 180}, {0, 1, 8, 200, 280}};
    s = (moe_prof_layer_sample_t){.num_spans = 4, .spans = s2, .num_calls = 2, .calls = c2};
    moe_overlap_layer(&s, spans, 4, calls, 4, &inflight, &hidden);
    CHECK_INT_EQ(inflight, 330); /* [0, 260) + [280, 350) */
    CHECK_INT_EQ(hidden, 140);   /* [100, 180) + [200, 260) */
    moe_overlap_layer(&s, spans, 2, calls, 1, &inflight, &hidden);
    CHECK_INT_EQ(inflight, 200); /* only what fits the scratch: spans [0, 200), call c0 */
    CHECK_INT_EQ(hidden, 80);
    s.num_spans = s.num_calls = 0;
    moe_overlap_layer(&s, spans, 4, calls, 4, &inflight, &hidden);
    CHECK(inflight == 0 && hidden == 0);
}

/* ---- the memory sampler's device memory -------------------------------------------- */

static atomic_int fake_calls;

/* A device that reports 1 MiB more in use at each call and a peak of 64 MiB. */
static void fake_device_memory(uint64_t *current, uint64_t *peak)
{
    int n = atomic_fetch_add(&fake_calls, 1) + 1;
    *current = (uint64_t)n << 20;
    *peak = 64ULL << 20;
}

static void test_sampler_device(void)
{
    for (int with_device = 0; with_device < 2; with_device++) {
        moe_sampler_t smp;
        moe_prof_record_t rec;
        memset(&rec, 0, sizeof(rec));
        atomic_store(&fake_calls, 0);
        CHECK_INT_EQ(moe_sampler_start(&smp, 1, 64, with_device ? fake_device_memory : NULL), 0);
        struct timespec nap = {0, 20000000};
        nanosleep(&nap, NULL);
        moe_sampler_stop(&smp);
        CHECK_INT_EQ(moe_sampler_collect(&smp, &rec), 0);
        CHECK(rec.num_mem >= 1);
        if (with_device) { /* one call per sample, from the sampler's thread */
            CHECK_INT_EQ(rec.num_mem, atomic_load(&fake_calls));
        }
        for (int64_t i = 0; i < rec.num_mem; i++) {
            CHECK(rec.mem[i].rss_bytes > 0);
            /* the i-th sample saw the i-th call: (i + 1) MiB in use */
            CHECK_INT_EQ(rec.mem[i].dev_bytes, with_device ? (uint64_t)(i + 1) << 20 : 0);
        }
        CHECK_INT_EQ(atomic_load(&smp.dev_peak), with_device ? 64ULL << 20 : 0);
        CHECK(atomic_load(&smp.rss_peak) > 0);
        moe_sampler_free(&smp);
        free(rec.mem);
    }
}

/* A long period (profiler.memory_sample_ms: 60000) sees one sample, at the start; a buffer
 * touched after it must still be in the peak (the process's VmHWM at the stop), and the
 * stop must not wait for the period's nap. */
static void test_sampler_peak(void)
{
    moe_sampler_t smp;
    moe_prof_record_t rec;
    memset(&rec, 0, sizeof(rec));
    CHECK_INT_EQ(moe_sampler_start(&smp, 60000, 64, NULL), 0);
    struct timespec nap = {0, 50000000};
    nanosleep(&nap, NULL); /* the first sample is taken */
    size_t big = (size_t)96 << 20;
    unsigned char *buf = malloc(big);
    CHECK(buf != NULL);
    memset(buf, 0x5a, big);
    uint64_t touched = moe_read_rss_bytes();
    int64_t t0 = moe_now_ns();
    moe_sampler_stop(&smp);
    CHECK(moe_now_ns() - t0 < 2000000000LL);
    /* the kernel's RSS counters are per-CPU and read approximately (statm and status may
     * differ by a few MiB between reads): the 96 MiB must be there, give or take 4 */
    CHECK(atomic_load(&smp.rss_peak) >= touched - ((uint64_t)4 << 20));
    CHECK(atomic_load(&smp.rss_peak) >= (uint64_t)big);
    CHECK_INT_EQ(moe_sampler_collect(&smp, &rec), 0);
    CHECK_INT_EQ(rec.num_mem, 2); /* the start's sample and the stop's */
    CHECK(rec.mem[1].rss_bytes >= touched - ((uint64_t)4 << 20));
    CHECK(buf[big / 2] == 0x5a);
    free(buf);
    moe_sampler_free(&smp);
    free(rec.mem);
}

/* mib MiB resident for a moment: mapped, written, unmapped (resident no longer). */
static void touch_mib(size_t mib)
{
    size_t len = mib << 20;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    if (p != MAP_FAILED) {
        memset(p, 0x5a, len);
        munmap(p, len);
    }
}

/* An on-demand window's peak: 64 MiB touched between two of its samples is in it, 160 MiB
 * touched before it is not; the run's peak (the sampler's stop) keeps the 160 MiB that the
 * window's reset of the kernel's mark cleared. Where /proc/self/clear_refs cannot be
 * written the window's peak is its largest sample. */
static void test_window_peak(void)
{
    moe_sampler_t smp;
    moe_step_mem_t sm;
    moe_prof_record_t rec;
    memset(&rec, 0, sizeof(rec));
    rec.mem = calloc(8, sizeof(*rec.mem));
    CHECK(rec.mem != NULL);
    CHECK_INT_EQ(moe_sampler_start(&smp, 60000, 64, NULL), 0);
    touch_mib(160); /* the run's peak, before the window */
    CHECK_INT_EQ(moe_step_mem_open(&sm, 50), 0);
    moe_step_mem_restart(&sm);
    moe_step_mem_begin(&sm);
    bool reset = sm.hwm_reset;
    moe_step_mem_take(&sm, moe_now_ns(), true, &rec, 8);
    touch_mib(64); /* between the window's two samples */
    moe_step_mem_take(&sm, moe_now_ns(), true, &rec, 8);
    moe_step_mem_end(&sm, &rec);
    CHECK_INT_EQ(rec.num_mem, 2);
    uint64_t top = rec.mem[0].rss_bytes > rec.mem[1].rss_bytes ? rec.mem[0].rss_bytes
                                                                 : rec.mem[1].rss_bytes;
    if (reset) {
        /* the samples miss the 64 MiB (give or take the kernel's few MiB of slack) */
        CHECK(rec.rss_peak >= top + ((uint64_t)56 << 20));
        CHECK(rec.rss_peak >= (uint64_t)64 << 20);
        CHECK(rec.rss_peak < top + ((uint64_t)140 << 20)); /* not the 160 before it */
    } else {
        fprintf(stderr, "test_window_peak: /proc/self/clear_refs not writable: the samples' "
                        "peak only\n");
        CHECK_INT_EQ(rec.rss_peak, top);
    }
    moe_step_mem_close(&sm);
    moe_sampler_stop(&smp);
    CHECK(atomic_load(&smp.rss_peak) >= (uint64_t)160 << 20);
    moe_sampler_free(&smp);
    free(rec.mem);
}

/* ---- the profile record ------------------------------------------------------------ */

static void fill_record(moe_prof_record_t *r)
{
    CHECK(moe_prof_record_alloc(r, 3, 2, 8, 4) == MOE_OK);
    r->rank = 2;
    r->window = 1;
    strcpy(r->host, "node-b");
    for (int i = 0; i < 4; i++) {
        r->local_ids[i] = 4 + i;
        r->slot_ids[i] = 4 + i;         /* layer 0: the shared placement's */
        r->slot_ids[4 + i] = i < 2 ? i : -1; /* layer 1: its own, two experts */
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
    r->mem[0].dev_bytes = 1 << 30;
    r->dev_peak = 3ULL << 30;
    r->exchange_ns = 330;
    r->hidden_ns = 140;
    r->chunks = 2;
    strcpy(r->device, "NVIDIA H200");
    r->cpu_steps_ns = 930;
    r->wall_steps_ns = 1000;
    r->cpu_run_ns = 1800;
    r->wall_run_ns = 2000;
    r->rows_sent[1] = 10; /* runtime.dedup: 10 rows to rank 1 carried 13 pairs */
    r->pairs_sent[1] = 13;
    r->rows_recv[0] = 4;
    r->pairs_recv[0] = 7;
    r->layer_lat = calloc(2, sizeof(*r->layer_lat));
    r->num_layer_lat = 2;
    r->layer_lat[0] = (moe_rec_lat_t){.step = 9, .layer = 0, .ns = 700};
    r->layer_lat[1] = (moe_rec_lat_t){.step = 9, .layer = 1, .ns = 250};
    r->flags = MOE_PROF_FLAG_FINAL;
}

/* The offset of the first section with `tag` in an encoded record and its body length;
 * false if there is none. */
static bool find_section(const moe_wbuf_t *w, uint16_t tag, size_t *at, uint64_t *len)
{
    size_t pos = MOE_PROF_HEADER_SIZE;
    while (pos + 12 <= w->len) {
        uint16_t t = (uint16_t)(w->data[pos] | w->data[pos + 1] << 8);
        uint64_t n = 0;
        for (int i = 0; i < 8; i++) {
            n |= (uint64_t)w->data[pos + 4 + (size_t)i] << (8 * i);
        }
        if (t == tag) {
            *at = pos;
            *len = n;
            return true;
        }
        pos += 12 + (size_t)n;
    }
    return false;
}

/* The payload length and checksum of an edited record. */
static void reseal(moe_wbuf_t *w)
{
    moe_wbuf_patch_u64(w, 16, (uint64_t)(w->len - MOE_PROF_HEADER_SIZE));
    moe_wbuf_patch_u64(w, 24, moe_hash64(w->data + MOE_PROF_HEADER_SIZE,
                                         w->len - MOE_PROF_HEADER_SIZE));
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
    CHECK_INT_EQ(d.slot_ids[3], 7);
    CHECK_INT_EQ(d.slot_ids[5], 1);
    CHECK_INT_EQ(d.slot_ids[6], -1);
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
    CHECK_INT_EQ(d.mem[0].dev_bytes, 1 << 30);
    CHECK_INT_EQ(d.dev_peak, 3ULL << 30);
    CHECK_INT_EQ(d.exchange_ns, 330);
    CHECK_INT_EQ(d.hidden_ns, 140);
    CHECK_INT_EQ(d.chunks, 2);
    CHECK(strcmp(d.device, "NVIDIA H200") == 0);
    CHECK(d.cpu_steps_ns == 930 && d.wall_steps_ns == 1000);
    CHECK(d.cpu_run_ns == 1800 && d.wall_run_ns == 2000);
    CHECK(d.rows_sent[1] == 10 && d.pairs_sent[1] == 13 && d.rows_sent[2] == 0);
    CHECK(d.rows_recv[0] == 4 && d.pairs_recv[0] == 7);
    CHECK(d.flags & MOE_PROF_FLAG_FINAL);
    CHECK_INT_EQ(d.num_layer_lat, 2);
    CHECK(d.num_layer_lat == 2 && d.layer_lat[1].step == 9 && d.layer_lat[1].layer == 1 &&
          d.layer_lat[1].ns == 250 && d.layer_lat[0].ns == 700);
    moe_prof_record_free(&d);
    /* version 2 that a version-1 reader still takes (it skips OVERLAP) */
    CHECK_INT_EQ(w.data[4] | w.data[5] << 8, 2);
    CHECK_INT_EQ(w.data[6] | w.data[7] << 8, 1);

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

/* A version-1 record (no OVERLAP section) decodes, its overlap fields 0 ("not recorded"). */
static void test_record_v1(void)
{
    moe_prof_record_t r, d;
    fill_record(&r);
    moe_wbuf_t w;
    moe_wbuf_init(&w);
    moe_prof_record_encode(&r, &w);
    size_t at = 0;
    uint64_t len = 0;
    CHECK(find_section(&w, 12, &at, &len));
    CHECK(at + 12 + len <= w.len);
    if (at + 12 + len <= w.len) {
        memmove(w.data + at, w.data + at + 12 + len, w.len - at - 12 - (size_t)len);
        w.len -= 12 + (size_t)len;
    }
    w.data[4] = 1; /* version 1 */
    reseal(&w);
    moe_error_t err;
    CHECK_INT_EQ(moe_prof_record_decode(w.data, w.len, &d, &err), MOE_OK);
    CHECK_INT_EQ(d.rank, 2);
    CHECK_INT_EQ(d.experts[5].tokens, 512);
    CHECK(d.exchange_ns == 0 && d.hidden_ns == 0 && d.chunks == 0 && d.device[0] == '\0');
    CHECK(d.cpu_steps_ns == 930); /* CPU stays: a version-1 reader would skip it */
    moe_prof_record_free(&d);
    moe_wbuf_free(&w);
    moe_prof_record_free(&r);
}

/* The test record's section `tag` (its body `len` bytes): with `n` bytes from `off` in its
 * body set to `byte` and a valid checksum, decoding fails with a message holding `why`;
 * without the section (an older writer) it decodes into *d (the caller frees it). */
static bool section_lies_and_absent(uint16_t tag, uint64_t want_len, size_t off, size_t n,
                                    uint8_t byte, const char *why, moe_prof_record_t *d)
{
    moe_prof_record_t r;
    fill_record(&r);
    moe_wbuf_t w;
    moe_wbuf_init(&w);
    moe_prof_record_encode(&r, &w);
    size_t at = 0;
    uint64_t len = 0;
    moe_error_t err;
    bool ok = find_section(&w, tag, &at, &len) && len == want_len && at + 12 + len <= w.len;
    CHECK(ok);
    if (ok) {
        uint8_t *copy = malloc(w.len);
        memcpy(copy, w.data, w.len);
        memset(w.data + at + 12 + off, byte, n);
        reseal(&w);
        CHECK_INT_EQ(moe_prof_record_decode(w.data, w.len, d, &err), MOE_ERR_FORMAT);
        CHECK_STR_CONTAINS(err.msg, why);
        memcpy(w.data, copy, w.len);
        free(copy);
        memmove(w.data + at, w.data + at + 12 + len, w.len - at - 12 - (size_t)len);
        w.len -= 12 + (size_t)len; /* drop the section */
        reseal(&w);
        ok = moe_prof_record_decode(w.data, w.len, d, &err) == MOE_OK;
        CHECK(ok);
    }
    moe_wbuf_free(&w);
    moe_prof_record_free(&r);
    return ok;
}

/* CPU: a negative CPU time is refused; without the section it reads as not measured. */
static void test_record_cpu(void)
{
    moe_prof_record_t d;
    if (section_lies_and_absent(14, 32, 0, 8, 0xff, "cpu", &d)) { /* cpu_steps_ns = -1 */
        CHECK(d.cpu_steps_ns == 0 && d.wall_steps_ns == 0 && d.cpu_run_ns == 0);
        CHECK_INT_EQ(d.chunks, 2);
        moe_prof_record_free(&d);
    }
}

/* SLOTS: an expert id out of range is refused; without the section the columns are
 * unknown (-1) and the reader names them from the config. */
static void test_record_slots(void)
{
    moe_prof_record_t d; /* layer 0 column 0: expert 8 of 8 */
    if (section_lies_and_absent(15, 4 + 2 * 4 * 4, 4, 1, 8, "slot expert id", &d)) {
        CHECK(d.slot_ids[0] == -1 && d.slot_ids[7] == -1);
        moe_prof_record_free(&d);
    }
}

/* ROWS: more rows than the pairs they carried is refused; without the section (an older
 * writer) no rows are known. */
static void test_record_rows(void)
{
    moe_prof_record_t d; /* rank 1's rows_sent: 10 -> 2^64 - 1, above its 13 pairs */
    if (section_lies_and_absent(17, 4 + 3 * 32, 4 + 32, 8, 0xff, "fewer pairs than rows", &d)) {
        CHECK(d.rows_sent[1] == 0 && d.pairs_sent[1] == 0 && d.pairs_recv[0] == 0);
        CHECK_INT_EQ(d.chunks, 2);
        moe_prof_record_free(&d);
    }
}

/* LAYERS: a layer out of range is refused; without the section there are no layer
 * latencies (an older writer). */
static void test_record_layers(void)
{
    moe_prof_record_t d; /* the first entry's layer = 0xffffffff: -1 */
    if (section_lies_and_absent(16, 8 + 2 * 20, 16, 4, 0xff, "layer latency", &d)) {
        CHECK(d.num_layer_lat == 0 && d.layer_lat == NULL);
        CHECK_INT_EQ(d.num_steps, 2);
        moe_prof_record_free(&d);
    }
}

/* An OVERLAP section with a valid checksum but impossible figures is rejected. */
static void test_record_overlap_lies(void)
{
    static const struct {
        int64_t exchange, hidden;
        int32_t chunks;
    } bad[] = {{100, 101, 2}, {-1, 0, 1}, {100, -5, 1}, {100, 50, 5000}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        moe_prof_record_t r, d;
        fill_record(&r);
        r.exchange_ns = bad[i].exchange;
        r.hidden_ns = bad[i].hidden;
        r.chunks = bad[i].chunks;
        moe_wbuf_t w;
        moe_wbuf_init(&w);
        moe_prof_record_encode(&r, &w);
        moe_error_t err;
        CHECK_INT_EQ(moe_prof_record_decode(w.data, w.len, &d, &err), MOE_ERR_FORMAT);
        CHECK_STR_CONTAINS(err.msg, "overlap out of range");
        moe_wbuf_free(&w);
        moe_prof_record_free(&r);
    }
    /* a body cut short (length and checksum consistent) */
    moe_prof_record_t r, d;
    fill_record(&r);
    moe_wbuf_t w;
    moe_wbuf_init(&w);
    moe_prof_record_encode(&r, &w);
    size_t at = 0;
    uint64_t len = 0;
    CHECK(find_section(&w, 12, &at, &len));
    CHECK(at + 12 + len == w.len); /* the last section */
    moe_wbuf_patch_u64(&w, at + 4, len - 10);
    w.len -= 10;
    reseal(&w);
    moe_error_t err;
    CHECK_INT_EQ(moe_prof_record_decode(w.data, w.len, &d, &err), MOE_ERR_TRUNCATED);
    CHECK_STR_CONTAINS(err.msg, "overlap section cut short");
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
    test_overlap_known();
    test_overlap_random();
    test_overlap_layer();
    test_sampler_device();
    test_sampler_peak();
    test_window_peak();
    test_record();
    test_record_v1();
    test_record_cpu();
    test_record_overlap_lies();
    test_record_slots();
    test_record_rows();
    test_record_layers();
    test_record_lies();
    return moe_test_finish("test_prof");
}
