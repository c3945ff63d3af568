#include "moe/watchdog.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "moe/clock.h"
#include "moe/mpi_check.h"
#include "moe/poll.h"
#include "moe/stop.h"

enum { TAG_PING = 7101, TAG_PONG = 7102, TAG_STOP = 7103, TAG_FAULT = 7104 };
#define TICK_NS 1000000LL /* the channel is looked at once a millisecond at most */

static struct {
    MPI_Comm comm;
    int rank, world;
    bool ready, in_tick, stop_sent, fault;
    int64_t last_tick_ns;
    char fault_msg[MOE_ERROR_MSG_MAX];
    int pong; /* the payload of stops */
    /* Load progress (moe_watchdog_progress): bytes done, when last; a pong carries both. */
    int64_t progress_bytes, progress_ns;
    /* Pings carry a round number, answered in the pong {round, bytes done, ns since the last
     * progress (-1: none yet)}: a late pong of an earlier round is told apart and dropped.
     * One ping buffer and request per rank: a ping still in flight is not rewritten. */
    int ping_round;
    int *ping_buf;
    MPI_Request *ping_req;
} g = {.comm = MPI_COMM_NULL};

/* Send a small message nobody waits for: it either goes or dies with the job. */
static void send_free(const void *buf, int n, MPI_Datatype type, int to, int tag)
{
    MPI_Request req;
    if (MOE_MPI(MPI_Isend(buf, n, type, to, tag, g.comm, &req), NULL) == MOE_OK) {
        MOE_MPI(MPI_Request_free(&req), NULL);
    }
}

moe_status_t moe_watchdog_init(MPI_Comm comm, double timeout_s, moe_error_t *err)
{
    MPI_Request req;
    moe_status_t st = MOE_MPI(MPI_Comm_rank(comm, &g.rank), err);
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Comm_size(comm, &g.world), err);
    }
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Comm_idup(comm, &g.comm, &req), err);
    }
    if (st != MOE_OK) {
        return st;
    }
    moe_poll_t poll;
    moe_poll_begin(&poll, timeout_s, true);
    st = moe_poll_request(&req, &poll, err);
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Comm_set_errhandler(g.comm, MPI_ERRORS_RETURN), err);
    }
    if (st == MOE_OK) {
        g.ping_buf = calloc((size_t)g.world, sizeof(int));
        g.ping_req = malloc((size_t)g.world * sizeof(MPI_Request));
        if (g.ping_buf == NULL || g.ping_req == NULL) {
            st = moe_error_set(err, MOE_ERR_NO_MEMORY, "watchdog: out of memory");
        }
    }
    if (st == MOE_OK) {
        for (int r = 0; r < g.world; r++) {
            g.ping_req[r] = MPI_REQUEST_NULL;
        }
        g.ready = true;
        moe_poll_set_hook(moe_watchdog_tick);
    } else if (st == MOE_ERR_TIMEOUT) {
        st = moe_error_set(err, st, "watchdog: rank %d waited %.0f s for the other ranks to "
                           "start (a rank stopped or hung in MPI_Init?); aborting the job",
                           g.rank, timeout_s);
    }
    return st;
}

/* Take in one pending message of `tag` (int payload) if there is one: its source, or -1. */
static int take_int(int tag, int *value)
{
    int flag = 0;
    MPI_Status status;
    if (MOE_MPI(MPI_Iprobe(MPI_ANY_SOURCE, tag, g.comm, &flag, &status), NULL) != MOE_OK ||
        !flag) {
        return -1;
    }
    /* matched by the probe: the message is here, the receive does not wait */
    if (MOE_MPI(MPI_Recv(value, 1, MPI_INT, status.MPI_SOURCE, tag, g.comm, MPI_STATUS_IGNORE),
                NULL) != MOE_OK) {
        return -1;
    }
    return status.MPI_SOURCE;
}

static void take_fault(void)
{
    int flag = 0, n = 0;
    MPI_Status status;
    if (MOE_MPI(MPI_Iprobe(MPI_ANY_SOURCE, TAG_FAULT, g.comm, &flag, &status), NULL) !=
            MOE_OK ||
        !flag) {
        return;
    }
    char msg[MOE_ERROR_MSG_MAX];
    if (MOE_MPI(MPI_Get_count(&status, MPI_CHAR, &n), NULL) != MOE_OK) {
        n = 0;
    }
    n = n < 0 ? 0 : n > MOE_ERROR_MSG_MAX - 1 ? MOE_ERROR_MSG_MAX - 1 : n;
    /* a longer message is truncated by MPI (an error here, logged); the text is kept */
    if (MOE_MPI(MPI_Recv(msg, n, MPI_CHAR, status.MPI_SOURCE, TAG_FAULT, g.comm,
                         MPI_STATUS_IGNORE),
                NULL) != MOE_OK) {
        snprintf(msg, sizeof(msg), "a rank's watchdog fired (its message was lost)");
        n = (int)strlen(msg);
    }
    msg[n] = '\0';
    if (!g.fault) { /* the first report wins; the others are the same fault seen later */
        snprintf(g.fault_msg, sizeof(g.fault_msg), "%s", msg);
        g.fault = true;
    }
}

