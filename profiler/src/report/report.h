/* Part report (profiler/src/report/): the merged report (report.h) and its writers:
 * summary.txt, summary.json, metrics.csv, comm.csv, trace.json, report.html. May include:
 * no other part (and the public headers in moe/). One file of each part's folder opens
 * with such a comment; tests/lint/parts.sh holds every part to its list. */
/* The merged profile on rank 0: what every report writer reads.
 *
 * Filled by merge.c from the records the profiled ranks sent (proto/prof_record.h); the
 * writers (report_*.c) only read it. Times are nanoseconds, sizes bytes, all clock-aligned
 * to rank 0's monotonic clock and made relative to `t0_ns` (the run's first step on rank
 * 0) where they are points in time. Arrays are owned by the report (moe_report_free). */
#ifndef MOE_REPORT_H
#define MOE_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "moe_config/config.h"
#include "moe_prof/prof.h"
#include "moe_proto/hist.h"
#include "moe/phase.h"
#include "moe_proto/prof_record.h"
#include "moe/status.h"

/* Per-step statistics of one quantity: sum over recorded steps and the per-step extremes. */
typedef struct moe_rep_stat {
    double sum;
    double min;
    double max;
    uint64_t n;
} moe_rep_stat_t;

typedef struct moe_rep_mem_sample {
    int64_t t_ns;        /* aligned, relative to t0_ns */
    uint64_t rss_bytes;
    uint64_t dev_bytes;  /* 0 without a device */
} moe_rep_mem_sample_t;

typedef struct moe_rep_rank {
    int rank;
    bool profiled;       /* in profiler.profiled_ranks */
    bool present;        /* its records reached rank 0 (false: lost or not profiled) */
    bool routes;         /* runs the gate for some tokens (the master, or every rank in
                            symmetric routing) */
    char host[64];
    int num_local;       /* experts hosted */
    int64_t steps;       /* recorded steps */
    moe_rep_stat_t phase[MOE_PHASE_COUNT]; /* per recorded step, summed over layers */
    /* The step split four ways (sums over recorded steps). Per exchange and phase (dispatch,
     * combine), from clock-aligned arrivals (the phase's begin): a rank's wait is
     * clamp(last arrival - own arrival, 0, phase length), split in two:
     *   structural_wait = the routing rank's designed wait, not imbalance: in the combine, a
     *              rank hosting no experts waits for the expert ranks to compute; in the
     *              dispatch, a rank routing no tokens waits for the routing ranks' gate.
     *              clamp(mean arrival of the ranks waited for - own arrival, 0, wait); 0
     *              for every other rank, and when none of those ranks is present
     *   idle     = wait - structural_wait: waiting for slower ranks (load imbalance), the
     *              part a perfectly balanced placement would have saved
     *   compute  = gate + expert + merge
     *   exchange = dispatch + combine - idle - structural_wait (moving bytes) */
    double compute_ns;
    double exchange_ns;
    double idle_ns;
    double structural_wait_ns;
    /* The part of compute_ns spent reading expert weights: the busy time of its expert
     * calls (all chunks) and of the shared experts it ran, summed over recorded steps. At
     * decode this is the memory-bound work; the rest of the step is exchange, waiting
     * (idle + structural_wait) and other compute (gate, permute, merge). */
    double weights_ns;
    /* Overlap of exchange and compute (sums over recorded layers; records of version 2):
     *   inflight_ns = per layer, the union of the row exchanges' spans (each from its start
     *                 until this rank saw it complete), whatever phase they fall in
     *   hidden_ns   = the part of inflight_ns during this rank's own expert calls
     * hidden / inflight is the share of exchange time hidden behind compute: 0 by
     * construction with chunks 1. (Not the `exchange_ns` above: that is phase time.) */
    double inflight_ns;
    double hidden_ns;
    int chunks;          /* runtime.chunks as this rank ran it; 0 not recorded */
    /* This process's CPU time (all threads) against wall time, over the recorded steps and
     * over the whole run (first step to finish); 0: not measured (an older record). Their
     * ratio is the cores the rank kept busy: moe_rep_cpu_cores. */
    double cpu_steps_ns, wall_steps_ns;
    double cpu_run_ns, wall_run_ns;
    char device[64];     /* "cpu" or the GPU's name; "" not recorded */
    uint64_t rss_peak;
    uint64_t dev_peak;
    bool peak_known;     /* its last record came (the peaks are read at the sampler's stop):
                          * else the peaks are unknown (a rank lost mid-run) */
    uint64_t expert_weight_bytes;
    uint64_t exchange_buffer_bytes;
    int num_mem;
    moe_rep_mem_sample_t *mem;   /* [num_mem] the sampler's series */
    /* This rank's own count of bytes it sent to / received from each rank [world_size]
     * (zeros when not present). The matrix `bytes` is built from the senders' rows; these
     * let a reader check that i's sent[j] equals j's recv[i]. */
    uint64_t *bytes_sent;
    uint64_t *bytes_recv;
    double clock_offset_ns;      /* this clock minus rank 0's, at start */
    double clock_offset_end_ns;  /* the same at the end */
    double clock_uncertainty_ns; /* half the best round trip */
} moe_rep_rank_t;

