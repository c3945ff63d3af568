/* Writes the seed corpus of the prof_record fuzz targets: a few valid profile records
 * built with moe_prof_record_alloc / moe_prof_record_encode, so the seeds follow the
 * format of this build. Rerun it when the record format changes (README.md):
 *
 *   cc -std=c11 -D_POSIX_C_SOURCE=200809L -Iruntime/include -Iprofiler/include \
 *      -Iproto/include -Itests/fuzz tests/fuzz/gen_prof_seeds.c runtime/src/base/status.c \
 *      runtime/src/base/hash.c proto/src/prof_record.c proto/src/wire.c \
 *      proto/src/hist.c -lm -o /tmp/gen_prof_seeds
 *   /tmp/gen_prof_seeds tests/fuzz/corpus/prof_record
 *
 * Not built by CMake or run_fuzz.sh. `typical_v1` in the corpus is `typical` as version 1
 * wrote it (no OVERLAP section), kept so the reading of older records stays seeded; this
 * program does not write it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe_config/config.h"
#include "moe_proto/prof_record.h"
#include "moe_proto/wire.h"

#include "seed_file.h"

/* Encode rec, check it decodes, write it; append_extra adds a section of an unknown tag
 * (a newer writer's), patching length and checksum, to seed the skip path. */
static int emit(const char *dir, const char *name, moe_prof_record_t *rec, int append_extra)
{
    moe_wbuf_t w;
    moe_wbuf_init(&w);
    moe_prof_record_encode(rec, &w);
    if (append_extra) {
        moe_wbuf_u16(&w, 99);
        moe_wbuf_u16(&w, 0);
        moe_wbuf_u64(&w, 5);
        moe_wbuf_bytes(&w, "extra", 5);
        moe_wbuf_patch_u64(&w, 16, (uint64_t)(w.len - MOE_PROF_HEADER_SIZE));
        moe_wbuf_patch_u64(&w, 24, moe_hash64(w.data + MOE_PROF_HEADER_SIZE,
                                              w.len - MOE_PROF_HEADER_SIZE));
    }
    moe_prof_record_t back;
    moe_error_t err;
    int rc = 1;
    if (!w.ok) {
        fprintf(stderr, "%s: out of memory\n", name);
    } else if (moe_prof_record_decode(w.data, w.len, &back, &err) != MOE_OK) {
        fprintf(stderr, "%s: does not decode: %s\n", name, err.msg);
    } else {
        moe_prof_record_free(&back);
        rc = write_file(dir, name, w.data, w.len);
    }
    moe_wbuf_free(&w);
    moe_prof_record_free(rec);
    return rc;
}

