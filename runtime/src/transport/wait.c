#include "transport/wait.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "moe/clock.h"
#include "moe/log.h"
#include "moe/mpi_check.h"
#include "moe/poll.h"
#include "moe/stop.h"
#include "moe/watchdog.h"

static struct {
    double timeout_s;
    int rank, world;
    const char (*hosts)[64];
    int64_t step;
    int layer;
    const char *phase;
    int64_t expect_ns; /* moe_wait_expect: for the waits that start from now on */
} g_wait = {.timeout_s = MOE_WATCHDOG_STARTUP_S, .phase = "start-up"};

void moe_wait_configure(double timeout_s, int rank, int world, const char (*hosts)[64])
{
    g_wait.timeout_s = timeout_s;
    g_wait.rank = rank;
    g_wait.world = world;
    g_wait.hosts = hosts;
    /* A 20 us nap (the first after the spin) would otherwise last the default 50 us of timer
     * slack longer. */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
}

void moe_wait_set_where(int64_t step, int layer, const char *phase)
{
    g_wait.step = step;
    g_wait.layer = layer;
    g_wait.phase = phase;
}

void moe_wait_expect(int64_t end_ns)
{
    g_wait.expect_ns = end_ns;
}

/* "rank 2 (node3)", or "rank 2" before the hosts are known (start-up). */
static const char *rank_text(char *buf, size_t len, int r)
{
    if (g_wait.hosts != NULL && r >= 0 && r < g_wait.world) {
        snprintf(buf, len, "rank %d (%s)", r, g_wait.hosts[r]);
    } else {
        snprintf(buf, len, "rank %d", r);
    }
    return buf;
}

/* The peers named in a message: "rank 1 (host), rank 2 (host)". */
static void name_ranks(char *out, size_t len, const int *ranks, int n)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < n && used + 80 < len; i++) {
        char one[96];
        used += (size_t)snprintf(out + used, len - used, "%s%s", i ? ", " : "",
                                 rank_text(one, sizeof(one), ranks[i]));
    }
}

/* A rank that answers and made load progress within the bound (it generates, reads or packs
 * its weights: moe_watchdog_progress) is busy, not hung: the bound is on progress stopping,
 * not on the total time. Its name and how much it has done, for the log, or -1 if none. */
static int busy_loading(const moe_watchdog_load_t *load, int64_t *bytes)
{
    int64_t bound = (int64_t)(g_wait.timeout_s * 1e9);
    for (int r = 0; load != NULL && r < g_wait.world; r++) {
        if (r != g_wait.rank && load[r].age_ns >= 0 && load[r].age_ns < bound) {
            *bytes = load[r].bytes;
            return r;
        }
    }
    return -1;
}

/* The wait lasted step_timeout_s. Ask every rank whether it still runs, so the message names
 * the ranks at fault (a peer that waits too is not one), then let one rank report it; or,
 * when every rank answers and one of them still loads, wait on (MOE_OK, *again). */
static moe_status_t watchdog_fire(double waited_s, const char *what, const int *pending,
                                  int npending, bool *again, moe_error_t *err)
{
    *again = false;
    if (moe_watchdog_notice(err) != MOE_OK) {
        return MOE_ERR_TIMEOUT; /* rank 0: another rank's watchdog fired first; its words */
    }
    int dead[64];
    moe_watchdog_load_t *load = calloc((size_t)(g_wait.world > 0 ? g_wait.world : 1),
                                       sizeof(*load));
    /* A rank that loads answers between two pieces of its load (one tensor read, 16 MiB
     * generated, one expert packed): at start-up it has up to T (10 s at most) to answer. */
    double grace = strcmp(g_wait.phase, "start-up") == 0 ? g_wait.timeout_s : 1.0;
    grace = grace < 1.0 ? 1.0 : grace > 10.0 ? 10.0 : grace;
    int ndead = moe_watchdog_unresponsive_progress(grace, dead, 64, load);
    int64_t bytes = 0;
    int busy = ndead == 0 ? busy_loading(load, &bytes) : -1;
    free(load);
    if (busy >= 0) {
        char who[96];
        MOE_DEBUG("watchdog: %.1f s in %s, but %s still loads its weights (%.0f MiB so far): "
                  "waiting on", waited_s, what, rank_text(who, sizeof(who), busy),
                  (double)bytes / (double)(1 << 20));
        *again = true;
        return MOE_OK;
    }
    char peers[512], culprits[512], me[96];
    name_ranks(peers, sizeof(peers), pending, npending);
    name_ranks(culprits, sizeof(culprits), dead, ndead);
    moe_error_set(err, MOE_ERR_TIMEOUT,
                  "watchdog: %s made no progress for %.1f s in step %lld, layer %d, "
                  "phase %s: waiting in %s on %s; %s%s (runtime.step_timeout_s = %g); "
                  "aborting the job",
                  rank_text(me, sizeof(me), g_wait.rank), waited_s, (long long)g_wait.step,
                  g_wait.layer, g_wait.phase, what,
                  npending > 0 ? peers : "all ranks (a collective)",
                  ndead > 0 ? culprits : "every rank answers (they wait too: a rank too slow?)",
                  ndead == 1 ? " does not answer (stopped, hung or lost)"
                  : ndead > 1 ? " do not answer (stopped, hung or lost)" : "",
                  g_wait.timeout_s);
    moe_watchdog_defer(err->msg, dead, ndead, MOE_WATCHDOG_REPORT_S);
    return MOE_ERR_TIMEOUT;
}