typedef struct moe_rep_expert {
    int layer;
    int expert;
    int rank;            /* host rank */
    uint64_t tokens;     /* rows computed over recorded steps; see router_count */
    /* The host rank's records are absent (not profiled, or lost): `tokens` is the routing
     * ranks' count of the choices kept for this expert (moe_rep_layer_t.kept), and calls,
     * flops and hist are unknown (0; the writers print "-" or null, never 0 ms). */
    bool router_count;
    /* The same, but not every routing rank's records came either (demand_unknown): no whole
     * count stands in, so tokens too is unknown (0; "-" or null). */
    bool tokens_unknown;
    uint64_t calls;      /* (recorded step, layer) pairs with rows > 0; with runtime.chunks
                            N the expert's calls of one layer count once */
    double flops;
    moe_hist_t hist;     /* ns per such call: busy time summed over the layer's chunks */
} moe_rep_expert_t;

/* One copy of an expert that has replicas (placement.experts or placement.layers listing
 * it under several ranks): the rows its own rank computed. The expert's row in `experts`
 * sums its copies; the router's counts stay per expert. */
/* One online rebalance (runtime.rebalance_every). */
typedef struct moe_rep_rebalance {
    int64_t step;        /* the first step with the new placement */
    int64_t moved;       /* expert copies moved */
    int64_t bytes;       /* their weights' bytes */
    double seconds;      /* the critical path: reduction, packing, moves and switch of the
                            slowest rank (not rank 0's, which in master routing moves none) */
    int slowest_rank;    /* that rank */
    double before;       /* max / mean of the expert ranks' rows over the window */
    double after;        /* predicted for the new placement */
} moe_rep_rebalance_t;

typedef struct moe_rep_replica {
    int layer;
    int expert;
    int rank;
    uint64_t tokens;     /* rows computed over recorded steps (0 when the rank is absent) */
    uint64_t calls;
    double busy_ns;      /* busy time summed over those calls */
} moe_rep_replica_t;

typedef struct moe_rep_layer {
    uint64_t *demand;    /* [E] choices of each expert, before capacity, all routing ranks */
    uint64_t *kept;      /* [E] */
    uint64_t *dropped;   /* [E] */
    /* demand_unknown: not every routing rank's records came (a routing rank not profiled,
     * or lost; in symmetric routing each rank counts only its own tokens' choices, so a sum
     * over some is dropped, not kept: the three arrays hold 0), so demand and dropped are
     * unknown: the writers print null or "-", never 0. kept is then the rows the experts'
     * hosts computed (= the choices kept) when every host of the layer's experts and copies
     * sent its records; else kept_unknown, and the balance is unknown too. false, false:
     * all three are the routing ranks'. */
    bool demand_unknown;
    bool kept_unknown;
    /* Balance of `kept` over experts (see balance.h); NAN when kept is unknown: */
    double gini;
    double cv;
    double entropy_norm;
    double max_mean;
    /* The shared experts, summed over the routing ranks and recorded steps (0: none). */
    uint64_t shared_rows;
    double shared_ns;
    /* The layer's latency per recorded step: the longest of the present routing ranks'
     * times of it (from its gate's begin to its merge's end: what the layer costs the
     * tokens; every present rank's when no routing rank's record came), one sample per
     * step. */
    moe_hist_t latency;
} moe_rep_layer_t;