static void *list(size_t n, size_t size)
{
    void *p = calloc(n, size);
    if (p == NULL) {
        abort();
    }
    return p;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : ".";
    moe_prof_record_t r;
    int bad = 0;

    /* the smallest record: one rank, one layer, one expert it does not host, no lists */
    if (moe_prof_record_alloc(&r, 1, 1, 1, 0) != MOE_OK) {
        return 1;
    }
    bad |= emit(dir, "minimal", &r, 0);

    /* a typical expert rank of a 3-rank job: 2 layers of 8 experts, hosts 4..7 */
    if (moe_prof_record_alloc(&r, 3, 2, 8, 4) != MOE_OK) {
        return 1;
    }
    r.rank = 2;
    r.window = 1;
    strcpy(r.host, "node-b");
    for (int i = 0; i < 4; i++) {
        r.local_ids[i] = 4 + i;
    }
    r.expert_weight_bytes = 123456789;
    r.exchange_buffer_bytes = 1 << 22;
    r.clock_offset_ns = -1234.5;
    r.clock_uncertainty_ns = 80;
    r.rss_peak = 1 << 28;
    r.steps_recorded = 3;
    for (int p = 0; p < MOE_PHASE_COUNT; p++) {
        r.phase_sum[p] = 1e5 * (p + 1);
        r.phase_min[p] = 1e4 * (p + 1);
        r.phase_max[p] = 5e4 * (p + 1);
    }
    for (int i = 0; i < 8; i++) {
        r.experts[i].tokens = 100 + (uint64_t)i;
        r.experts[i].calls = 3;
        r.experts[i].flops = 1.5e9;
        moe_hist_add(&r.experts[i].hist, 1000 * (i + 1));
        moe_hist_add(&r.experts[i].hist, 7);
        moe_hist_add(&r.experts[i].hist, 2000000);
    }
    for (int i = 0; i < 16; i++) {
        r.demand[i] = 256;
        r.kept[i] = 250;
        r.dropped[i] = 6;
    }
    for (int i = 0; i < 3; i++) {
        r.bytes_sent[i] = 1 << 20;
        r.bytes_recv[i] = 1 << 19;
        r.msgs_sent[i] = 4;
        r.msgs_recv[i] = 4;
        r.wait_ns[i] = 5e5;
    }
    r.num_steps = 3;
    r.steps = list(3, sizeof(*r.steps));
    for (int i = 0; i < 3; i++) {
        r.steps[i].step = 5 + i;
        r.steps[i].begin_ns = 1000000 * i;
        for (int p = 0; p < MOE_PHASE_COUNT; p++) {
            r.steps[i].phase_ns[p] = 1000 * (p + 1);
        }
    }
    r.num_exchanges = 2;
    r.exchanges = list(2, sizeof(*r.exchanges));
    r.exchanges[1] = (moe_rec_exchange_t){.step = 6, .layer = 1, .dispatch_begin_ns = 10,
                                          .dispatch_end_ns = 20, .combine_begin_ns = 30,
                                          .combine_end_ns = 40};
    r.num_metrics = 2;
    r.metrics = list(2, sizeof(*r.metrics));
    r.metrics[0] = (moe_rec_metric_t){.step = 5, .layer = 0, .local = 0, .tokens = 10, .ns = 99};
    r.metrics[1] = (moe_rec_metric_t){.step = 6, .layer = 1, .local = 3, .tokens = 12, .ns = 77};
    r.metrics_dropped = 1;
    r.num_events = 2;
    r.events = list(2, sizeof(*r.events));
    r.events[0] = (moe_rec_event_t){.ts_ns = 1, .dur_ns = 2, .kind = 1, .layer = 0, .id = 4,
                                    .lane = 0, .step = 5, .arg = 64};
    r.events[1] = (moe_rec_event_t){.ts_ns = 3, .dur_ns = 4, .kind = 2, .layer = 1, .id = 7,
                                    .lane = 1, .step = 6, .arg = -1};
    r.num_mem = 2;
    r.mem = list(2, sizeof(*r.mem));
    r.mem[0] = (moe_rec_mem_t){.t_ns = 10, .rss_bytes = 4096, .dev_bytes = 0};
    r.mem[1] = (moe_rec_mem_t){.t_ns = 20, .rss_bytes = 8192, .dev_bytes = 1 << 20};
    r.dev_peak = 1 << 21;
    /* OVERLAP (version 2): 4 chunks, 1/4 of the exchange hidden behind expert calls */
    r.exchange_ns = 4000000;
    r.hidden_ns = 1000000;
    r.chunks = 4;
    strcpy(r.device, "NVIDIA H200");
    bad |= emit(dir, "typical", &r, 0);

    /* the final record of the master rank (hosts nothing), from a newer writer */
    if (moe_prof_record_alloc(&r, 4, 1, 4, 0) != MOE_OK) {
        return 1;
    }
    r.flags = MOE_PROF_FLAG_FINAL;
    r.window = 7;
    strcpy(r.host, "node-a");
    r.demand[2] = 9;
    r.num_mem = 1;
    r.mem = list(1, sizeof(*r.mem));
    r.mem[0].rss_bytes = 1;
    r.chunks = 1; /* chunks 1: exchanges in flight, none hidden */
    r.exchange_ns = 777;
    strcpy(r.device, "cpu");
    bad |= emit(dir, "final_extra_section", &r, 1);

    /* every expert local, one sample per histogram bucket family */
    if (moe_prof_record_alloc(&r, 2, 1, 2, 2) != MOE_OK) {
        return 1;
    }
    r.rank = 1;
    r.local_ids[0] = 0;
    r.local_ids[1] = 1;
    for (int v = 0; v < 40; v++) {
        moe_hist_add(&r.experts[v % 2].hist, (int64_t)1 << v);
    }
    bad |= emit(dir, "hist_wide", &r, 0);
    return bad;
}
