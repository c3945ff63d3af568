/* Token-row transports behind one interface.
 *
 * A transport moves rows of `row_elems` floats between all ranks of a communicator in one
 * all-to-all: rank r sends send_rows[d] rows starting at row send_displs[d] of `send` to
 * each rank d, and receives recv_rows[s] rows from each s at row recv_displs[s] of `recv`.
 * Both sides know the counts beforehand (exchanged over MPI by the caller). The call
 * returns when this rank's sends may be reused and its receives are complete.
 *
 * Slots:
 *   name      short name for reports ("mpi")
 *   exchange  the all-to-all above; required. Must not allocate. Fills begin_ns and
 *             peer_done_ns. Waits through wait.h: MOE_ERR_INTERRUPTED on a stop request,
 *             MOE_ERR_TIMEOUT (watchdog) with err naming the peers still missing.
 *   destroy   frees the transport; required; must accept a transport whose exchange
 *             failed. */
#ifndef MOE_TRANSPORT_H
#define MOE_TRANSPORT_H

#include <mpi.h>
#include <stdint.h>

#include "moe/config.h"
#include "moe/status.h"

typedef struct moe_transport moe_transport_t;

typedef struct moe_transport_ops {
    const char *name;
    moe_status_t (*exchange)(moe_transport_t *t, const float *send, const int *send_rows,
                             const int *send_displs, float *recv, const int *recv_rows,
                             const int *recv_displs, moe_error_t *err);
    void (*destroy)(moe_transport_t *t);
} moe_transport_ops_t;

struct moe_transport {
    const moe_transport_ops_t *ops;
    MPI_Comm comm;
    int rank;
    int world_size;
    int64_t row_elems;
    /* Filled by every exchange, for the profiler's wait matrix: when the exchange began
     * and when the rows from each peer had arrived (== begin when none were expected).
     * Preallocated [world_size]. */
    int64_t begin_ns;
    int64_t *peer_done_ns;
    void *impl;
};

moe_status_t moe_transport_create(moe_transport_kind_t kind, MPI_Comm comm, int64_t row_elems,
                                  moe_transport_t **out, moe_error_t *err);
void moe_transport_destroy(moe_transport_t *t); /* accepts NULL */

moe_status_t moe_transport_mpi_create(MPI_Comm comm, int64_t row_elems, moe_transport_t **out,
                                      moe_error_t *err);

#ifdef MOE_HAVE_UCX
/* UCP tagged messages (transport_ucx.c); collective over comm (swaps worker addresses). */
moe_status_t moe_transport_ucx_create(MPI_Comm comm, int64_t row_elems, moe_transport_t **out,
                                      moe_error_t *err);
#endif

/* Convert an MPI error code into moe_status_t with its MPI text; logs nothing. */
moe_status_t moe_mpi_check(int mpi_rc, const char *what, moe_error_t *err);

#endif /* MOE_TRANSPORT_H */
