/* The profiler embedded in every rank.
 *
 * Lifecycle:
 *   moe_prof_create   (collective) duplicate the communicator, estimate clock offsets to
 *                     rank 0, start the memory sampler thread
 *   per step:         moe_prof_step_begin (local) -> moe_prof_layer per layer (local, hot
 *                     path) -> moe_prof_step_end: at the end of a window each profiled
 *                     rank sends its record to rank 0 (point to point, not waited for);
 *                     rank 0 waits for them and merges
 *   moe_prof_finish   (no collective but the end's clock sync after a normal run) last
 *                     records to rank 0, which waits for them at most run->deadline_s and
 *                     writes the report folder, partial if some are missing; works after
 *                     a signal or with a rank gone
 *   moe_prof_destroy  local
 *
 * A step's per-layer figures count only once the step completes: a step abandoned by a
 * stop leaves the window as it was when the step began. Every wait on a peer is polled
 * (moe/poll.h) against runtime.step_timeout_s; one that lasts it fires the watchdog
 * (moe/watchdog.h): MOE_ERR_TIMEOUT with a message naming the ranks that do not answer.
 *
 * Hot path (moe_prof_layer, moe_prof_step_end outside a window end): reads clocks already
 * taken by the runtime and writes into storage allocated at create; no lock, no
 * allocation, no system call but one per recorded step (the process's CPU time, read at
 * its begin and end: the rank's CPU share). With profiler.enabled false the runtime never
 * calls it. */
#ifndef MOE_PROF_H
#define MOE_PROF_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "moe_config/config.h"
#include "moe/status.h"

typedef struct moe_prof moe_prof_t;

/* What the runtime tells the profiler once, at create. */
/* The keys of summary.json's config_resolved (docs/report-files.md), in its order. */
typedef enum {
    MOE_PROF_RESOLVED_DTYPE = 0,         /* model.dtype: "bf16", "bf16+f32" where ranks differ */
    MOE_PROF_RESOLVED_SHARED_FFN_DIM,    /* model.shared_ffn_dim: the shared experts' width */
    MOE_PROF_RESOLVED_COMPUTE_DTYPE,     /* runtime.compute_dtype */
    MOE_PROF_RESOLVED_WIRE_DTYPE,        /* runtime.wire_dtype */
    MOE_PROF_RESOLVED_SMALL_BATCH_ROWS,  /* runtime.small_batch_rows: "64", "32-64" */
    MOE_PROF_RESOLVED_BIND,              /* runtime.bind: none, experts or core */
    MOE_PROF_RESOLVED_DEDUP,             /* runtime.dedup: true or false */
    MOE_PROF_RESOLVED_EXPERT_HISTOGRAMS, /* profiler.expert_histograms: expert or layer */
    MOE_PROF_RESOLVED_COUNT
} moe_prof_resolved_t;

typedef struct moe_prof_static {
    int num_local;                  /* experts this rank hosts */
    const int32_t *local_ids;       /* [num_local] ascending */
    uint64_t expert_weight_bytes;
    uint64_t exchange_buffer_bytes;
    int64_t total_steps;            /* steps the run will take (bounds storage) */
    int64_t row_bytes;              /* bytes of one token row on the wire */
    double flops_per_row;           /* expert FFN FLOPs per token row */
    const char *transport;          /* "mpi" */
    const char *blas;
    const char *weights;            /* rank 0's: where the weights came from and their on-disk
                                       dtypes, "deepseek_v3 (F8_E4M3+F32)"; must outlive the
                                       profiler */
    /* rank 0's values of the keys summary.json's "config" keeps as written (`auto`, -1, 0:
     * moe_prof_resolved_t), as the run resolved them ("bf16", "true", "64"); NULL or "":
     * unknown. Each must outlive the profiler. */
    const char *resolved[MOE_PROF_RESOLVED_COUNT];
    const char (*hosts)[64];        /* [world] every rank's host (read during create only) */
    const char *device;             /* "cpu" or the GPU's name ("NVIDIA H200") */
    int chunks;                     /* runtime.chunks */
    /* Where the routing came from: "router" (the gate ran), "replayed FILE" (workload.routing),
     * with the trace's own source after it ("replayed t.safetensors (vLLM routed_experts)");
     * must outlive the profiler. NULL: "router". */
    const char *routing_source;
    int64_t token_first;            /* this rank's routed tokens in a step's global order */
    int64_t token_count;            /* (0: it routes none) */
    /* Device memory in use and its peak (bytes), or NULL on the CPU; called from the
     * memory sampler's thread, so it must be thread-safe. */
    void (*device_memory)(uint64_t *current, uint64_t *peak);
    /* The run's config text as read (NULL: none): the live path's window folders copy it
     * into config.yaml (its control token redacted); read during create only. */
    const char *config_text;
    size_t config_len;
    /* A window folder of the schedule written or not (a run without end; rank 0): called
     * with the window's number, its name under profiler.output_dir ("RUN/window-3"), its
     * path, and error NULL when written, else why not (already on stderr). NULL: none. The
     * runtime gives moe_live_folder_written, so /status lists it or says why not. */
    void (*folder_written)(void *arg, int64_t window, const char *name, const char *dir,
                           const char *error);
    void *folder_arg;
} moe_prof_static_t;

