/* Clock offsets to rank 0 by ping-pong (Cristian's method): rank 0 stamps t0, rank r
 * answers with its clock t_r, rank 0 stamps t1; if the two legs take equal time,
 * offset = t_r - (t0 + t1) / 2, wrong by at most (t1 - t0) / 2. The round with the
 * smallest round trip gives the tightest bound.
 *
 * A rank that runs on rank 0's kernel (the same boot_id: one machine, containers and
 * network namespaces included) reads the same CLOCK_MONOTONIC: its offset is 0, exactly,
 * and it takes no ping-pong, whose legs polled through MPI are not equal in time (an
 * estimate there was 0.3 ms off and made one expert rank seem to wait for another).
 *
 * Every message is non-blocking and polled (moe/poll.h) against one deadline for the whole
 * sync, so a rank stopped or hung here ends it with MOE_ERR_TIMEOUT instead of a hang, and
 * a stop request with MOE_ERR_INTERRUPTED. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "moe_prof/prof.h"
#include "moe/clock.h"
#include "moe/hash.h"
#include "moe/limits.h"
#include "moe/mpi_check.h"
#include "moe/poll.h"

enum { SYNC_TAG = 4343 };

/* One message each way, polled: send `out` to peer, then receive `in` from it. With
 * send_first false, receive first (the leaf answers after rank 0's stamp arrived). */
static moe_status_t exchange(MPI_Comm comm, int peer, int64_t *out, int64_t *in,
                             bool send_first, moe_poll_t *poll, moe_error_t *err)
{
    MPI_Request req;
    for (int leg = 0; leg < 2; leg++) {
        bool sending = (leg == 0) == send_first;
        moe_status_t st =
            sending ? MOE_MPI(MPI_Isend(out, 1, MPI_INT64_T, peer, SYNC_TAG, comm, &req), err)
                    : MOE_MPI(MPI_Irecv(in, 1, MPI_INT64_T, peer, SYNC_TAG, comm, &req), err);
        if (st == MOE_OK) {
            st = moe_poll_request(&req, poll, err);
        }
        if (st != MOE_OK) {
            return st; /* a pending request is abandoned with the job */
        }
        if (!send_first && leg == 0) {
            *out = moe_now_ns(); /* the leaf's stamp, taken when rank 0's arrived */
        }
    }
    return MOE_OK;
}

static moe_status_t sync_peer_root(MPI_Comm comm, int peer, int rounds, double *offset,
                                   double *unc, moe_poll_t *poll, moe_error_t *err)
{
    int64_t best_rtt = INT64_MAX;
    for (int i = 0; i < rounds; i++) {
        int64_t t0 = moe_now_ns(), tr = 0;
        moe_status_t st = exchange(comm, peer, &t0, &tr, true, poll, err);
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

static moe_status_t sync_peer_leaf(MPI_Comm comm, int rounds, moe_poll_t *poll,
                                   moe_error_t *err)
{
    for (int i = 0; i < rounds; i++) {
        int64_t t0 = 0, tr = 0;
        moe_status_t st = exchange(comm, 0, &tr, &t0, false, poll, err);
        if (st != MOE_OK) {
            return st;
        }
    }
    return MOE_OK;
}

/* This kernel's boot_id as a hash (0 where it cannot be read: never the same as another's,
 * see same_clock). */
static uint64_t kernel_id(void)
{
    char id[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f == NULL) {
        return 0;
    }
    if (fgets(id, sizeof(id), f) == NULL) {
        id[0] = '\0';
    }
    fclose(f);
    return id[0] != '\0' ? moe_hash64(id, strlen(id)) | 1u : 0; /* | 1: never 0 */
}

/* Every rank's kernel_id, polled; same[r]: rank r reads rank 0's clock. The ids live on
 * the stack: no rank may skip the collective on a failed allocation. */
static moe_status_t same_clock(MPI_Comm comm, int world, bool *same, moe_poll_t *poll,
                               moe_error_t *err)
{
    uint64_t mine = kernel_id(), ids[MOE_MAX_RANKS];
    MPI_Request req;
    moe_status_t st = MOE_MPI(MPI_Iallgather(&mine, 1, MPI_UINT64_T, ids, 1, MPI_UINT64_T,
                                             comm, &req), err);
    if (st == MOE_OK) {
        st = moe_poll_request(&req, poll, err);
    }
    for (int r = 0; st == MOE_OK && r < world; r++) {
        same[r] = ids[r] != 0 && ids[r] == ids[0];
    }
    return st;
}

static moe_status_t bcast_polled(double *buf, int n, MPI_Comm comm, moe_poll_t *poll,
                                 moe_error_t *err)
{
    MPI_Request req;
    moe_status_t st = MOE_MPI(MPI_Ibcast(buf, n, MPI_DOUBLE, 0, comm, &req), err);
    return st == MOE_OK ? moe_poll_request(&req, poll, err) : st;
}

moe_status_t moe_prof_clock_sync(MPI_Comm comm, int rounds, double timeout_s, double *offset_ns,
                                 double *uncertainty_ns, int *waited_on, moe_error_t *err)
{
    int rank = 0, world = 0;
    moe_status_t st = MOE_MPI(MPI_Comm_rank(comm, &rank), err);
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Comm_size(comm, &world), err);
    }
    moe_poll_t poll;
    moe_poll_begin(&poll, timeout_s, true); /* a Ctrl-C here must not wait for the deadline */
    offset_ns[0] = 0.0;
    uncertainty_ns[0] = 0.0;
    *waited_on = -1;
    bool same[MOE_MAX_RANKS] = {false};
    if (st == MOE_OK) {
        st = same_clock(comm, world, same, &poll, err);
    }
    *waited_on = 0;
    for (int r = 1; r < world && st == MOE_OK; r++) {
        if (same[r]) { /* one kernel, one CLOCK_MONOTONIC */
            offset_ns[r] = uncertainty_ns[r] = 0.0;
        } else if (rank == 0) {
            *waited_on = r;
            st = sync_peer_root(comm, r, rounds, &offset_ns[r], &uncertainty_ns[r], &poll, err);
        } else if (rank == r) {
            st = sync_peer_leaf(comm, rounds, &poll, err);
        }
    }
    /* every rank learns every estimate (each needs its own; the report needs all) */
    *waited_on = rank == 0 ? -1 : 0;
    if (st == MOE_OK) {
        st = bcast_polled(offset_ns, world, comm, &poll, err);
    }
    if (st == MOE_OK) {
        st = bcast_polled(uncertainty_ns, world, comm, &poll, err);
    }
    return st;
}