/* One row of metrics.csv. */
typedef struct moe_rep_metric {
    int64_t step;
    int layer;
    int expert;
    int rank;
    int64_t tokens;
    int64_t ns;          /* expert compute time that step */
    double flops;
} moe_rep_metric_t;

/* One recorded step of one rank (for the step-time breakdown chart and the trace). */
typedef struct moe_rep_step {
    int64_t step;
    int rank;
    int64_t begin_ns;    /* aligned, relative to t0_ns */
    int64_t phase_ns[MOE_PHASE_COUNT];
} moe_rep_step_t;

/* Trace events, already aligned and relative to t0_ns (kinds and lanes: moe_tev_kind_t,
 * MOE_LANE_* in moe_proto/prof_record.h, as the ranks record them). */
typedef struct moe_rep_event {
    int64_t ts_ns;
    int64_t dur_ns;
    int32_t rank;
    int16_t kind;
    int16_t layer;
    int32_t id;
    int32_t lane;        /* MOE_LANE_*: 0 steps, 1 phases, 2 exchange, 3 + local expert */
    int64_t step;
    int64_t arg;
} moe_rep_event_t;

/* The report's files, in the order they are written: the small summaries first, so a full
 * disk takes the large files, not the ones read first. metrics.csv streams during the run. */
typedef enum {
    MOE_RFILE_SUMMARY_JSON,
    MOE_RFILE_SUMMARY_TXT,
    MOE_RFILE_RANK_SUMMARIES, /* summary_rank_<r>.txt, one state for all */
    MOE_RFILE_CONFIG,
    MOE_RFILE_COMM_CSV,
    MOE_RFILE_METRICS_CSV,
    MOE_RFILE_HTML,
    MOE_RFILE_ROUTING,        /* routing.safetensors (profiler.record_routing; end report) */
    MOE_RFILE_TRACE,
    MOE_RFILE_COUNT
} moe_rfile_t;

typedef enum {
    MOE_RFILE_PENDING = 0, /* not yet written */
    MOE_RFILE_WRITTEN,
    MOE_RFILE_FAILED,      /* why[] says why */
    MOE_RFILE_OFF,         /* not asked for (profiler.trace: false; no routing writer) */
} moe_rfile_state_t;

/* Which files are whole in the run folder; the INCOMPLETE marker and the headline come
 * from it. Owned by whoever made the run folder (the merge), or by moe_report_write_all. */
typedef struct moe_report_files {
    moe_rfile_state_t state[MOE_RFILE_COUNT];
    char why[MOE_RFILE_COUNT][160];
} moe_report_files_t;

#define MOE_REPORT_ROUTING_MAX 5400 /* "replayed PATH (SOURCE)": a trace's path (4096) and its
                                     * own source (MOE_ROUTING_SOURCE_MAX, 1088) */