/* One layer of one step as the runtime saw it; every time is the runtime's own monotonic
 * ns. Pointers are valid only during the call. */
/* One expert call: with runtime.chunks N an expert runs once per chunk that holds rows
 * for it, so a layer has up to N * num_local calls. */
typedef struct moe_prof_call {
    int32_t local;                  /* index into local_ids */
    int32_t chunk;
    int64_t rows;
    int64_t begin_ns, end_ns;
} moe_prof_call_t;

/* One row exchange in flight: from its start until this rank saw it complete. */
typedef enum { MOE_PROF_SPAN_DISPATCH = 0, MOE_PROF_SPAN_COMBINE = 1 } moe_prof_span_kind_t;
typedef struct moe_prof_span {
    int32_t kind;                   /* moe_prof_span_kind_t */
    int32_t chunk;
    int64_t begin_ns, end_ns;
} moe_prof_span_t;

typedef struct moe_prof_layer_sample {
    int layer;
    /* Consecutive spans that tile the layer: gate, dispatch (counts, permute, until the
     * first chunk's rows are in), expert (until the last chunk is computed), combine
     * (until the last rows are back), merge. With chunks > 1 the expert span also holds
     * later chunks' dispatches and earlier chunks' combines: see spans and calls. */
    const int64_t *phase_begin_ns;  /* [5]: gate dispatch expert combine merge */
    const int64_t *phase_end_ns;    /* [5] */
    const int64_t *expert_rows;     /* [num_local] rows over all chunks */
    const int64_t *expert_ns;       /* [num_local] busy time over all chunks */
    int num_calls;
    const moe_prof_call_t *calls;   /* [num_calls <= chunks * num_local] in the order they
                                       ran */
    int num_spans;
    const moe_prof_span_t *spans;   /* [num_spans <= 2 * chunks]: every exchange of the
                                       layer (the profiler counts no more than that) */
    const int32_t *demand;          /* [E] this rank's choices per expert, before capacity */
    const int32_t *kept;            /* [E] */
    const int32_t *dropped;         /* [E] */
    /* The layer's placement as it ran (per-layer placement, replicas, online rebalancing):
     * its copies of experts, sorted by expert then rank; slot_rows: rows this rank routed
     * to each copy. local_experts: the expert of each of this rank's local slots (the
     * le-th copy on this rank), the index of expert_rows, expert_ns and calls[].local. */
    int num_local_experts;
    const int32_t *local_experts;   /* [num_local_experts] */
    int num_slots;
    const moe_cfg_replica_t *slots; /* [num_slots] */
    const int32_t *slot_rows;       /* [num_slots] */
    const int *send_rows;           /* [world] dispatch rows to each rank (combine: back) */
    const int *recv_rows;           /* [world] dispatch rows from each rank */
    /* The (token, expert) pairs those rows carried: with runtime.dedup a row carries every
     * choice of its token on the receiving rank (>= 1 pair a row), else one (= the rows);
     * NULL: one pair a row. */
    const int *send_pairs;          /* [world] */
    const int *recv_pairs;          /* [world] */
    const int64_t *peer_wait_ns;    /* [world] waited for each peer's rows, summed over the
                                       layer's exchanges (from each start to arrival) */
    int64_t shared_rows;            /* rows the shared experts ran over here (0: none) */
    int64_t shared_begin_ns, shared_end_ns;
    /* The routing of this rank's tokens (static token_count of them) as merged:
     * [token_count, top_k] logical expert ids and weights, for profiler.record_routing;
     * NULL when the rank routes none. */
    const int32_t *topk_ids;
    const float *topk_weights;
} moe_prof_layer_sample_t;

