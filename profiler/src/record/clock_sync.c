/* Clock offsets to rank 0 by ping-pong (Cristian's method): rank 0 stamps t0, rank r
 * answers with its clock t_r, rank 0 stamps t1; if the two legs take equal time,
 * offset = t_r - (t0 + t1) / 2, wrong by at most (t1 - t0) / 2. The round with the
 * smallest round trip gives the tightest bound. */
#include <stdlib.h>
#include <time.h>

#include "moe/prof.h"
#include "moe/clock.h"

enum { SYNC_TAG = 4343 };

static int sync_peer_root(MPI_Comm comm, int peer, int rounds, double *offset, double *unc)
{
    int64_t best_rtt = INT64_MAX;
    for (int i = 0; i < rounds; i++) {
        int64_t t0 = moe_now_ns(), tr = 0;
        int rc = MPI_Send(&t0, 1, MPI_INT64_T, peer, SYNC_TAG, comm);
        if (rc == MPI_SUCCESS) {
            rc = MPI_Recv(&tr, 1, MPI_INT64_T, peer, SYNC_TAG, comm, MPI_STATUS_IGNORE);
        }
        if (rc != MPI_SUCCESS) {
            return rc;
        }
        int64_t t1 = moe_now_ns();
        if (t1 - t0 < best_rtt) {
            best_rtt = t1 - t0;
            *offset = (double)tr - 0.5 * ((double)t0 + (double)t1);
            *unc = 0.5 * (double)best_rtt;
        }
    }
    return MPI_SUCCESS;
}

static int sync_peer_leaf(MPI_Comm comm, int rounds)
{
    for (int i = 0; i < rounds; i++) {
        int64_t t0 = 0;
        int rc = MPI_Recv(&t0, 1, MPI_INT64_T, 0, SYNC_TAG, comm, MPI_STATUS_IGNORE);
        int64_t tr = moe_now_ns();
        if (rc == MPI_SUCCESS) {
            rc = MPI_Send(&tr, 1, MPI_INT64_T, 0, SYNC_TAG, comm);
        }
        if (rc != MPI_SUCCESS) {
            return rc;
        }
    }
    return MPI_SUCCESS;
}

moe_status_t moe_prof_clock_sync(MPI_Comm comm, int rounds, double *offset_ns,
                                 double *uncertainty_ns)
{
    int rank, world, rc = MPI_SUCCESS;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &world);
    offset_ns[0] = 0.0;
    uncertainty_ns[0] = 0.0;
    for (int r = 1; r < world && rc == MPI_SUCCESS; r++) {
        if (rank == 0) {
            rc = sync_peer_root(comm, r, rounds, &offset_ns[r], &uncertainty_ns[r]);
        } else if (rank == r) {
            rc = sync_peer_leaf(comm, rounds);
        }
    }
    /* every rank learns every estimate (each needs its own; the report needs all) */
    if (rc == MPI_SUCCESS) {
        rc = MPI_Bcast(offset_ns, world, MPI_DOUBLE, 0, comm);
    }
    if (rc == MPI_SUCCESS) {
        rc = MPI_Bcast(uncertainty_ns, world, MPI_DOUBLE, 0, comm);
    }
    return rc == MPI_SUCCESS ? MOE_OK : MOE_ERR_MPI;
}
