/* profiler.record_routing on one rank: the routing of the tokens it routes, layer by layer,
 * for every step the profiler's schedule records, kept in the layout of the message rank 0
 * gathers (moe_proto/routing_msg.h) so that message is the buffer as it stands. Sized once
 * at create (config_checks.c bounds it by profiler.routing_max_mb); the per-layer hook
 * copies and allocates nothing. A step counts once it completes. */
#ifndef MOE_RECORD_ROUTING_REC_H
#define MOE_RECORD_ROUTING_REC_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "moe_config/config.h"
#include "moe_prof/prof.h"

typedef struct moe_routing_rec moe_routing_rec_t;

/* *out NULL (and MOE_OK) when the config records no routing or the rank routes no tokens. */
moe_status_t moe_routing_rec_create(const moe_config_t *cfg, int64_t token_first,
                                    int64_t token_count, moe_routing_rec_t **out,
                                    moe_error_t *err);
void moe_routing_rec_destroy(moe_routing_rec_t *rr); /* accepts NULL; a send still in
                                                        flight is released, not waited */

void moe_routing_rec_step_begin(moe_routing_rec_t *rr, int64_t step);
void moe_routing_rec_layer(moe_routing_rec_t *rr, const moe_prof_layer_sample_t *s);
void moe_routing_rec_step_end(moe_routing_rec_t *rr);

/* The message (header filled now): the completed recorded steps. */
void moe_routing_rec_message(moe_routing_rec_t *rr, const void **buf, size_t *len);

/* A non-root rank: start sending the message to rank 0 on comm; then, after rank 0 said
 * the report is written, wait at most until deadline_ns for it to complete. */
moe_status_t moe_routing_rec_send(moe_routing_rec_t *rr, MPI_Comm comm, moe_error_t *err);
void moe_routing_rec_send_done(moe_routing_rec_t *rr, int64_t deadline_ns);

#endif /* MOE_RECORD_ROUTING_REC_H */
