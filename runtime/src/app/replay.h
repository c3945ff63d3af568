/* workload.routing: a recorded routing trace (moe_model/routing_trace.h) replayed in place
 * of the gate. Rank 0 reads the file (a cluster node need not see it) and checks it against
 * the model; every rank that routes tokens gets the whole trace in memory (8 bytes per
 * token, layer and top-k choice) and, each step, its own tokens' rows: step s takes rows
 * s * tokens_per_step ... of every layer, the routing rank its slice of them, cycling at
 * the end of the file. */
#ifndef MOE_APP_REPLAY_H
#define MOE_APP_REPLAY_H

#include <mpi.h>
#include <stdbool.h>

#include "moe_config/config.h"
#include "moe_model/routing_trace.h"
#include "moe/status.h"

typedef struct moe_replay {
    moe_routing_trace_t tr;  /* data on routing ranks; header only elsewhere */
    int li[MOE_MAX_LAYER_IDS]; /* moed layer l -> the trace's layer index */
    char source[MOE_ROUTING_REPLAYED_MAX]; /* "replayed PATH (the trace's source)": the
                                           * report's words */
} moe_replay_t;

/* The trace's header (data read: its rows too) against the model: every moed layer's
 * decoder layer in it, its num_experts and top_k the model's, at least tokens_per_step
 * rows, its family (when it names one) model.family. Fills li. MOE_ERR_FORMAT naming the
 * file and the tensor or metadata key, after the key and its value's file:line:col in the
 * config ("run.yaml:14:12: workload.routing: ..."), as the config's own errors. */
moe_status_t moe_replay_check(const moe_config_t *cfg, const moe_routing_trace_t *tr, int *li,
                              moe_error_t *err);
/* moe_routing_trace_open failed on cfg->routing_trace with st: err's message (which names
 * the file) gets the same "run.yaml:14:12: workload.routing: " in front. Returns st. */
moe_status_t moe_replay_open_failed(const moe_config_t *cfg, moe_status_t st, moe_error_t *err);

/* Rank 0 only: read and check cfg->routing_trace (out zeroed first; freed on failure). */
moe_status_t moe_replay_read(const moe_config_t *cfg, moe_replay_t *out, moe_error_t *err);
/* Collective, once every rank agreed rank 0's read went well: the header to every rank,
 * the data to the ranks that route (routes). Says once (rank 0) when the run's steps will
 * cycle through the file. The caller agrees on the result. */
moe_status_t moe_replay_share(const moe_config_t *cfg, MPI_Comm comm, bool routes,
                              moe_replay_t *out, moe_error_t *err);
void moe_replay_free(moe_replay_t *r); /* accepts a zeroed one */

#endif /* MOE_APP_REPLAY_H */
