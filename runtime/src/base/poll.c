#include "moe/poll.h"

#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "moe/clock.h"
#include "moe/mpi_check.h"
#include "moe/stop.h"

static moe_poll_hook_t g_hook;
static moe_poll_nap_fn g_nap_fn;
static int64_t g_nap_max_ns = -1; /* -1: not read yet (MOED_POLL_NAP_MAX_US) */
static bool g_yield = true;

void moe_poll_set_yield(bool yield)
{
    g_yield = yield;
}

bool moe_poll_yields(void)
{
    return g_yield;
}

void moe_poll_set_nap(moe_poll_nap_fn fn)
{
    g_nap_fn = fn;
}

void moe_poll_set_hook(moe_poll_hook_t hook)
{
    g_hook = hook;
}

int64_t moe_poll_nap_max_ns(void)
{
    if (g_nap_max_ns < 0) { /* first poll of the process (main thread) */
        const char *env = getenv("MOED_POLL_NAP_MAX_US");
        long us = env != NULL ? strtol(env, NULL, 10) : 0;
        g_nap_max_ns = us >= MOE_POLL_NAP_MIN_NS / 1000 && us <= 100000 ? us * 1000LL
                                                                        : MOE_POLL_NAP_MAX_NS;
    }
    return g_nap_max_ns;
}

void moe_poll_begin_at(moe_poll_t *p, int64_t deadline_ns, bool honour_stop)
{
    p->start_ns = moe_now_ns();
    p->last_ns = p->start_ns;
    p->deadline_ns = deadline_ns;
    p->stopped_ns = 0;
    p->expect_ns = 0;
    p->progress_ns = 0;
    p->spin_ns = MOE_POLL_SPIN_NS;
    p->honour_stop = honour_stop;
}

void moe_poll_begin(moe_poll_t *p, double timeout_s, bool honour_stop)
{
    int64_t now = moe_now_ns();
    moe_poll_begin_at(p, timeout_s > 0 ? now + (int64_t)(timeout_s * 1e9) : 0, honour_stop);
}

double moe_poll_waited_s(const moe_poll_t *p)
{
    return (double)(moe_now_ns() - p->start_ns - p->stopped_ns) * 1e-9;
}

/* The nap after waited_ns of a wait that spins for its first spin_ns. */
static int64_t nap_after(int64_t waited_ns, int64_t spin_ns)
{
    if (waited_ns <= spin_ns) {
        return 0;
    }
    int64_t nap = waited_ns / 8, cap = moe_poll_nap_max_ns();
    nap = nap < MOE_POLL_NAP_MIN_NS ? MOE_POLL_NAP_MIN_NS : nap;
    return nap > cap ? cap : nap;
}

int64_t moe_poll_nap_ns(int64_t waited_ns)
{
    return nap_after(waited_ns, MOE_POLL_SPIN_NS);
}

void moe_poll_spin(moe_poll_t *p, int64_t spin_ns)
{
    p->spin_ns = spin_ns < MOE_POLL_SPIN_NS       ? MOE_POLL_SPIN_NS
                 : spin_ns > MOE_POLL_SPIN_MAX_NS ? MOE_POLL_SPIN_MAX_NS
                                                  : spin_ns;
}

int64_t moe_poll_spin_for(int64_t typical_ns)
{
    if (typical_ns <= 0 || typical_ns > MOE_POLL_SPIN_MAX_NS) {
        return MOE_POLL_SPIN_NS; /* not known, or a long wait: nap after the usual spin */
    }
    int64_t spin = typical_ns + typical_ns / 4 + MOE_POLL_NAP_MIN_NS;
    return spin < MOE_POLL_SPIN_NS ? MOE_POLL_SPIN_NS
           : spin > MOE_POLL_SPIN_MAX_NS ? MOE_POLL_SPIN_MAX_NS : spin;
}

void moe_poll_expect(moe_poll_t *p, int64_t end_ns)
{
    p->expect_ns = end_ns > 0 ? end_ns : 0;
}

void moe_poll_progress(moe_poll_t *p, int64_t now)
{
    p->progress_ns = now;
}