moe_status_t moe_wait_timed_out(double waited_s, const char *what, const int *pending,
                                int npending, moe_error_t *err)
{
    bool again = false;
    moe_status_t st = watchdog_fire(waited_s, what, pending, npending, &again, err);
    return again ? MOE_OK : st;
}

moe_status_t moe_wait_peer_lost(int peer, const char *what, const char *how, moe_error_t *err)
{
    if (moe_watchdog_notice(err) != MOE_OK) {
        return MOE_ERR_TIMEOUT; /* rank 0: another rank reported a fault first; its words */
    }
    char me[96], lost[96];
    moe_error_set(err, MOE_ERR_TIMEOUT,
                  "%s lost %s in step %lld, layer %d, phase %s: waiting in %s (%s); aborting "
                  "the job",
                  rank_text(me, sizeof(me), g_wait.rank), rank_text(lost, sizeof(lost), peer),
                  (long long)g_wait.step, g_wait.layer, g_wait.phase, what, how);
    moe_watchdog_defer(err->msg, &peer, 1, MOE_WATCHDOG_REPORT_S);
    return MOE_ERR_TIMEOUT;
}

/* The wait in progress (waits do not nest): moe_wait_poll's callers keep only its start. */
static moe_poll_t g_poll;
static int64_t g_poll_start = -1;

/* How long each kind of wait (its `what`) lasted the last two times: a wait spins as long
 * as the longer (moe_poll_spin_for). The step's waits are a handful of kinds; kinds past
 * the table spin the default. */
#define WAIT_KINDS 16
static struct {
    const char *what;
    int64_t last[2];
} g_kinds[WAIT_KINDS];

static int wait_kind(const char *what, bool add)
{
    for (int k = 0; k < WAIT_KINDS && g_kinds[k].what != NULL; k++) {
        if (g_kinds[k].what == what || strcmp(g_kinds[k].what, what) == 0) {
            return k;
        }
    }
    for (int k = 0; k < WAIT_KINDS && add; k++) {
        if (g_kinds[k].what == NULL) {
            g_kinds[k].what = what;
            return k;
        }
    }
    return -1;
}

void moe_wait_ended(const char *what, int64_t start_ns)
{
    int k = what != NULL ? wait_kind(what, true) : -1;
    if (k >= 0) {
        g_kinds[k].last[1] = g_kinds[k].last[0];
        g_kinds[k].last[0] = moe_now_ns() - start_ns;
    }
}

int64_t moe_wait_spin_of(const char *what)
{
    int k = what != NULL ? wait_kind(what, false) : -1;
    int64_t a = k >= 0 ? g_kinds[k].last[0] : 0, b = k >= 0 ? g_kinds[k].last[1] : 0;
    return moe_poll_spin_for(a > b ? a : b);
}

moe_status_t moe_wait_poll(int64_t start_ns, const char *what, const int *pending, int npending,
                           moe_error_t *err)
{
    if (start_ns != g_poll_start) {
        moe_poll_begin(&g_poll, 0, true);
        /* from the wait's own start: a gap before its first poll (stopped between the
         * first test and here) counts as this process stopped, not as the peers' delay */
        g_poll.start_ns = g_poll.last_ns = start_ns;
        g_poll.deadline_ns = g_wait.timeout_s > 0 ? start_ns + (int64_t)(g_wait.timeout_s * 1e9)
                                                  : 0;
        g_poll_start = start_ns;
        moe_poll_expect(&g_poll, g_wait.expect_ns);
        moe_poll_spin(&g_poll, moe_wait_spin_of(what));
    }
    moe_status_t st = moe_poll_next(&g_poll);
    if (st == MOE_ERR_INTERRUPTED) {
        return moe_error_set(err, st, "stop requested (%s) in step %lld, phase %s",
                             moe_stop_signal_name(moe_stop_signal()), (long long)g_wait.step,
                             g_wait.phase);
    }
    if (st == MOE_ERR_TIMEOUT) {
        bool again = false;
        st = watchdog_fire(moe_poll_waited_s(&g_poll), what, pending, npending, &again, err);
        if (again) { /* a rank still loads: the bound starts afresh from now */
            int64_t now = moe_now_ns();
            g_poll.start_ns = g_poll.last_ns = now;
            g_poll.stopped_ns = 0;
            g_poll.deadline_ns = now + (int64_t)(g_wait.timeout_s * 1e9);
        }
    }
    return st;
}

void moe_wait_progress(void)
{
    if (g_poll_start >= 0) {
        moe_poll_progress(&g_poll, moe_now_ns());
    }
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
            moe_wait_ended(what, start);
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
            moe_wait_ended(what, start);
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

moe_status_t moe_wait_bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm,
                            const char *what, moe_error_t *err)
{
    MPI_Request req;
    moe_status_t st = MOE_MPI(MPI_Ibcast(buf, count, type, root, comm, &req), err);
    return st == MOE_OK ? moe_wait_request(&req, what, err) : st;
}
