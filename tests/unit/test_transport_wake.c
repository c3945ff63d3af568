/* The transports' wake-up posts between two ranks of one node (run under mpirun -np 2),
 * for each transport built (mpi; ucx when present): a rank that starts a send posts the
 * receiver's semaphore, and a rank whose receive completes posts the sender's (a rendezvous
 * send completes only once the receiver took the rows; MPI's own message telling the sender
 * so posts nothing, and a sender napping on its send slept its nap out). Facts, not timing:
 * each check naps up to 2 s on a semaphore that is already posted (MOE_NAP_POSTED at once)
 * or not (MOE_NAP_SLEPT after the 2 s). The ranks meet in blocking MPI_Barrier calls, which
 * take no posts (moed's own waits nap, and a nap takes them). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/poll.h"
#include "moe/stop.h"
#include "transport/transport.h"
#include "transport/wait.h"
#include "transport/wake.h"
#include "test_util.h"

#define CHECK_NAP_NS 2000000000LL

/* Posts that came before now: taken, so the next check sees only what follows. */
static void drain(void)
{
    moe_wake_nap(1000000);
}

/* Rank 0 sends `rows` rows of `row_elems` floats to rank 1 over transport `kind`. */
static void check_kind(moe_transport_kind_t kind, int rank, int64_t row_elems, int rows,
                       const char *name)
{
    moe_transport_t *t = NULL;
    moe_error_t err;
    moe_error_clear(&err);
    moe_transport_device_t dev = {0};
    moe_status_t st = moe_transport_create(kind, MPI_COMM_WORLD, row_elems, 2, &dev, &t, &err);
    if (st == MOE_ERR_UNSUPPORTED) {
        printf("%s: not built, skipped\n", name);
        return;
    }
    CHECK_INT_EQ(st, MOE_OK);
    if (st != MOE_OK) {
        return;
    }
    float *buf = calloc((size_t)(rows * row_elems), sizeof(float));
    int send_rows[2] = {0, rank == 0 ? rows : 0}, recv_rows[2] = {rank == 1 ? rows : 0, 0};
    int displs[2] = {0, 0};
    drain();
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) { /* the send: rank 1 is posted */
        CHECK_INT_EQ(moe_transport_start(t, 0, buf, send_rows, displs, buf, recv_rows, displs,
                                         NULL, &err), MOE_OK);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
        int how = moe_wake_nap(CHECK_NAP_NS);
        printf("%s: rank 1 after rank 0's send: %s\n", name,
               how == MOE_NAP_POSTED ? "posted" : "not posted");
        CHECK_INT_EQ(how, MOE_NAP_POSTED);
        /* the receive, to its end: rank 0 is posted */
        CHECK_INT_EQ(moe_transport_start(t, 0, buf, send_rows, displs, buf, recv_rows, displs,
                                         NULL, &err), MOE_OK);
        CHECK_INT_EQ(moe_transport_wait(t, 0, "the test's receive", &err), MOE_OK);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        int how = moe_wake_nap(CHECK_NAP_NS);
        printf("%s: rank 0 after rank 1's receive completed: %s\n", name,
               how == MOE_NAP_POSTED ? "posted" : "not posted");
        CHECK_INT_EQ(how, MOE_NAP_POSTED);
        CHECK_INT_EQ(moe_transport_wait(t, 0, "the test's send", &err), MOE_OK);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    moe_transport_destroy(t);
    free(buf);
}

int main(int argc, char **argv)
{
    moe_stop_mpi_init_begin();
    MPI_Init(&argc, &argv);
    moe_stop_mpi_init_end();
    int rank = 0, world = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    CHECK_INT_EQ(world, 2);
    static const char hosts[2][64] = {"node", "node"}; /* one node: posts reach the peer */
    moe_wait_configure(60.0, rank, world, hosts);
    moe_error_t err;
    moe_error_clear(&err);
    CHECK_INT_EQ(moe_wake_setup(MPI_COMM_WORLD, rank, world, hosts, &err), MOE_OK);
    /* MPI: 64 rows of 1024 floats (256 kB, a rendezvous send); UCX: one row of 64 floats
     * (an eager send: a rendezvous one would need rank 0's progress while it sits in a
     * barrier) */
    check_kind(MOE_TRANSPORT_MPI, rank, 1024, 64, "mpi");
    check_kind(MOE_TRANSPORT_UCX, rank, 64, 1, "ucx");
    moe_wake_teardown();
    MPI_Finalize();
    return moe_test_finish(rank == 0 ? "test_transport_wake rank 0" : "test_transport_wake rank 1");
}
