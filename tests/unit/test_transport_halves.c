/* An exchange started in two halves (moe_transport_start_sends, then start_recvs: a rank's
 * rows go out before it knows what it receives), on 3 ranks (run under mpirun -np 3), for
 * each transport built and way of moving rows: mpi (one message a peer, pieces of one row:
 * its request table grows between the halves, and MOED_MPI_EXCHANGE=alltoallv, which posts
 * the whole exchange at start_recvs), ucx when present.
 * Every rank sends rank d (itself included) 1 + s + d rows, each row's values naming the
 * sender, the receiver and the row; after the receives every row is where the counts put it,
 * and until they are posted the slot does not complete, though every peer's sends are in
 * (where the sends went first; the other ways have posted nothing before).
 * Receives posted before their counts (`each`, where the transport has recv_upto: mpi, ucx):
 * every rank sends each peer 0, 1 or 2 rows, two rounds with other counts, each peer's
 * receive taking up to 3 rows at a fixed place; every peer's message (an empty one too)
 * completes its receive, the rows land at their place, the rest of it stays untouched; and
 * alltoallv, which needs exact counts, refuses `each`, and so does mpi for a flagged peer
 * with more rows than one receive takes. */
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/stop.h"
#include "transport/transport.h"
#include "transport/wait.h"
#include "test_util.h"

enum { W = 3, ROW = 256 }; /* 1 KiB rows: MOED_MPI_PIECE_KB=1 makes each row a message */

static float value(int src, int dst, int row, int e)
{
    return (float)(src * 100000 + dst * 10000 + row * 10 + e % 7);
}

/* The transport `kind` with 2 slots, or NULL (not built: said; else a failed check). */
static moe_transport_t *open_transport(moe_transport_kind_t kind, const char *name)
{
    moe_transport_t *t = NULL;
    moe_error_t err;
    moe_error_clear(&err);
    moe_transport_device_t dev = {0};
    moe_status_t st = moe_transport_create(kind, MPI_COMM_WORLD, ROW, 2, &dev, &t, &err);
    if (st == MOE_ERR_UNSUPPORTED) {
        printf("%s: not built, skipped\n", name);
        return NULL;
    }
    CHECK_INT_EQ(st, MOE_OK);
    return st == MOE_OK ? t : NULL;
}

static void check_way(moe_transport_kind_t kind, int me, bool split, const char *name)
{
    moe_error_t err;
    moe_error_clear(&err);
    moe_transport_t *t = open_transport(kind, name);
    if (t == NULL) {
        return;
    }
    int send_rows[W], send_displs[W], recv_rows[W], recv_displs[W], ns = 0, nr = 0;
    for (int p = 0; p < W; p++) {
        send_rows[p] = 1 + me + p;
        send_displs[p] = ns;
        ns += send_rows[p];
        recv_rows[p] = 1 + p + me;
        recv_displs[p] = nr;
        nr += recv_rows[p];
    }
    float *send = calloc((size_t)ns * ROW, sizeof(float));
    float *recv = calloc((size_t)nr * ROW, sizeof(float));
    for (int p = 0; p < W; p++) {
        for (int r = 0; r < send_rows[p]; r++) {
            for (int e = 0; e < ROW; e++) {
                send[((size_t)send_displs[p] + (size_t)r) * ROW + (size_t)e] = value(me, p, r, e);
            }
        }
    }
    CHECK_INT_EQ(moe_transport_start_sends(t, 0, send, send_rows, send_displs, NULL, NULL,
                                           &err), MOE_OK);
    MPI_Barrier(MPI_COMM_WORLD); /* every rank's sends are posted */
    for (int i = 0; i < 100; i++) {
        CHECK_INT_EQ(moe_transport_progress(t, &err), MOE_OK);
    }
    /* sends posted, no receive yet: not complete (a whole-exchange way: nothing posted) */
    CHECK(t->xfer[0].active == split);
    CHECK_INT_EQ(moe_transport_start_recvs(t, 0, recv, recv_rows, recv_displs, NULL, &err),
                 MOE_OK);
    CHECK_INT_EQ(moe_transport_wait(t, 0, "the test exchange", &err), MOE_OK);
    CHECK(!t->xfer[0].active);
    int bad = 0;
    for (int p = 0; p < W; p++) {
        for (int r = 0; r < recv_rows[p]; r++) {
            for (int e = 0; e < ROW; e++) {
                bad += recv[((size_t)recv_displs[p] + (size_t)r) * ROW + (size_t)e] !=
                       value(p, me, r, e);
            }
        }
    }
    printf("%s: rank %d sent %d rows, received %d, %d values wrong\n", name, me, ns, nr, bad);
    CHECK_INT_EQ(bad, 0);
    /* the same slot again as a whole exchange: the halves left nothing behind */
    memset(recv, 0, (size_t)nr * ROW * sizeof(float));
    CHECK_INT_EQ(moe_transport_exchange(t, send, send_rows, send_displs, recv, recv_rows,
                                        recv_displs, &err), MOE_OK);
    CHECK(recv[(size_t)recv_displs[W - 1] * ROW] == value(W - 1, me, 0, 0));
    moe_transport_destroy(t);
    free(send);
    free(recv);
}

enum { CAP = 3 }; /* rows a peer's place holds */

static int upto_rows(int src, int dst, int round)
{
    return (src + 2 * dst + round) % 3; /* 0, 1 or 2 */
}