typedef struct moe_report {
    /* run facts */
    const moe_config_t *cfg;
    const char *config_text;
    size_t config_len;
    char run_dir[MOE_PATH_MAX];  /* <output_dir>/<YYYY-MM-DD__HH-MM-SS>_<hash>[-N] */
    char dir_error[MOE_PATH_MAX + 96]; /* why run_dir could not be made; "" if it was */
    moe_report_files_t *files;   /* NULL: moe_report_write_all keeps its own */
    /* routing.safetensors' writer (the run's end report with profiler.record_routing; NULL:
     * none, the entry is off). It writes the file into run_dir and marks its entry: written
     * (moe_report_file_done), or failed with why (moe_report_file_failed) where it has no
     * routing to write; an error it returns also marks the entry failed. */
    moe_status_t (*routing_write)(const struct moe_report *r, const void *arg, moe_error_t *err);
    const void *routing_arg;
    char started_at[32];         /* ISO-8601 local time */
    char version[32];
    char build_id[48];
    char blas[32];
    char weights[320];           /* where the weights came from, on-disk dtypes, held how ("") */
    char resolved[MOE_PROF_RESOLVED_COUNT][48]; /* moe_prof_static_t .resolved; "" unknown */
    char transport[16];
    int world_size;
    int num_hosts;
    int64_t steps_run;
    int64_t steps_planned;       /* workload.steps or --steps */
    bool interrupted;            /* stopped by a signal before steps_planned */
    int64_t tokens_per_step;
    double run_s;                /* wall time of all steps on rank 0 */
    double tokens_per_s;
    int64_t recorded_steps;      /* steps inside measurement windows */
    /* every present rank's recorded exchanges, and of those the ones some other present
     * rank lacks (a part of its records lost): their waits stay in the exchange, unsplit */
    int64_t exchanges_recorded, exchanges_unsplit;
    bool all_warmup;             /* nothing recorded: every step run was a warm-up step */
    int windows;
    bool partial;                /* some profiled rank's records are missing */
    char missing[512];           /* which and why, in words, when partial */
    double clock_skew_max_ns;    /* largest |offset| of any rank to rank 0 */
    double clock_uncertainty_max_ns;
    double clock_drift_max_ns;   /* largest |end offset - start offset| */
    int chunks;                  /* runtime.chunks (rank 0's; else a present rank's) */
    char device[64];             /* rank 0's device: "cpu" or the GPU's name */
    /* Where the expert choices came from, as rank 0's runtime said (moe_prof_static_t
     * .routing_source): "" or "router" (the gate ran), "replayed FILE (SOURCE)"; read it
     * with moe_report_routing_parse. */
    char routing_source[MOE_REPORT_ROUTING_MAX];

    /* The step's latency per recorded step: the longest of the present routing ranks'
     * step times (as layers[].latency), one sample per step: the percentiles of decode. */
    moe_hist_t step_latency;

    moe_rep_rank_t *ranks;       /* [world_size] */
    int num_layers;
    int num_experts;
    moe_rep_expert_t *experts;   /* [num_layers * num_experts], index l * E + e */
    moe_rep_layer_t *layers;     /* [num_layers] */
    int num_replicas;            /* copies of replicated experts, layer then expert then rank */
    moe_rep_replica_t *replicas; /* [num_replicas] */
    int num_rebalances;          /* online rebalances, in step order */
    moe_rep_rebalance_t *rebalances; /* [num_rebalances] */
    /* rank-to-rank, row = sender i, column = receiver j, [world * world]; both directions
     * of the exchange (dispatch and combine) counted. Filled from the profiled senders'
     * records and, where a sender is not profiled, from the profiled receivers' records. */
    uint64_t *bytes;
    uint64_t *msgs;
    /* rows[i * W + j]: dispatch rows i sent j (the combine returns as many), and pairs: the
     * (token, expert) pairs they carried (runtime.dedup: a row carries every choice of its
     * token on j; else one). Filled like bytes. */
    uint64_t *rows;
    uint64_t *pairs;
    /* wait[i * W + j]: time rank i spent in exchanges until rank j's rows had arrived. */
    double *wait_ns;
    /* idle_for[i * W + j]: the part of rank i's idle_ns (waiting for slower ranks) spent
     * waiting for rank j; a row sums to ranks[i].idle_ns. NULL: not known. */
    double *idle_for_ns;

    int64_t num_metrics;
    moe_rep_metric_t *metrics;
    int64_t metrics_dropped;     /* rows beyond the recorder's bound */
    /* metrics.csv is written row by row while windows merge, so rank 0's memory does not
     * grow with the run; then metrics[] holds only its first rows (for the trace's token
     * counters) and the csv writer leaves the file alone. */
    bool metrics_streamed;
    int64_t metrics_rows;        /* rows in metrics.csv */
    /* Rows that are not in metrics.csv although recorded: over profiler.metrics_max_mb, or
     * a write failed (then the file holds whole rows up to there and streaming stopped). */
    int64_t metrics_lost;
    int64_t metrics_stop_step;   /* the first step with a row not written; -1 if none */
    bool metrics_write_failed;   /* stopped by a failed write (an error), not the bound */
    char metrics_stop_why[160];  /* "No space left on device", "profiler.metrics_max_mb ..." */
    int64_t num_steps;
    moe_rep_step_t *steps;
    int64_t num_events;
    moe_rep_event_t *events;
    int64_t events_dropped;      /* beyond profiler.trace_max_events */
} moe_report_t;