/* Run facts rank 0 puts in the report at finish. */
typedef struct moe_prof_run {
    int64_t steps_run;
    int64_t steps_planned;
    double run_s;                   /* wall time of all steps */
    const char *config_text;
    size_t config_len;
    bool interrupted;               /* stopped by a signal: steps_run < steps_planned */
    double deadline_s;              /* how long rank 0 waits for the last records */
    const char *missing_why;        /* why a rank's last record may not come (NULL: lost) */
    bool job_steps;                 /* steps_run are the job's completed steps 0.., on the
                                       schedule: recorded_steps counts no later step, which
                                       a rank may have ended alone before a fault */
    int64_t job_recorded;           /* with job_steps: of them, the recorded ones (set by
                                       moe_prof_finish) */
} moe_prof_run_t;

/* One online rebalance (runtime.rebalance_every), the same figures on every rank but
 * begin_ns and end_ns (this rank's). */
typedef struct moe_prof_rebalance {
    int64_t step;                   /* the first step run with the new placement */
    int64_t moved;                  /* expert copies moved to a rank that lacked them */
    int64_t bytes;                  /* their weights' bytes */
    int64_t begin_ns, end_ns;       /* reduction, packing, moves and switch on this rank,
                                       until the slowest rank had finished its own */
    int64_t critical_ns;            /* the critical path: the slowest rank's (rebalance.h) */
    int32_t slowest_rank;           /* that rank */
    double before;                  /* max / mean of expert ranks' rows over the window */
    double after;                   /* predicted for the new placement */
} moe_prof_rebalance_t;

moe_status_t moe_prof_create(const moe_config_t *cfg, MPI_Comm comm,
                             const moe_prof_static_t *info, moe_prof_t **out, moe_error_t *err);
void moe_prof_destroy(moe_prof_t *p); /* accepts NULL; stops the sampler */
/* CPU time of the profiler's own threads so far (the memory sampler), ns; 0 for NULL. */
int64_t moe_prof_threads_cpu_ns(const moe_prof_t *p);

void moe_prof_step_begin(moe_prof_t *p, int64_t step);
void moe_prof_layer(moe_prof_t *p, const moe_prof_layer_sample_t *s);
/* Between steps, after a rebalance: a trace span on every rank (with profiler.trace), and
 * on rank 0 a row of the report's rebalances (summary.txt, summary.json). */
void moe_prof_rebalance(moe_prof_t *p, const moe_prof_rebalance_t *r);
/* Every rank at every step: cheap unless the step closes a window. MOE_ERR_INTERRUPTED
 * when a stop request came while rank 0 waited for records (they are kept for finish). */
moe_status_t moe_prof_step_end(moe_prof_t *p, int64_t step, int64_t begin_ns, int64_t end_ns,
                               moe_error_t *err);
/* On rank 0 writes the report; run_dir receives its path (may be NULL). Called once the
 * run has ended (normally or not) on every rank that is still alive. After a normal run, a
 * rank that does not answer in the clock sync, or whose last record does not come within
 * run->deadline_s, is the watchdog's: rank 0 writes the report (partial) first, then
 * returns MOE_ERR_TIMEOUT with the message; the caller ends the job. */
moe_status_t moe_prof_finish(moe_prof_t *p, const moe_prof_run_t *run, char *run_dir,
                             size_t run_dir_len, moe_error_t *err);

/* The measurement schedule as a pure function (unit-tested): warmup_steps, then windows of
 * measurement_steps separated by wait_steps, `repeat` windows (0: no end). Returns the
 * window index of `step`, or -1 when it lies in the warm-up, a wait or past the last
 * window. *recorded: inside a window and on the sampling grid (every sampling_rate-th step
 * of the window, starting with its first). *closes: the last step of its window. */
int64_t moe_prof_schedule(const moe_config_t *cfg, int64_t step, bool *recorded, bool *closes);
/* How many of steps 0..steps-1 the schedule records. */
int64_t moe_prof_schedule_recorded(const moe_config_t *cfg, int64_t steps);

/* Clock offset estimation: one ping-pong series between rank 0 and every other rank;
 * (used at start, collective; at the end of a run that was not interrupted)
 * offset[r] = clock_r - clock_0, uncertainty[r] = half the smallest round trip. Arrays of
 * world size, filled on rank 0 (others get their own entry). Collective. A failed MPI call
 * returns MOE_ERR_MPI with its line in err (logged when err is NULL). Non-blocking and
 * polled: after timeout_s (<= 0: none) MOE_ERR_TIMEOUT (err not set) with *waited_on the
 * rank it was waiting for (-1: a collective, all ranks); on a stop MOE_ERR_INTERRUPTED. */
moe_status_t moe_prof_clock_sync(MPI_Comm comm, int rounds, double timeout_s, double *offset_ns,
                                 double *uncertainty_ns, int *waited_on, moe_error_t *err);