static void check_upto(moe_transport_kind_t kind, int me, const char *name)
{
    moe_error_t err;
    moe_error_clear(&err);
    moe_transport_t *t = open_transport(kind, name);
    if (t == NULL) {
        return;
    }
    bool each[W];
    int send_rows[W], send_displs[W], recv_rows[W], place[W];
    float *send = calloc((size_t)W * CAP * ROW, sizeof(float));
    float *recv = calloc((size_t)W * CAP * ROW, sizeof(float));
    CHECK(moe_transport_recv_upto(t) >= CAP);
    for (int round = 0; round < 2; round++) {
        for (int p = 0; p < W; p++) {
            each[p] = p != me;
            send_rows[p] = upto_rows(me, p, round);
            send_displs[p] = place[p] = p * CAP;
            recv_rows[p] = p == me ? send_rows[me] : CAP; /* the own block: its rows */
            for (int r = 0; r < CAP; r++) {
                for (int e = 0; e < ROW; e++) {
                    send[((size_t)p * CAP + (size_t)r) * ROW + (size_t)e] =
                        value(me, p, r + 10 * round, e);
                }
            }
        }
        memset(recv, 0, (size_t)W * CAP * ROW * sizeof(float));
        CHECK_INT_EQ(moe_transport_start_sends(t, 0, send, send_rows, send_displs, each, NULL,
                                               &err), MOE_OK);
        CHECK_INT_EQ(moe_transport_start_recvs(t, 0, recv, recv_rows, place, each, &err),
                     MOE_OK);
        CHECK_INT_EQ(moe_transport_wait(t, 0, "the test exchange", &err), MOE_OK);
        int bad = 0, got = 0;
        for (int p = 0; p < W; p++) {
            int n = upto_rows(p, me, round);
            got += n;
            for (int r = 0; r < CAP; r++) {
                for (int e = 0; e < ROW; e++) {
                    float v = recv[((size_t)p * CAP + (size_t)r) * ROW + (size_t)e];
                    bad += v != (r < n ? value(p, me, r + 10 * round, e) : 0.0f);
                }
            }
        }
        printf("%s, receives before the counts, round %d: rank %d received %d rows, %d values "
               "wrong\n", name, round, me, got, bad);
        CHECK_INT_EQ(bad, 0);
    }
    moe_transport_destroy(t);
    free(send);
    free(recv);
}

/* A transport that needs exact counts refuses `each`. */
static void check_upto_refused(int me)
{
    moe_error_t err;
    moe_error_clear(&err);
    moe_transport_t *t = open_transport(MOE_TRANSPORT_MPI, "mpi alltoallv");
    if (t == NULL) {
        return;
    }
    bool each[W] = {me != 0, me != 1, me != 2};
    int rows[W] = {0, 0, 0}, displs[W] = {0, 0, 0};
    float buf[ROW];
    CHECK_INT_EQ(moe_transport_recv_upto(t), 0);
    CHECK_INT_EQ(moe_transport_start_sends(t, 0, buf, rows, displs, each, NULL, &err),
                 MOE_ERR_INTERNAL);
    CHECK(strstr(err.msg, "exact counts") != NULL);
    moe_transport_destroy(t);
}

/* A flagged peer's rows past recv_upto are refused (local: nothing is posted): one receive
 * would not take them. */
static void check_upto_too_many(int me)
{
    setenv("MOED_MPI_PIECE_KB", "1", 1); /* a piece: one 1 KiB row */
    moe_error_t err;
    moe_error_clear(&err);
    moe_transport_t *t = open_transport(MOE_TRANSPORT_MPI, "mpi, a message a row");
    unsetenv("MOED_MPI_PIECE_KB");
    if (t == NULL) {
        return;
    }
    bool each[W] = {me != 0, me != 1, me != 2};
    int rows[W] = {2, 2, 2}, displs[W] = {0, 2, 4};
    float buf[6 * ROW];
    CHECK_INT_EQ(moe_transport_recv_upto(t), 1);
    CHECK_INT_EQ(moe_transport_start_recvs(t, 0, buf, rows, displs, each, &err),
                 MOE_ERR_INTERNAL);
    CHECK(strstr(err.msg, "more than the 1") != NULL);
    moe_error_clear(&err);
    CHECK_INT_EQ(moe_transport_start_sends(t, 0, buf, rows, displs, each, NULL, &err),
                 MOE_ERR_INTERNAL);
    CHECK(!t->xfer[0].active);
    moe_transport_destroy(t);
}

int main(int argc, char **argv)
{
    moe_stop_mpi_init_begin();
    MPI_Init(&argc, &argv);
    moe_stop_mpi_init_end();
    int me = 0, n = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (n != W) {
        if (me == 0) {
            fprintf(stderr, "test_transport_halves: run it on %d ranks\n", W);
        }
        MPI_Finalize();
        return 2;
    }
    static const char hosts[W][64] = {"node", "node", "node"};
    moe_wait_configure(60.0, me, W, hosts);
    check_way(MOE_TRANSPORT_MPI, me, true, "mpi");
    setenv("MOED_MPI_PIECE_KB", "1", 1);
    check_way(MOE_TRANSPORT_MPI, me, true, "mpi, a message a row");
    unsetenv("MOED_MPI_PIECE_KB");
    setenv("MOED_MPI_EXCHANGE", "alltoallv", 1);
    check_way(MOE_TRANSPORT_MPI, me, false, "mpi alltoallv");
    check_upto_refused(me);
    unsetenv("MOED_MPI_EXCHANGE");
    check_way(MOE_TRANSPORT_UCX, me, true, "ucx");
    check_upto(MOE_TRANSPORT_MPI, me, "mpi");
    check_upto_too_many(me);
    check_upto(MOE_TRANSPORT_UCX, me, "ucx");
    int failed = moe_test_finish("test_transport_halves");
    MPI_Finalize();
    return failed;
}