/* Within MOE_POLL_SPIN_NS of reported progress: the bytes are flowing. */
static bool poll_flowing(const moe_poll_t *p, int64_t now)
{
    return p->progress_ns > 0 && now - p->progress_ns < MOE_POLL_SPIN_NS;
}

int64_t moe_poll_nap_at(const moe_poll_t *p, int64_t now)
{
    int64_t nap;
    if (poll_flowing(p, now)) {
        return 0; /* the bytes are flowing: both ends keep calling into MPI */
    }
    if (p->expect_ns > 0 && now < p->expect_ns) {
        nap = p->expect_ns - now;
        nap = nap > MOE_POLL_QUIET_MAX_NS ? MOE_POLL_QUIET_MAX_NS : nap;
    } else if (p->expect_ns > 0) {
        nap = moe_poll_nap_ns(now - p->expect_ns + MOE_POLL_SPIN_NS + 1);
    } else {
        nap = nap_after(now - p->start_ns - p->stopped_ns, p->spin_ns);
    }
    if (p->deadline_ns > 0 && now + nap > p->deadline_ns) {
        nap = p->deadline_ns - now; /* the watchdog fires on time */
    }
    return nap > 0 ? nap : 0;
}

/* Sleep `nap` ns (a signal cuts it short: nanosleep is never restarted; so does a peer's
 * post with the transport's nap: then the backoff starts again from now). */
static void poll_nap(moe_poll_t *p, int64_t nap)
{
    int how = nap > 0 && g_nap_fn != NULL ? g_nap_fn(nap) : MOE_NAP_CANNOT;
    if (nap > 0 && how == MOE_NAP_CANNOT) {
        struct timespec ts = {(time_t)(nap / 1000000000LL), (long)(nap % 1000000000LL)};
        nanosleep(&ts, NULL);
    }
    if (how == MOE_NAP_POSTED) {
        p->expect_ns = moe_now_ns();
    }
}

moe_status_t moe_poll_next(moe_poll_t *p)
{
    int64_t now = moe_now_ns();
    if (now - p->last_ns > MOE_POLL_STOPPED_GAP_NS) {
        /* SIGSTOP (or a starved machine): the peers had no chance to answer meanwhile */
        int64_t gap = now - p->last_ns;
        p->stopped_ns += gap;
        p->deadline_ns += p->deadline_ns > 0 ? gap : 0;
        p->expect_ns += p->expect_ns > 0 ? gap : 0;
        p->progress_ns = 0;
    }
    p->last_ns = now;
    moe_stop_alive(now);
    if (p->honour_stop && moe_stop_requested()) {
        return MOE_ERR_INTERRUPTED;
    }
    moe_status_t st = g_hook != NULL ? g_hook() : MOE_OK;
    if (p->deadline_ns > 0 && now >= p->deadline_ns) {
        return MOE_ERR_TIMEOUT;
    }
    if (st == MOE_OK && poll_flowing(p, now)) {
        if (g_yield) {
            sched_yield(); /* bytes flowing: test again soon, a rank sharing this core first */
        }
    } else if (st == MOE_OK) {
        poll_nap(p, moe_poll_nap_at(p, now));
    }
    return st;
}
moe_status_t moe_poll_request(MPI_Request *req, moe_poll_t *p, moe_error_t *err)
{
    for (;;) {
        int done = 0;
        moe_status_t st = MOE_MPI(MPI_Test(req, &done, MPI_STATUS_IGNORE), err);
        if (st != MOE_OK || done) {
            return st;
        }
        st = moe_poll_next(p);
        if (st != MOE_OK) { /* a message, generic: callers that know what waited say more */
            return st == MOE_ERR_INTERRUPTED
                       ? moe_error_set(err, st, "stop requested while waiting (%.1f s)",
                                       moe_poll_waited_s(p))
                   : st == MOE_ERR_TIMEOUT
                       ? moe_error_set(err, st, "no answer within %.1f s", moe_poll_waited_s(p))
                       : moe_error_set(err, st, "the wait ended: %s", moe_status_string(st));
        }
    }
}