/* A stop of this process's own (a signal) goes to every other rank once. */
static void pass_stop_on(void)
{
    if (g.stop_sent || !moe_stop_requested() || moe_stop_origin() >= 0) {
        return;
    }
    g.stop_sent = true;
    g.pong = moe_stop_signal();
    for (int r = 0; r < g.world; r++) {
        if (r != g.rank) {
            send_free(&g.pong, 1, MPI_INT, r, TAG_STOP);
        }
    }
}

moe_status_t moe_watchdog_tick(void)
{
    int64_t now = moe_now_ns();
    if (!g.ready || g.in_tick || now - g.last_tick_ns < TICK_NS) {
        return g.fault ? MOE_ERR_TIMEOUT : MOE_OK;
    }
    g.in_tick = true;
    g.last_tick_ns = now;
    pass_stop_on();
    int v = 0, src;
    while ((src = take_int(TAG_PING, &v)) >= 0) {
        /* blocking: 24 bytes go eagerly to a rank that is alive (it just pinged), and the
         * buffer is free for the next reply (a freed Isend could still be reading it) */
        int64_t pong[3] = {v, g.progress_bytes, g.progress_ns > 0 ? now - g.progress_ns : -1};
        MOE_MPI(MPI_Send(pong, 3, MPI_INT64_T, src, TAG_PONG, g.comm), NULL);
    }
    while ((src = take_int(TAG_STOP, &v)) >= 0) {
        moe_stop_request_from(v, src);
        g.stop_sent = true; /* that rank told everyone */
    }
    if (g.rank == 0) {
        take_fault();
    }
    g.in_tick = false;
    return g.fault ? MOE_ERR_TIMEOUT : MOE_OK;
}

void moe_watchdog_progress(int64_t bytes)
{
    int64_t now = moe_now_ns();
    g.progress_bytes += bytes;
    g.progress_ns = now;
    moe_stop_alive(now); /* this process runs (rank 0: it also looks at its launcher) */
    (void)moe_watchdog_tick(); /* a fault notice is seen by the next wait */
}

int moe_watchdog_unresponsive(double grace_s, int *dead, int cap)
{
    return moe_watchdog_unresponsive_progress(grace_s, dead, cap, NULL);
}

int moe_watchdog_unresponsive_progress(double grace_s, int *dead, int cap,
                                       moe_watchdog_load_t *load)
{
    if (!g.ready) {
        return 0;
    }
    /* answer[3 r]: 1 once rank r answered this round; then its bytes and progress age */
    int64_t *answer = calloc(3 * (size_t)g.world, sizeof(int64_t));
    if (answer == NULL) {
        return 0;
    }
    int round = ++g.ping_round;
    int left = 0;
    for (int r = 0; r < g.world; r++) {
        int sent = 1;
        if (r == g.rank) {
            continue;
        }
        if (g.ping_req[r] != MPI_REQUEST_NULL &&
            MOE_MPI(MPI_Test(&g.ping_req[r], &sent, MPI_STATUS_IGNORE), NULL) != MOE_OK) {
            sent = 0;
        }
        if (sent) { /* else the earlier ping is still on its way: its round is answered */
            g.ping_buf[r] = round;
            if (MOE_MPI(MPI_Isend(&g.ping_buf[r], 1, MPI_INT, r, TAG_PING, g.comm,
                                  &g.ping_req[r]),
                        NULL) != MOE_OK) {
                g.ping_req[r] = MPI_REQUEST_NULL;
            }
        }
        left++;
    }
    /* pongs are taken in whole (probe, then receive): no receive is left posted on return */
    moe_poll_t poll;
    moe_poll_begin(&poll, grace_s, false);
    while (left > 0 && moe_now_ns() < poll.deadline_ns) {
        (void)moe_poll_next(&poll); /* only the deadline ends this wait, not a fault notice */
        int flag = 1;
        while (left > 0 && flag) {
            MPI_Status status;
            int64_t pong[3];
            flag = 0;
            if (MOE_MPI(MPI_Iprobe(MPI_ANY_SOURCE, TAG_PONG, g.comm, &flag, &status), NULL) !=
                    MOE_OK ||
                !flag ||
                MOE_MPI(MPI_Recv(pong, 3, MPI_INT64_T, status.MPI_SOURCE, TAG_PONG, g.comm,
                                 MPI_STATUS_IGNORE),
                        NULL) != MOE_OK) {
                break;
            }
            int r = status.MPI_SOURCE;
            if (r != g.rank && answer[3 * r] == 0 && pong[0] == g.ping_buf[r]) {
                answer[3 * r] = 1; /* a pong of an earlier round is dropped */
                answer[3 * r + 1] = pong[1];
                answer[3 * r + 2] = pong[2];
                left--;
            }
        }
    }
    int n = 0;
    for (int r = 0; r < g.world && load != NULL; r++) {
        bool answered = r != g.rank && answer[3 * r] != 0;
        load[r].bytes = answered ? answer[3 * r + 1] : r == g.rank ? g.progress_bytes : -1;
        load[r].age_ns = answered      ? answer[3 * r + 2]
                         : r == g.rank ? (g.progress_ns > 0 ? moe_now_ns() - g.progress_ns : -1)
                                       : -1;
    }
    for (int r = 0; r < g.world; r++) {
        if (r != g.rank && answer[3 * r] == 0 && n < cap) { /* no answer: it does not run */
            dead[n++] = r;
        }
    }
    free(answer);
    return n;
}

