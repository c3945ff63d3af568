/* The one way moed waits on a peer: a deadline-based poll of MPI requests.
 *
 * Every wait that can block on another rank (the step's exchanges, the start-up agreement
 * and handshake, the profiler's clock sync and record gather) is a non-blocking MPI call
 * polled here: it spins 50 us (latency), then naps 20 us between tests (so a rank that only
 * waits leaves the core to ranks that compute), ends with MOE_ERR_INTERRUPTED on a stop
 * request (when the wait honours it) and with MOE_ERR_TIMEOUT at its deadline. Time this
 * process itself spent stopped (SIGSTOP: a gap of over a second between two polls) moves
 * the deadline: a resumed rank does not blame the peers it was waiting for.
 *
 * A hook, set once by the transport layer, runs on every poll: it answers liveness pings
 * and learns of faults other ranks report, so every wait also serves the watchdog. */
#ifndef MOE_POLL_H
#define MOE_POLL_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "moe/status.h"

typedef struct moe_poll {
    int64_t start_ns;    /* when the wait began (for the spin and the messages) */
    int64_t deadline_ns; /* 0: none */
    int64_t last_ns;     /* the previous poll (to see this process was stopped) */
    int64_t stopped_ns;  /* time this process spent stopped during the wait */
    bool honour_stop;
} moe_poll_t;

/* Start a wait of at most timeout_s (<= 0: no deadline). */
void moe_poll_begin(moe_poll_t *p, double timeout_s, bool honour_stop);
/* Start a wait that ends at an absolute moe_now_ns() time (0: none). */
void moe_poll_begin_at(moe_poll_t *p, int64_t deadline_ns, bool honour_stop);
/* One round: MOE_OK to keep waiting (after a nap once the spin is over), else
 * MOE_ERR_INTERRUPTED, MOE_ERR_TIMEOUT, or what the hook returned. Sets no message. */
moe_status_t moe_poll_next(moe_poll_t *p);
/* Seconds waited so far, less the time this process was stopped. */
double moe_poll_waited_s(const moe_poll_t *p);
/* Test *req until it completes (MOE_OK) or the poll ends (its status; the request stays
 * pending). An MPI failure is MOE_ERR_MPI with err filled. */
moe_status_t moe_poll_request(MPI_Request *req, moe_poll_t *p, moe_error_t *err);

/* The hook run on every poll (NULL: none). A non-OK status ends the wait with it. */
typedef moe_status_t (*moe_poll_hook_t)(void);
void moe_poll_set_hook(moe_poll_hook_t hook);

#endif /* MOE_POLL_H */
