/* The engine: everything one rank needs to run the configured steps. Creating it is
 * collective over the communicator and either succeeds on every rank or fails on every
 * rank with the same error (moe_agree). */
#ifndef MOE_ENGINE_H
#define MOE_ENGINE_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "moe_config/config.h"
#include "moe_prof/prof.h"
#include "moe/status.h"
#include "app/replay.h"
#include "layer/moe_layer.h"
#include "layer/rebalance.h"
#include "transport/transport.h"
#include "model/weights.h"

typedef struct moe_engine moe_engine_t;

/* Fields, in groups (the libuv way: other files hold the pointer and read, only engine.c
 * writes). "public, read-only" fields other files (main.c, selfbench.c) may read; handles
 * among them (transport, layer, prof, live, plugin) are used through their own functions
 * (moe_transport_name, moe_layer_plan, moe_prof_*, ...), never by their fields. The one
 * setting another file makes goes through a setter (moe_engine_set_profiler_ab). "private"
 * fields are engine.c's only. */
struct moe_engine {
    /* public, read-only to others: who and where */
    const moe_config_t *cfg;
    MPI_Comm comm;
    int rank, world_size;
    char (*hosts)[64];     /* [world] host of every rank, for messages */
    char device_name[64];  /* "cpu" or the GPU's name */
    char bind_desc[128];   /* "3 ranks on 2 CPUs here, pinned (runtime.bind auto)" or "" */

    /* public, read-only to others: device and part handles (call their functions) */
    moe_weights_t weights;
    moe_transport_t *transport;
    moe_layer_ctx_t layer;
    const moe_plugin_t *plugin; /* the CUDA plug-in (runtime.device: cuda), else NULL */
    void *cuda;            /* the plug-in's context on this rank's GPU */
    moe_prof_t *prof;      /* NULL when profiler.enabled is false */
    moe_live_t *live;      /* NULL when profiler.listen is off */

    /* public, read-only to others: run totals over the run (every step), for the end
     * summary and --bench */
    int64_t steps_done;
    int64_t steps_planned; /* of the last moe_engine_run */
    int64_t phase_ns[MOE_PHASE_LAYER_COUNT];
    int64_t expert_ns;
    double expert_flops;
    int64_t expert_calls;
    int64_t expert_rows;
    int64_t rows_sent;     /* dispatch rows, all layers and steps */
    int64_t dropped;
    int64_t run_ns;        /* first step begin to last step end (between barriers) */
    int64_t steps_ns;      /* first step begin to the end of the last completed step */
    int64_t run_cpu_ns;    /* this process's CPU time (all threads) over run_ns */
    int64_t live_ns;       /* time inside the live path's hooks (also counted in prof_ns) */
    int64_t prof_ns;       /* time spent inside the profiler's per-step hooks */

    /* public, read-only to others: the A/B state. --profiler-ab K (0: off;
     * moe_engine_set_profiler_ab): blocks of K steps alternate with the profiler's and the
     * live path's hooks on and off, in pairs on-off, off-on, on-off, ... The hooks see the
     * on blocks' steps only, numbered 0, 1, ... as in a run of those steps alone. */
    int64_t ab_steps;
    bool hooks_on;         /* the hooks run in this step (always without --profiler-ab) */
    int64_t hook_steps;    /* steps the hooks have seen */
    int64_t hook_ns;       /* wall time of those steps' blocks (run_ns without A/B) */
    int64_t *ab_block_ns;  /* [ab_cap] each completed block's wall time, in run order */
    int64_t ab_blocks, ab_cap;