/* `moed compare ARGS...` (argv after "compare"): --help, or two folders; exit code as above,
 * 2 also for bad arguments. */
int moe_prof_compare_main(int argc, char **argv, FILE *out);

/* `moed plan REPORT_DIR --ranks N ...`: a balanced placement (with replicas) for the loads
 * a report recorded or a routing trace holds (--routing), written as a config; or the check
 * of a replay against that plan (--check RUN_DIR). Exit codes: 0, 1 (cannot write; --check:
 * the run differs from the prediction), 2 (usage, bad input: nothing written). */
int moe_prof_plan_main(int argc, char **argv, FILE *out);

/* The live path (profiler.listen; docs/live.md). Every rank keeps small
 * cumulative counters and sends them to rank 0 at step boundaries (one non-blocking
 * message at most every 200 ms); rank 0 serves them over HTTP from its own threads.
 * On-demand windows (POST /profile) record with a second recorder of the profiler's own
 * kind, which records nothing outside a window. Independent of profiler.enabled. */
typedef struct moe_live moe_live_t;
/* Collective. routes: this rank routes tokens (its router counts are the expert token
 * counts). info: as for moe_prof_create (read during create; its strings must outlive
 * the live path). Rank 0 starts the HTTP server and prints its URL. */
moe_status_t moe_live_create(const moe_config_t *cfg, MPI_Comm comm, bool routes,
                             const moe_prof_static_t *info, moe_live_t **out,
                             moe_error_t *err);
/* Before every step: a window's recorder starts its step (a compare outside a window). */
void moe_live_step_begin(moe_live_t *lv, int64_t step);
/* Hot path, per layer: adds to counters; no lock, no allocation, no system call. */
void moe_live_layer(moe_live_t *lv, const moe_prof_layer_sample_t *s);
/* Every step: bumps counters; may start one MPI_Isend; rank 0 also takes what arrived. */
void moe_live_step_end(moe_live_t *lv, int64_t step, int64_t begin_ns, int64_t end_ns);
/* The run was stopped (every rank, before the end report): a window open is closed at the
 * last completed step, its records gathered on rank 0 (within 0.4 s) and its folder, marked
 * partial, written by a thread while the end report is (finish joins it). Accepts NULL. */
void moe_live_stopped(moe_live_t *lv);
/* The watchdog ends the job (no gathering is possible any more): rank 0 says that a window
 * asked for or open is not written, and why, on stderr and in /status's last_error.
 * Accepts NULL; other ranks do nothing. */
void moe_live_abandon(moe_live_t *lv, const char *why);
/* After the run: last counters to rank 0 (bounded wait); after a stop, nothing is sent.
 * Accepts NULL. The HTTP server keeps answering until destroy. */
void moe_live_finish(moe_live_t *lv, bool interrupted);
void moe_live_destroy(moe_live_t *lv); /* accepts NULL */
/* A report folder the profiler's schedule wrote while the run goes on (a run without end's
 * window-N), as moe_prof_static_t.folder_written gives it: its name under
 * profiler.output_dir joins /status's reports, or error (not NULL: it was not written) sets
 * last_error, as an on-demand window's does. Any thread; accepts NULL (and does nothing on
 * other ranks than 0). */
void moe_live_folder_written(moe_live_t *lv, int64_t window, const char *name, const char *dir,
                             const char *error);
/* CPU time of the live path's threads so far, ns: HTTP handlers and window writers (rank
 * 0), a window recorder's sampler if it has one; 0 for NULL. */
int64_t moe_live_threads_cpu_ns(const moe_live_t *lv);
/* profiler.listen as the live path will take it: HOST:PORT that resolves, and a port this
 * host lets a program listen on now (bound and released at once). 0, or -1 with why
 * ("expected HOST:PORT ...", the resolver's or the system's reason). For the checks before
 * the run (runtime/src/app/preflight.c): no folder is made before the endpoint could start. */
int moe_live_listen_check(const char *listen, char *why, size_t why_len);
/* The live endpoint's control token: MOED_CONTROL_TOKEN when set and not empty (it must
 * have MOE_CFG_TOKEN_MIN bytes or more: else MOE_ERR_CONFIG), else profiler.control_token
 * (checked when the config was parsed). Read by the run's endpoint and by the checks before
 * the run. */
moe_status_t moe_live_control_token(const moe_config_t *cfg, const char **out,
                                    moe_error_t *err);
/* `moed top URL [--once]`: exit 0, 1 when the endpoint cannot be read, 2 bad arguments. */
int moe_live_top_main(int argc, char **argv, FILE *out);

#endif /* MOE_PROF_H */
