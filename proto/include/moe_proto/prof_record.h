/* The profile record: what one profiled rank sends rank 0 at the end of each measurement
 * window (and a final one at the end of the run).
 *
 * Layout (little-endian):
 *   header, 32 bytes: magic "MOEP" | u16 version | u16 min_version (oldest reader that can
 *   read it) | u32 header_size | u32 flags (bit 0: final record) | u64 payload_len |
 *   u64 FNV-1a-64 of the payload
 *   payload: sections, each u16 tag | u16 reserved | u64 length | body. IDENT comes first;
 *   unknown tags are skipped (a newer writer may add sections), known ones are parsed
 *   with every count checked against the bytes that remain before anything is allocated.
 *
 * Versions: 1 had sections 1..11; 2 adds OVERLAP (12: exchange in flight, the part of it
 * hidden behind expert compute, runtime.chunks, the device's name) and SHARED (13: the
 * shared experts' rows and busy ns per layer, added later within version 2: a reader
 * without it skips the unknown tag, and a record without it reads as no shared experts)
 * and CPU (14: the process's CPU time against wall time, added later within version 2 in
 * the same way: a record without it reads as not measured, all zeros) and LAYERS (16: each
 * recorded layer's latency, gate begin to merge end, added later within version 2 in the
 * same way: a record without it has no layer latencies, num_layer_lat 0) and ROWS (17: the
 * dispatch rows to and from each rank and the (token, expert) pairs they carried, added
 * later within version 2 in the same way: a record without it reads as no rows).
 * Neither changes a byte of the others, so a version-2 record still says min_version 1 (a version-1 reader skips
 * OVERLAP as an unknown tag) and this reader takes version 1 records (OVERLAP absent: its
 * fields stay 0, chunks 0 meaning "not recorded").
 *
 * The recorder keeps its live data in this same struct (recorder.c), so encoding is a
 * walk over it and decoding rebuilds it on rank 0. */
#ifndef MOE_PROF_RECORD_H
#define MOE_PROF_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moe_proto/hist.h"
#include "moe/phase.h"
#include "moe/status.h"
#include "moe_proto/wire.h"

#define MOE_PROF_MAGIC "MOEP"
#define MOE_PROF_VERSION 2
#define MOE_PROF_MIN_VERSION 1
#define MOE_PROF_HEADER_SIZE 32
#define MOE_PROF_FLAG_FINAL 1u      /* the rank's last record */
#define MOE_PROF_FLAG_WINDOW_END 2u /* the last part of its window */
/* The record stream's messages on the profiler's communicator: a rank's parts to rank 0
 * (record/), and rank 0's note that the report is written (gather/). */
enum { MOE_PROF_TAG_WINDOW = 4401, MOE_PROF_TAG_FINAL = 4402, MOE_PROF_TAG_DONE = 4403 };

typedef struct moe_rec_step {
    int64_t step;
    int64_t begin_ns;                   /* local monotonic clock */
    int64_t phase_ns[MOE_PHASE_COUNT];  /* summed over layers; [MOE_PHASE_STEP] the whole step */
} moe_rec_step_t;

typedef struct moe_rec_exchange {
    int64_t step;
    int32_t layer;
    int32_t pad_;
    int64_t dispatch_begin_ns, dispatch_end_ns, combine_begin_ns, combine_end_ns;
} moe_rec_exchange_t;

/* One recorded layer's latency on this rank: gate begin to merge end (LAYERS section). */
typedef struct moe_rec_lat {
    int64_t step;
    int32_t layer;
    int32_t pad_;
    int64_t ns;
} moe_rec_lat_t;

typedef struct moe_rec_metric {
    int64_t step;
    int32_t layer;
    int32_t local;                      /* column: slot_ids[layer * num_local + local] */
    int64_t tokens;
    int64_t ns;
} moe_rec_metric_t;

typedef struct moe_rec_event {
    int64_t ts_ns;                      /* local clock */
    int64_t dur_ns;
    int32_t kind, layer, id, lane;
    int64_t step;
    int64_t arg;
} moe_rec_event_t;

/* An event's kind (moe_rec_event_t.kind; the report's trace events keep it). */
typedef enum {
    MOE_TEV_PHASE = 0,    /* id = phase (MOE_PHASE_*), layer set; lane "phases" */
    MOE_TEV_EXPERT = 1,   /* one expert call: id = expert id, layer set, arg = rows; lane per
                             local expert */
    MOE_TEV_STEP = 2,     /* id = step; lane "steps" */
    MOE_TEV_EXCHANGE = 3, /* one row exchange in flight: id = MOE_PROF_SPAN_* (0 dispatch,
                             1 combine), layer set, arg = chunk; lane "exchange" */
    MOE_TEV_REBALANCE = 4, /* an online rebalance between steps: id = experts moved,
                              arg = bytes, step = the first step after it; lane "steps" */
} moe_tev_kind_t;

/* Trace lanes of a rank: steps, phases, exchanges, then one per local expert. */
enum {
    MOE_LANE_STEPS = 0,
    MOE_LANE_PHASES = 1,
    MOE_LANE_EXCHANGE = 2,
    MOE_LANE_EXPERT0 = 3, /* + local expert index */
};

