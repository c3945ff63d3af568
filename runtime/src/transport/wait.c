#include "transport/wait.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "moe/clock.h"
#include "moe/mpi_check.h"
#include "moe/stop.h"

static struct {
    double timeout_s;
    int rank, world;
    const char (*hosts)[64];
    int64_t step;
    int layer;
    const char *phase;
} g_wait = {.phase = "start-up"};

void moe_wait_configure(double timeout_s, int rank, int world, const char (*hosts)[64])
{
    g_wait.timeout_s = timeout_s;
    g_wait.rank = rank;
    g_wait.world = world;
    g_wait.hosts = hosts;
    /* A 20 us nap would otherwise last the default 50 us of timer slack longer. */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
}

void moe_wait_set_where(int64_t step, int layer, const char *phase)
{
    g_wait.step = step;
    g_wait.layer = layer;
    g_wait.phase = phase;
}

static const char *host_of(int r)
{
    return g_wait.hosts != NULL && r >= 0 && r < g_wait.world ? g_wait.hosts[r] : "?";
}

static moe_status_t watchdog_fire(double waited_s, const char *what, const int *pending,
                                  int npending, moe_error_t *err)
{
    char peers[512] = "";
    size_t used = 0;
    for (int i = 0; i < npending && used < sizeof(peers) - 64; i++) {
        used += (size_t)snprintf(peers + used, sizeof(peers) - used, "%srank %d (%s)",
                                 i ? ", " : "", pending[i], host_of(pending[i]));
    }
    return moe_error_set(err, MOE_ERR_TIMEOUT,
                         "watchdog: rank %d (%s) made no progress for %.1f s in step %lld, "
                         "layer %d, phase %s: waiting in %s on %s "
                         "(runtime.step_timeout_s = %g); aborting the job",
                         g_wait.rank, host_of(g_wait.rank), waited_s, (long long)g_wait.step,
                         g_wait.layer, g_wait.phase, what,
                         npending > 0 ? peers : "all ranks (a collective)", g_wait.timeout_s);
}

moe_status_t moe_wait_poll(int64_t start_ns, const char *what, const int *pending, int npending,
                           moe_error_t *err)
{
    if (moe_stop_requested()) {
        return moe_error_set(err, MOE_ERR_INTERRUPTED, "stop requested (signal %d) in step %lld, phase %s",
                             moe_stop_signal(), (long long)g_wait.step, g_wait.phase);
    }
    int64_t waited = moe_now_ns() - start_ns;
    if (g_wait.timeout_s > 0 && (double)waited * 1e-9 >= g_wait.timeout_s) {
        return watchdog_fire((double)waited * 1e-9, what, pending, npending, err);
    }
    if (waited > 50000) {
        struct timespec nap = {0, 20000};
        nanosleep(&nap, NULL);
    }
    return MOE_OK;
}

/* A failed MPI call in a wait: its MOE_MPI message, plus what the wait was for. */
static moe_status_t wait_failed(moe_status_t st, const char *what, moe_error_t *err)
{
    if (err != NULL) {
        size_t used = strlen(err->msg);
        snprintf(err->msg + used, sizeof(err->msg) - used, " (waiting in %s)", what);
    }
    return st;
}

moe_status_t moe_wait_request(MPI_Request *req, const char *what, moe_error_t *err)
{
    int64_t start = moe_now_ns();
    for (;;) {
        int done = 0;
        moe_status_t st = MOE_MPI(MPI_Test(req, &done, MPI_STATUS_IGNORE), err);
        if (st != MOE_OK) {
            return wait_failed(st, what, err);
        }
        if (done) {
            return MOE_OK;
        }
        st = moe_wait_poll(start, what, NULL, 0, err);
        if (st != MOE_OK) {
            return st;
        }
    }
}

int moe_wait_note_peer(int *list, int n, int cap, int peer)
{
    for (int k = 0; k < n; k++) {
        if (list[k] == peer) {
            return n;
        }
    }
    if (n < cap) {
        list[n++] = peer;
    }
    return n;
}

moe_status_t moe_wait_all(MPI_Request *reqs, const int *peers, int n, const char *what,
                          moe_error_t *err)
{
    int64_t start = moe_now_ns();
    int pending[64];
    for (;;) {
        int left = 0, np = 0;
        for (int i = 0; i < n; i++) {
            int done = 1;
            moe_status_t st = reqs[i] == MPI_REQUEST_NULL
                                  ? MOE_OK
                                  : MOE_MPI(MPI_Test(&reqs[i], &done, MPI_STATUS_IGNORE), err);
            if (st != MOE_OK) {
                return wait_failed(st, what, err);
            }
            left += !done;
            if (!done) {
                np = moe_wait_note_peer(pending, np, 64, peers[i]);
            }
        }
        if (left == 0) {
            return MOE_OK;
        }
        moe_status_t st = moe_wait_poll(start, what, pending, np, err);
        if (st != MOE_OK) {
            return st;
        }
    }
}

moe_status_t moe_wait_barrier(MPI_Comm comm, moe_error_t *err)
{
    MPI_Request req;
    moe_status_t st = MOE_MPI(MPI_Ibarrier(comm, &req), err);
    if (st != MOE_OK) {
        return st;
    }
    return moe_wait_request(&req, "a barrier", err);
}
