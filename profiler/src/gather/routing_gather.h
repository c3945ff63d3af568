/* Rank 0's side of profiler.record_routing: every routing rank's recording (the message of
 * moe_proto/routing_msg.h) collected at the end of the run, assembled in global token
 * order and written as routing.safetensors (moe_model/routing_trace.h) into the run
 * folder, whole or not at all. */
#ifndef MOE_GATHER_ROUTING_GATHER_H
#define MOE_GATHER_ROUTING_GATHER_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "moe_config/config.h"
#include "moe/status.h"

struct moe_report; /* report/report.h */

typedef struct moe_routing_set {
    int64_t steps;            /* steps every routing rank completed */
    int64_t tokens, layers, top_k;
    int32_t *ids;             /* [layers][steps * tokens][top_k] */
    float *weights;
    bool complete;            /* every token of a step came */
    bool none_recorded;       /* it all came, holding no completed recorded step (a run
                               * stopped before its first): no file, nothing lost */
    char why[256];            /* else why not */
} moe_routing_set_t;

/* Rank 0: its own message (own, own_len; NULL when it routes none) and the others', which
 * arrive on comm (tag MOE_PROF_TAG_ROUTING) until every token of a step is covered or
 * deadline_ns. */
void moe_gather_routing(const moe_config_t *cfg, MPI_Comm comm, const void *own,
                        size_t own_len, int64_t deadline_ns, moe_routing_set_t *out);
/* The report's writer of routing.safetensors (moe_report_t.routing_write; arg: the set): the
 * set into r->run_dir, marked in the report's table of files, so INCOMPLETE and summary.json
 * know it; says what it wrote (or why not) on stdout / stderr. A set that is not complete is
 * not written (the entry failed, why: the set's); MOE_ERR_IO when the file could not be. */
moe_status_t moe_gather_routing_report(const struct moe_report *r, const void *arg,
                                       moe_error_t *err);
void moe_routing_set_free(moe_routing_set_t *set);

#endif /* MOE_GATHER_ROUTING_GATHER_H */