    /* private: engine.c only */
    const char *config_text;  /* during create only (the live path copies it) */
    size_t config_len;
    bool routes;           /* runs the gate for some tokens */
    int64_t token_first;   /* global index of this rank's first token */
    int64_t token_count;   /* tokens this rank routes per step */
    moe_dtype_t value;        /* the experts' values (model.dtype resolved on this rank) */
    moe_dtype_t experts_held; /* how the expert ranks hold theirs (the largest where they
                               * differ): rank 0's load line when it hosts none */
    char experts_desc[160];   /* rank 0: "fp8 e4m3 weights held as stored, bf16 compute" */
    char weights_desc[320];   /* rank 0: the weights' naming, experts_desc, the shared experts */
    /* rank 0: the keys summary.json's config keeps as written, as this run resolved them
     * (moe_prof_resolved_t); the dtypes as its first line names them ("bf16") */
    char resolved[MOE_PROF_RESOLVED_COUNT][48];
    /* runtime.rebalance_every on more than one rank: the placement the layer and the
     * weights follow (a copy of cfg whose placement.layers sets each rebalance replaces;
     * the profiler keeps cfg), and the window of router counts. Else NULL. */
    moe_config_t *live_cfg;
    moe_rebalance_t rebalance;
    int64_t rebalances;    /* done so far */
    float *x;              /* [token_count, H] hidden state of the current step */
    float *x_dev;          /* [token_count, H] on the GPU: what the layers update */
    float *batches;        /* [num_batches, token_count, H] inputs, cycled over steps */
    int num_batches;
    int pinned_cpu;        /* runtime.bind: the first CPU this rank is pinned to; -1 none */
    bool replaying;        /* workload.routing: the gate's choices come from replay's trace */
    moe_replay_t replay;

    /* private: engine.c only: fault injection for the tests (MOED_TEST_*) */
    int stall_rank;        /* MOED_TEST_STALL=rank:step fault injection, -1 when unset */
    int64_t stall_step;
    int64_t test_hook_delay_ns; /* MOED_TEST_HOOK_DELAY_US: a sleep in rank 0's step hook */
};

/* Agree on a status across comm: if any rank failed, every rank returns the error of the
 * lowest failing rank, with its message copied into err on every rank. Collective. */
/* MOED_TEST_PAUSE=rank:phase: this rank stops itself (SIGSTOP) here when phase matches. */
void moe_engine_test_pause(const moe_engine_t *eng, const char *phase);
/* The same, for a rank whose engine is gone (MPI_Finalize's door). */
void moe_engine_test_pause_rank(int rank, const char *phase);

moe_status_t moe_agree(MPI_Comm comm, moe_status_t st, moe_error_t *err);

/* "router", or "replayed PATH (the trace's source)" with workload.routing. */
const char *moe_engine_routing_source(const moe_engine_t *eng);

/* config_text: the run's config file text cfg was parsed from (read during create: the
 * live path's window folders copy it); may be NULL. */
moe_status_t moe_engine_create(const moe_config_t *cfg, const char *config_text,
                               size_t config_len, MPI_Comm comm, moe_engine_t **out,
                               moe_error_t *err);
void moe_engine_destroy(moe_engine_t *eng); /* accepts NULL */

/* --profiler-ab K: alternate blocks of K steps with the hooks on and off (0: off, the
 * default) in the runs after this call. */
void moe_engine_set_profiler_ab(moe_engine_t *eng, int64_t k);

/* Run `steps` steps. A stop request (moe/stop.h) ends the run at once: the step in flight
 * is abandoned (not counted) and MOE_ERR_INTERRUPTED returned; after that no collective
 * may be called on the engine's communicator (ranks left different ones in flight).
 * MOE_ERR_TIMEOUT: the watchdog fired (err names who waits on whom). progress: rank 0
 * prints step and tokens/s on one refreshed line. Collective. */
moe_status_t moe_engine_run(moe_engine_t *eng, int64_t steps, bool progress, moe_error_t *err);

/* End the profile: last records to rank 0 (point to point, waiting at most
 * deadline_s for ranks that may be gone; missing_why, if not NULL, says why in the report)
 * and, on rank 0, the report folder (path into
 * run_dir). A no-op returning MOE_OK when profiling is off. Uses no collective, so it
 * works after an interruption or a lost rank. */
moe_status_t moe_engine_finish_profile(moe_engine_t *eng, const char *config_text,
                                       size_t config_len, bool interrupted, double deadline_s,
                                       const char *missing_why, char *run_dir,
                                       size_t run_dir_len, moe_error_t *err);

/* Gather the hidden state of the last step to rank 0 in global token order: on rank 0
 * *out receives a malloc'd [T, H] array (caller frees); NULL elsewhere. Collective. */
moe_status_t moe_engine_gather_output(moe_engine_t *eng, float **out, moe_error_t *err);

#endif /* MOE_ENGINE_H */