void moe_report_free(moe_report_t *r); /* accepts NULL; frees arrays, not cfg/config_text */

#define MOE_REPORT_TOP_DROPS 3 /* experts named in the drops finding */
/* A straggler is named only from this ratio of its expert time to the mean expert time of
 * the ranks with experts (moe_report_expert_per_step_ns): below it, the spread is noise (a
 * balanced job measures 1.0x to 1.07x). */
#define MOE_STRAGGLER_MIN_RATIO 1.10

/* Findings a person reads first (summary.txt, report.html, summary.json). */
typedef struct moe_report_findings {
    /* The hottest expert: most demand (choices before the capacity limit, the routing
     * ranks' counts), so an expert whose overflow was dropped still shows how hot it was;
     * most tokens computed when no demand was recorded (hot_by_demand false). */
    int hot_layer, hot_expert;
    bool hot_by_demand;
    double hot_share;                /* its demand / mean demand of the layer (or tokens) */
    uint64_t hot_demand, hot_kept, hot_dropped;
    /* Capacity drops over all layers: dropped / demand (NAN when no demand was recorded),
     * and the experts that dropped most, most first (num_drops of them, dropped > 0). */
    uint64_t demand_total, dropped_total;
    /* The routing counts are unknown (moe_rep_layer_t.demand_unknown): demand_total,
     * dropped_total, hot_demand and hot_dropped hold 0, which the writers show as null. */
    bool demand_unknown;
    double drop_share;
    int num_drops;
    int drop_layer[MOE_REPORT_TOP_DROPS], drop_expert[MOE_REPORT_TOP_DROPS];
    uint64_t drop_count[MOE_REPORT_TOP_DROPS], drop_demand[MOE_REPORT_TOP_DROPS];
    int slow_layer, slow_expert;     /* lowest GFLOP/s (= most ns per token) among experts
                                        that ran; not the busiest one, the slowest one */
    double slow_gflops;
    double slow_vs_median;           /* its GFLOP/s / median expert GFLOP/s */
    double slow_p99_ns;
    /* The rank with experts with the most expert time per step
     * (moe_report_expert_per_step_ns), named only when it is at least
     * MOE_STRAGGLER_MIN_RATIO times the mean of the ranks with experts; else -1. */
    int straggler_rank;
    double straggler_ratio;          /* the largest expert time / that mean (also when none
                                        is named: "within 1.03x"); 0 with no rank to compare */
    int straggler_n;                 /* ranks with experts compared */
    /* Shares of step time, averaged over the present ranks (each rank's sum over its
     * recorded steps divided by its step time): */
    double exchange_share;           /* moving bytes (exchange) */
    double idle_share;               /* waiting in an exchange for slower ranks (idle:
                                        imbalance only) */
    double structural_wait_share;    /* the designed wait (structural_wait_ns), apart */
    /* NULL, or why exchange_share includes waiting: a present rank's designed wait could
     * not be told apart, none of the ranks it waits for being present ("expert ranks not
     * profiled": the routing rank waits in the combine for ranks with experts; "routing
     * ranks not profiled": a rank routing no tokens waits in the dispatch for the gate;
     * "... records missing" where those ranks were profiled but lost). Static text. */
    const char *exchange_wait_unknown;
    /* The largest idle of one present rank for one other (idle_for_ns) as a share of that
     * rank's step time: rank idle_most_rank waited idle_most_share of its step for rank
     * idle_most_for; -1 (share 0) when no rank was idle. */
    int idle_most_rank, idle_most_for;
    double idle_most_share;
    /* Share of exchange time hidden behind expert compute: sum of hidden_ns over sum of
     * inflight_ns, present ranks; NAN when no exchange was recorded (older records). */
    double hidden_share;
} moe_report_findings_t;
/* The byte matrix split in two: bytes between ranks (off the diagonal: rows sent to another
 * rank) and local copies (the diagonal: a rank's rows to its own experts, which never leave
 * it: the master hosting experts, every rank in symmetric routing). between + local is the
 * matrix total. Both 0 without a matrix. */
