/* Clock offsets to rank 0 by ping-pong (Cristian's method): rank 0 stamps t0, rank r
 * answers with its clock t_r, rank 0 stamps t1; if the two legs take equal time,
 * offset = t_r - (t0 + t1) / 2, wrong by at most (t1 - t0) / 2. The round with the
 * smallest round trip gives the tightest bound. */
#include <stdlib.h>
#include <time.h>

#include "moe/prof.h"
#include "moe/clock.h"
#include "moe/mpi_check.h"

enum { SYNC_TAG = 4343 };

static moe_status_t sync_peer_root(MPI_Comm comm, int peer, int rounds, double *offset,
                                   double *unc, moe_error_t *err)
{
    int64_t best_rtt = INT64_MAX;
    for (int i = 0; i < rounds; i++) {
        int64_t t0 = moe_now_ns(), tr = 0;
        moe_status_t st = MOE_MPI(MPI_Send(&t0, 1, MPI_INT64_T, peer, SYNC_TAG, comm), err);
        if (st == MOE_OK) {
            st = MOE_MPI(MPI_Recv(&tr, 1, MPI_INT64_T, peer, SYNC_TAG, comm, MPI_STATUS_IGNORE),
                         err);
        }
        if (st != MOE_OK) {
            return st;
        }
        int64_t t1 = moe_now_ns();
        if (t1 - t0 < best_rtt) {
            best_rtt = t1 - t0;
            *offset = (double)tr - 0.5 * ((double)t0 + (double)t1);
            *unc = 0.5 * (double)best_rtt;
        }
    }
    return MOE_OK;
}

static moe_status_t sync_peer_leaf(MPI_Comm comm, int rounds, moe_error_t *err)
{
    for (int i = 0; i < rounds; i++) {
        int64_t t0 = 0;
        moe_status_t st =
            MOE_MPI(MPI_Recv(&t0, 1, MPI_INT64_T, 0, SYNC_TAG, comm, MPI_STATUS_IGNORE), err);
        int64_t tr = moe_now_ns();
        if (st == MOE_OK) {
            st = MOE_MPI(MPI_Send(&tr, 1, MPI_INT64_T, 0, SYNC_TAG, comm), err);
        }
        if (st != MOE_OK) {
            return st;
        }
    }
    return MOE_OK;
}

moe_status_t moe_prof_clock_sync(MPI_Comm comm, int rounds, double *offset_ns,
                                 double *uncertainty_ns, moe_error_t *err)
{
    int rank = 0, world = 0;
    moe_status_t st = MOE_MPI(MPI_Comm_rank(comm, &rank), err);
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Comm_size(comm, &world), err);
    }
    offset_ns[0] = 0.0;
    uncertainty_ns[0] = 0.0;
    for (int r = 1; r < world && st == MOE_OK; r++) {
        if (rank == 0) {
            st = sync_peer_root(comm, r, rounds, &offset_ns[r], &uncertainty_ns[r], err);
        } else if (rank == r) {
            st = sync_peer_leaf(comm, rounds, err);
        }
    }
    /* every rank learns every estimate (each needs its own; the report needs all) */
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Bcast(offset_ns, world, MPI_DOUBLE, 0, comm), err);
    }
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Bcast(uncertainty_ns, world, MPI_DOUBLE, 0, comm), err);
    }
    return st;
}
