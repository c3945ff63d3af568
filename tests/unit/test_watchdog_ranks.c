/* The watchdog's pings between two ranks (run under mpirun -np 2): a late pong, the answer to
 * a ping whose grace had passed, is not taken for the answer of the next round. Rank 1 does
 * not tick (asleep) while rank 0 pings; the sleeps (5 s) are ten times the grace (0.5 s).
 * Before the rounds were numbered, round 2's receive matched round 1's late pong and rank 1,
 * asleep again, was reported alive. */
#include <mpi.h>
#include <stdio.h>
#include <time.h>

#include "moe/stop.h"
#include "moe/watchdog.h"
#include "test_util.h"

static void nap_s(int s)
{
    struct timespec t = {s, 0};
    nanosleep(&t, NULL);
}

int main(int argc, char **argv)
{
    moe_stop_mpi_init_begin();
    MPI_Init(&argc, &argv);
    moe_stop_mpi_init_end();
    int rank = 0, world = 0, one = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    CHECK_INT_EQ(world, 2);
    moe_error_t err;
    moe_error_clear(&err);
    CHECK_INT_EQ(moe_watchdog_init(MPI_COMM_WORLD, 60.0, &err), MOE_OK);
    int dead[2] = {-1, -1};
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        /* round 1: rank 1 asleep, no answer */
        CHECK_INT_EQ(moe_watchdog_unresponsive(0.5, dead, 2), 1);
        CHECK_INT_EQ(dead[0], 1);
        MPI_Send(&one, 1, MPI_INT, 1, 1, MPI_COMM_WORLD); /* round 1 is over */
        MPI_Recv(&one, 1, MPI_INT, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE); /* it answered */
        nap_s(1); /* its late pong is here (an eager message of 24 bytes) */
        /* round 2: rank 1 asleep again: its late pong of round 1 is no answer */
        dead[0] = -1;
        CHECK_INT_EQ(moe_watchdog_unresponsive(0.5, dead, 2), 1);
        CHECK_INT_EQ(dead[0], 1);
        MPI_Send(&one, 1, MPI_INT, 1, 3, MPI_COMM_WORLD);
        /* round 3: rank 1 ticks (polls): it answers, and only the pong of round 3 counts */
        dead[0] = -1;
        CHECK_INT_EQ(moe_watchdog_unresponsive(20.0, dead, 2), 0);
        MPI_Send(&one, 1, MPI_INT, 1, 4, MPI_COMM_WORLD);
    } else {
        nap_s(5); /* no tick: round 1 passes unanswered */
        MPI_Recv(&one, 1, MPI_INT, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        moe_watchdog_tick(); /* answers round 1's ping, late */
        MPI_Send(&one, 1, MPI_INT, 0, 2, MPI_COMM_WORLD);
        nap_s(5); /* round 2 passes unanswered */
        MPI_Recv(&one, 1, MPI_INT, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        int flag = 0;
        MPI_Request req;
        MPI_Irecv(&one, 1, MPI_INT, 0, 4, MPI_COMM_WORLD, &req);
        while (!flag) { /* ticks until rank 0 is done with round 3 */
            moe_watchdog_tick();
            MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
            struct timespec t = {0, 2000000L};
            nanosleep(&t, NULL);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    char name[32];
    snprintf(name, sizeof(name), "test_watchdog_ranks.%d", rank);
    int rc = moe_test_finish(name);
    MPI_Finalize();
    return rc;
}