typedef struct moe_report_bytes {
    uint64_t between_ranks;
    uint64_t local;
} moe_report_bytes_t;
moe_report_bytes_t moe_report_bytes_split(const moe_report_t *r);
/* The dispatch rows and the (token, expert) pairs they carried, split the same way. */
typedef struct moe_report_rows {
    uint64_t rows_between_ranks, pairs_between_ranks;
    uint64_t rows_local, pairs_local;
} moe_report_rows_t;
moe_report_rows_t moe_report_rows_split(const moe_report_t *r);
/* The same for one rank: what it sent to / received from other ranks, and its diagonal. */
typedef struct moe_report_rank_bytes {
    uint64_t sent;
    uint64_t recv;
    uint64_t local;
} moe_report_rank_bytes_t;
moe_report_rank_bytes_t moe_report_rank_bytes(const moe_report_t *r, int rank);
/* wait_ns[i][j] in ms, or NAN where unknown: no matrix, or rank i's records did not come
 * (not profiled, or lost): its waits were never measured, which is not 0 ms. */
double moe_report_wait_ms(const moe_report_t *r, int i, int j);
/* Ranks whose records carry recorded steps (the "recorded on N ranks" of the headline). */
int moe_report_ranks_recorded(const moe_report_t *r);
/* hidden / inflight of one rank, NAN when it recorded no exchange. */
double moe_report_hidden_share(const moe_rep_rank_t *k);
/* CPU time over wall time of one rank (the cores it kept busy), over its recorded steps or
 * (whole_run) over the whole run; NAN when not measured (absent, or an older record). */
double moe_report_cpu_cores(const moe_rep_rank_t *k, bool whole_run);
void moe_report_find(const moe_report_t *r, moe_report_findings_t *f);
/* A rank's expert phase per recorded step (its experts' calls and the phase around them):
 * what a placement moves, where its compute (gate + expert + merge) also holds a routing
 * rank's gate and merge, which no placement changes. 0 without recorded steps. The phase
 * also holds what runs in it besides the calls: with runtime.chunks > 1 the waits for later
 * chunks' rows, and in a layer where the rank hosts no expert (placement.layers) the shared
 * experts it runs for its tokens. */
double moe_report_expert_per_step_ns(const moe_rep_rank_t *k);
/* The findings' wording shared by the headline and summary.txt, without a newline:
 * "straggler: rank 2, 1.50x the mean expert time of the ranks with experts (named from
 * 1.10x)" or "no straggler (ranks with experts within 1.03x of their mean expert time;
 * named from 1.10x)"; and "0.7% of step time moving bytes, 2.1% waiting for slower ranks
 * (most: rank 2 waiting for rank 1, 4.0% of its step; routing rank's designed wait: 31.0%,
 * not imbalance)" (each part of the parenthesis only when there is one). */