moe_status_t moe_watchdog_notice(moe_error_t *err)
{
    moe_watchdog_tick();
    if (!g.fault) {
        return MOE_OK;
    }
    return moe_error_set(err, MOE_ERR_TIMEOUT, "%s", g.fault_msg);
}

static bool is_dead(const int *dead, int ndead, int r)
{
    for (int i = 0; i < ndead; i++) {
        if (dead[i] == r) {
            return true;
        }
    }
    return false;
}

void moe_watchdog_defer(const char *msg, const int *dead, int ndead, double wait_s)
{
    int reporter = 0;
    while (reporter < g.world && is_dead(dead, ndead, reporter)) {
        reporter++;
    }
    if (!g.ready || reporter == g.rank || reporter >= g.world) {
        return;
    }
    moe_poll_t poll;
    if (reporter == 0) {
        MPI_Request req;
        int n = (int)strlen(msg) + 1;
        if (MOE_MPI(MPI_Isend(msg, n, MPI_CHAR, 0, TAG_FAULT, g.comm, &req), NULL) != MOE_OK) {
            return;
        }
        moe_poll_begin(&poll, wait_s, false);
        if (moe_poll_request(&req, &poll, NULL) != MOE_OK) {
            return; /* rank 0 did not take it: this rank reports it */
        }
    }
    /* the reporter ends the job; if it has not within wait_s, this rank does */
    moe_poll_begin(&poll, wait_s, false);
    while (moe_now_ns() < poll.deadline_ns) {
        (void)moe_poll_next(&poll);
    }
}

/* ---- the job's end: waits no poll can bound --------------------------------------- */

/* The transports' and the plug-in's teardown and MPI_Finalize wait inside libraries, not in
 * a poll: a thread ends the process when one lasts past its deadline. It sleeps in slices
 * of at most 0.5 s so that time this process itself spent stopped (a slice that ends over a
 * second late) moves the deadline, as a poll's does. */
#define END_SLICE_NS 500000000LL
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool started;
    int64_t timeout_ns; /* 0: disarmed */
    int64_t deadline_ns;
    int code;
    char msg[MOE_ERROR_MSG_MAX];
} g_end = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void *end_guard(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g_end.mu);
    int64_t last = moe_now_ns();
    for (;;) {
        int64_t now = moe_now_ns();
        if (g_end.timeout_ns > 0 && now - last > 2 * END_SLICE_NS) {
            g_end.deadline_ns += now - last - END_SLICE_NS; /* stopped meanwhile */
        }
        last = now;
        if (g_end.timeout_ns > 0 && now >= g_end.deadline_ns) {
            break;
        }
        int64_t until = g_end.timeout_ns > 0 && g_end.deadline_ns - now < END_SLICE_NS
                            ? g_end.deadline_ns
                            : now + END_SLICE_NS;
        struct timespec ts = {(time_t)(until / 1000000000LL), (long)(until % 1000000000LL)};
        pthread_cond_timedwait(&g_end.cv, &g_end.mu, &ts);
    }
    char msg[MOE_ERROR_MSG_MAX];
    snprintf(msg, sizeof(msg), "%s", g_end.msg);
    int code = g_end.code;
    pthread_mutex_unlock(&g_end.mu);
    if (msg[0] != '\0') {
        fprintf(stderr, "moed: error: %s\n", msg);
    }
    fflush(stdout);
    fflush(stderr);
    _exit(code);
    return NULL;
}

void moe_watchdog_end_arm(double timeout_s, int code, const char *msg)
{
    pthread_mutex_lock(&g_end.mu);
    if (!g_end.started && timeout_s > 0) {
        pthread_condattr_t attr;
        pthread_t tid;
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC); /* moe_now_ns()'s clock */
        pthread_cond_init(&g_end.cv, &attr);
        pthread_condattr_destroy(&attr);
        if (pthread_create(&tid, NULL, end_guard, NULL) == 0) {
            pthread_detach(tid);
            g_end.started = true;
        }
    }
    g_end.timeout_ns = timeout_s > 0 ? (int64_t)(timeout_s * 1e9) : 0;
    g_end.deadline_ns = moe_now_ns() + g_end.timeout_ns;
    g_end.code = code;
    snprintf(g_end.msg, sizeof(g_end.msg), "%s", msg != NULL ? msg : "");
    if (g_end.started) {
        pthread_cond_signal(&g_end.cv);
    }
    pthread_mutex_unlock(&g_end.mu);
}

void moe_watchdog_end_disarm(void)
{
    moe_watchdog_end_arm(0, 0, NULL);
}