typedef struct moe_rec_mem {
    int64_t t_ns;                       /* local clock */
    uint64_t rss_bytes;
    uint64_t dev_bytes;
} moe_rec_mem_t;

typedef struct moe_rec_expert {
    uint64_t tokens;
    uint64_t calls;
    double flops;
    moe_hist_t hist;                    /* ns per (step, layer): busy time, all chunks */
} moe_rec_expert_t;

typedef struct moe_prof_record {
    uint32_t version;
    uint32_t flags;
    int32_t rank, world_size, window;
    char host[64];
    int32_t num_layers, num_experts, num_local;
    int32_t *local_ids;                 /* [num_local] */
    /* [num_layers * num_local]: the expert each (layer, column) of experts[] and of the
     * metrics holds, as the rank ran it (per-layer placement; with online rebalancing one
     * column per expert); -1: unknown (a writer without the SLOTS section: the reader
     * names it from local_ids and the config) */
    int32_t *slot_ids;
    uint64_t expert_weight_bytes, exchange_buffer_bytes;
    double clock_offset_ns, clock_uncertainty_ns, clock_offset_end_ns;
    uint64_t rss_peak, dev_peak;
    int64_t steps_recorded;
    double phase_sum[MOE_PHASE_COUNT], phase_min[MOE_PHASE_COUNT], phase_max[MOE_PHASE_COUNT];
    moe_rec_expert_t *experts;          /* [num_layers * num_local] */
    uint64_t *demand, *kept, *dropped;  /* [num_layers * num_experts], this rank's routing */
    uint64_t *bytes_sent, *bytes_recv, *msgs_sent, *msgs_recv; /* [world_size] */
    double *wait_ns;                    /* [world_size] */
    int64_t num_steps;
    moe_rec_step_t *steps;
    int64_t num_exchanges;
    moe_rec_exchange_t *exchanges;
    int64_t num_metrics;
    moe_rec_metric_t *metrics;
    int64_t metrics_dropped;
    int64_t num_events;
    moe_rec_event_t *events;
    int64_t events_dropped;
    int64_t num_mem;
    moe_rec_mem_t *mem;
    /* OVERLAP (version 2). Per recorded layer, the union of the row exchanges' spans (from
     * each start until this rank saw it complete) and the part of that union during this
     * rank's own expert calls, ns summed over the layers; 0 <= hidden_ns <= exchange_ns. */
    int64_t exchange_ns, hidden_ns;
    int32_t chunks;                     /* runtime.chunks; 0: not recorded (version 1) */
    char device[64];                    /* "cpu" or the GPU's name; "" not recorded */
    /* SHARED (version 2, tag 13): the shared experts this rank ran (a routing rank of a model with
     * shared experts), per layer; zeros when none or not recorded. */
    int64_t *shared_rows;               /* [num_layers] */
    int64_t *shared_ns;                 /* [num_layers] */
    /* CPU (version 2, tag 14): this process's CPU time (every thread, user + system) against
     * wall time. Over the window's recorded steps (summed, each from its begin to its end),
     * and, in the final record, over the whole run (from the first step's begin to the
     * finish); 0: not measured. cpu / wall is the cores the rank kept busy. */
    int64_t cpu_steps_ns, wall_steps_ns;
    int64_t cpu_run_ns, wall_run_ns;
    /* LAYERS (version 2, tag 16): every recorded layer's latency on this rank, in the order
     * they ran (the per-layer percentiles of the report). */
    int64_t num_layer_lat;
    moe_rec_lat_t *layer_lat;
    /* ROWS (version 2, tag 17): dispatch rows this rank sent to / received from each rank
     * over the window's recorded layers (the combine returns as many), and the (token,
     * expert) pairs they carried (runtime.dedup: >= the rows; else equal). */
    uint64_t *rows_sent, *rows_recv, *pairs_sent, *pairs_recv; /* [world_size] */
} moe_prof_record_t;

/* Allocate the fixed-size arrays of a record for these dims (variable-length lists are
 * left NULL with count 0). Returns MOE_ERR_NO_MEMORY on failure (record then freed). */
moe_status_t moe_prof_record_alloc(moe_prof_record_t *rec, int world_size, int num_layers,
                                   int num_experts, int num_local);
void moe_prof_record_free(moe_prof_record_t *rec); /* accepts a zeroed record */

/* Append the encoded record to w. */
void moe_prof_record_encode(const moe_prof_record_t *rec, moe_wbuf_t *w);

/* Decode `len` bytes into *rec (allocating its arrays). On failure *rec is left empty and
 * err says what was wrong and at which byte (MOE_ERR_FORMAT, MOE_ERR_TRUNCATED,
 * MOE_ERR_UNSUPPORTED for a version this build cannot read). */
moe_status_t moe_prof_record_decode(const void *data, size_t len, moe_prof_record_t *rec,
                                    moe_error_t *err);

#endif /* MOE_PROF_RECORD_H */