void moe_report_print_straggler(const moe_report_findings_t *f, FILE *out);
/* (exchange_wait_unknown set: "45.0% of step time in the exchange (incl. waiting; expert
 * ranks not profiled), ..." instead of "moving bytes".) */
void moe_report_print_waits(const moe_report_findings_t *f, FILE *out);

/* ---- the routing (report_routing.c) ------------------------------------------------ */

/* A routing source read: kind "router" (NULL, "" and "router"), "replayed", or the first
 * word of any other text; for "replayed FILE (SOURCE)" the file and the trace's own source
 * (the last parenthesis, nested ones kept: "" when there is none). */
typedef struct moe_report_routing_src {
    char kind[32];
    char file[MOE_REPORT_ROUTING_MAX];
    char trace_source[MOE_REPORT_ROUTING_MAX];
    const char *detail;          /* the text as given ("router" for NULL or "") */
} moe_report_routing_src_t;
void moe_report_routing_parse(const char *text, moe_report_routing_src_t *out);

/* The shape of one layer's routing from its demand (the routing ranks' choices of each
 * expert before the capacity limit): hottest = most choices (the lowest id on a tie). With
 * no choice recorded: choices 0, hottest_expert -1 and the figures NAN. */
typedef struct moe_report_layer_routing {
    uint64_t choices;            /* sum of the counts */
    int hottest_expert;
    uint64_t hottest_count;
    double hottest_share;        /* hottest_count / choices */
    double max_mean;             /* hottest_count / (choices / n) */
    double entropy_bits;         /* -sum p log2 p over the n experts, p = count / choices */
    double entropy_norm;         /* entropy_bits / log2(n): 1 even, 0 one expert; NAN n < 2 */
} moe_report_layer_routing_t;
void moe_report_routing_counts(const uint64_t *counts, int n, moe_report_layer_routing_t *out);
void moe_report_layer_routing(const moe_report_t *r, int layer, moe_report_layer_routing_t *out);

/* The same over the run: sums and means over the layers with a choice recorded (NAN and
 * min_layer -1 when none has). */
typedef struct moe_report_run_routing {
    uint64_t choices;
    bool choices_unknown;        /* some layer's demand is unknown: choices is not its sum */
    int layers_with_choices;
    double hottest_share_mean;
    double entropy_bits_mean, entropy_norm_mean;
    double entropy_norm_min;     /* the least even layer's */
    int entropy_norm_min_layer;
} moe_report_run_routing_t;
void moe_report_run_routing(const moe_report_t *r, moe_report_run_routing_t *out);

/* One (layer, expert) among the hottest: share = its demand / its layer's choices, x_mean =
 * its demand / its layer's mean per expert (share * E). */
typedef struct moe_report_hot {
    int layer, expert;
    uint64_t demand, kept, dropped;
    double share, x_mean;
} moe_report_hot_t;
/* The (up to) n hottest (layer, expert) pairs by share of their layer's choices, most
 * first (ties: the lower layer, then the lower expert); pairs with no demand are left out.
 * Returns how many were written to out[n]. */
int moe_report_hottest(const moe_report_t *r, moe_report_hot_t *out, int n);
/* Within `layer`, the (up to) n experts with the most demand, most first: the same order. */
int moe_report_layer_hottest(const moe_report_t *r, int layer, moe_report_hot_t *out, int n);

/* report.html draws the full heat maps (a cell per layer and expert) up to this many cells;
 * past it, the hottest pairs' table and a strip per layer instead (docs/profiler.md). */
#define MOE_REPORT_HEATMAP_MAX_CELLS 1024
#define MOE_REPORT_TOP_HOT 20        /* pairs in report.html's table of the hottest */
#define MOE_REPORT_TOP_HOT_JSON 10   /* in summary.json's routing.top */
#define MOE_REPORT_TOP_HOT_TEXT 5    /* in summary.txt's "Hottest experts" */
#define MOE_REPORT_STRIP_EXPERTS 8   /* a layer's hottest experts in its strip */

/* Writers: each writes one file into r->run_dir; err names the file on failure. */
moe_status_t moe_report_write_config(const moe_report_t *r, moe_error_t *err);   /* config.yaml */
moe_status_t moe_report_write_summary(const moe_report_t *r, moe_error_t *err);  /* summary.txt */
moe_status_t moe_report_write_rank_summaries(const moe_report_t *r, moe_error_t *err); /* summary_rank_<r>.txt */
moe_status_t moe_report_write_json(const moe_report_t *r, moe_error_t *err);     /* summary.json */
moe_status_t moe_report_write_csv(const moe_report_t *r, moe_error_t *err);      /* metrics.csv, comm.csv */
moe_status_t moe_report_write_trace(const moe_report_t *r, moe_error_t *err);    /* trace.json */
moe_status_t moe_report_write_html(const moe_report_t *r, moe_error_t *err);     /* report.html */
/* All of the above (trace only if profiler.trace), in report_write.c. */
moe_status_t moe_report_write_all(const moe_report_t *r, moe_error_t *err);
/* For the writers: open <run_dir>/<name> for writing (NULL and err set on failure), and
 * close it (MOE_ERR_IO naming the file if anything did not reach the disk). */
FILE *moe_report_open(const moe_report_t *r, const char *name, moe_error_t *err);
moe_status_t moe_report_close(FILE *f, const moe_report_t *r, const char *name, moe_error_t *err);

/* metrics.csv's header line and one row, shared by the streaming merge and the writer.
 * moe_report_metrics_format: the row into buf[n]; its length, or -1 if it does not fit. */
extern const char moe_report_metrics_header[];
void moe_report_metrics_row(FILE *f, const moe_rep_metric_t *m);
int moe_report_metrics_format(char *buf, size_t n, const moe_rep_metric_t *m);

/* The report's files and the INCOMPLETE marker (report.c). */
const char *moe_report_file_name(moe_rfile_t which);
void moe_report_files_init(moe_report_files_t *t, const moe_config_t *cfg);
void moe_report_file_done(const moe_report_t *r, moe_rfile_t which, int errnum);
/* Mark `which` not written, with why (a writer with nothing it could write). */
void moe_report_file_failed(const moe_report_t *r, moe_rfile_t which, const char *why);
/* Mark `which` not asked for after all (a writer with nothing to write, nothing lost). */
void moe_report_file_off(const moe_report_t *r, moe_rfile_t which);
/* Write <run_dir>/INCOMPLETE: every file not written, and why. */
void moe_report_mark_incomplete(const moe_report_t *r);
/* Room kept on the disk for the small files that must come last: <run_dir>/.reserve of
 * `bytes` (allocated, best effort), and given back. */
#define MOE_REPORT_RESERVE ".reserve"
void moe_report_reserve(const moe_report_t *r, int64_t bytes);
void moe_report_unreserve(const moe_report_t *r);
/* Whether the report lacks anything: a file not written, or metrics rows a write lost. */
bool moe_report_incomplete(const moe_report_t *r);

/* The line INCOMPLETE and run.files_not_written give a metrics.csv that was written but
 * stopped by a failed write (rows lost from a step on); false (line untouched) otherwise. */
bool moe_report_metrics_cut_line(const moe_report_t *r, char *line, size_t size);

/* The headline lines printed at the end of a run (to `out`). */
void moe_report_print_headline(const moe_report_t *r, FILE *out);

/* `moed compare DIR_A DIR_B`: reads both summary.json files, prints side by side. Returns
 * 0 (also when both name one folder: it says so), or 2 when a folder is missing, unreadable
 * or not a moed report folder (message on stderr). */
int moe_report_compare(const char *dir_a, const char *dir_b, FILE *out);
/* The command line after "compare": --help, or two folders; the same exit codes (2 also
 * for bad arguments). */
int moe_report_compare_main(int argc, char **argv, FILE *out);

#endif /* MOE_REPORT_H */
