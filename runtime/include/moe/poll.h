/* The one way moed waits on a peer: a deadline-based poll of MPI requests.
 *
 * Every wait that can block on another rank (the step's exchanges, the start-up agreement
 * and handshake, the profiler's clock sync and record gather) is a non-blocking MPI call
 * polled here: it spins 50 us (latency; a kind of wait that lately ended within 1 ms spins
 * through that long: moe_poll_spin_for), then naps between tests, each nap an eighth of the
 * time waited so far, from 20 us up to 1 ms (MOED_POLL_NAP_MAX_US overrides the cap, for
 * measurements): a rank that only waits costs almost no CPU and leaves the core to ranks
 * that compute (3 ranks on 2 cores), while a wait overshoots its peer by at most an eighth
 * of its length (or the cap), so a short decode step keeps its latency. A nap never runs
 * past the deadline, and a stop request or a peer's fault is seen within one nap (<= the
 * cap), well inside the watchdog's bounds. It ends with MOE_ERR_INTERRUPTED on a stop
 * request (when the wait honours it) and with MOE_ERR_TIMEOUT at its deadline. Time this
 * process itself spent stopped (SIGSTOP: a gap of over a second between two polls) moves
 * the deadline: a resumed rank does not blame the peers it was waiting for.
 *
 * A wait may carry an expectation of when it ends (moe_poll_expect: the master's long wait
 * for the experts, guessed from the layer's last two: layer/moe_layer.c): its naps then run
 * straight to that time, at most MOE_POLL_QUIET_MAX_NS each, and back off from it as from a
 * wait's start once it has passed. A master waiting ~100 ms for two expert ranks otherwise
 * wakes ~100 times, each wake-up taken from an expert rank's core (~1.5% of that rank's
 * compute on 2 cores); with the expectation it wakes a few times. A nap may also end early
 * when a peer on the node posts a send to this rank (moe_poll_set_nap, transport/wake.h).
 *
 * A wait also spins (yielding the core between tests where the node's ranks share cores:
 * moe_poll_set_yield) for
 * MOE_POLL_SPIN_NS after each sign of progress its caller reports (moe_poll_progress: a
 * piece of a transfer completed). A large message that MPI copies through shared memory in
 * fragments (no single-copy mechanism: a container or a host that forbids cross-process
 * reads) moves only while both ends call into MPI: napping between fragments made such an
 * exchange ~18x slower than MPI's own blocking calls. Progress keeps both ends polling while
 * the bytes flow; a wait that sees none backs off as above.
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
    int64_t expect_ns;   /* when the wait should end (moe_poll_expect); 0: no guess */
    int64_t progress_ns; /* the last progress the caller reported (moe_poll_progress); 0: none */
    int64_t spin_ns;     /* how long the wait spins before its first nap (moe_poll_spin) */
    bool honour_stop;
} moe_poll_t;

/* Start a wait of at most timeout_s (<= 0: no deadline). */
void moe_poll_begin(moe_poll_t *p, double timeout_s, bool honour_stop);
/* Start a wait that ends at an absolute moe_now_ns() time (0: none). */
void moe_poll_begin_at(moe_poll_t *p, int64_t deadline_ns, bool honour_stop);
/* The first nap after the spin, the longest one, and the spin itself (ns); the longest
 * spin of a wait that usually ends soon (moe_poll_spin_for). */
#define MOE_POLL_SPIN_NS 50000LL
#define MOE_POLL_SPIN_MAX_NS 1000000LL
#define MOE_POLL_NAP_MIN_NS 20000LL
#define MOE_POLL_NAP_MAX_NS 1000000LL
/* A gap this long between two polls (or tests of a wait that spins) means this process
 * was stopped, not its peers. */
#define MOE_POLL_STOPPED_GAP_NS 1000000000LL
/* The longest nap towards an expected end (the watchdog's liveness pings are answered
 * within it, a stop signal cuts it short). */
#define MOE_POLL_QUIET_MAX_NS 100000000LL

/* The nap after waiting waited_ns: 0 during the spin, else waited/8 within [min, cap]. */
int64_t moe_poll_nap_ns(int64_t waited_ns);
/* The cap in force: MOE_POLL_NAP_MAX_NS, or MOED_POLL_NAP_MAX_US (20..100000) when set. */
int64_t moe_poll_nap_max_ns(void);
/* The wait spins for its first spin_ns (clamped to [MOE_POLL_SPIN_NS,
 * MOE_POLL_SPIN_MAX_NS]) before its first nap; moe_poll_begin sets MOE_POLL_SPIN_NS. */
void moe_poll_spin(moe_poll_t *p, int64_t spin_ns);
/* The spin for a wait of a kind that lately lasted typical_ns (0: not known): a wait that
 * ends within MOE_POLL_SPIN_MAX_NS spins through it (a quarter and 20 us longer), since a
 * nap and the wake-up after it cost more than such a wait (tens of us on a VM whose idle
 * vCPUs halt); a longer or unknown one spins MOE_POLL_SPIN_NS. */
int64_t moe_poll_spin_for(int64_t typical_ns);
/* The wait should end at about end_ns (a moe_now_ns() time; 0: no guess). */
void moe_poll_expect(moe_poll_t *p, int64_t end_ns);
/* Something the wait waits for moved at `now` (a piece of a transfer completed): spin for
 * MOE_POLL_SPIN_NS from now (yielding between tests) before napping again. */
void moe_poll_progress(moe_poll_t *p, int64_t now);
/* The nap the poll takes at `now` (ns): 0 within MOE_POLL_SPIN_NS of reported progress,
 * else moe_poll_nap_ns of the time waited without an
 * expectation; with one, until it (at most MOE_POLL_QUIET_MAX_NS) while it lies ahead,
 * then moe_poll_nap_ns of the time since it, at least the first nap (no spin). Never past
 * the deadline. */
int64_t moe_poll_nap_at(const moe_poll_t *p, int64_t now);
/* One round: MOE_OK to keep waiting (after a nap once the spin is over), else
 * MOE_ERR_INTERRUPTED, MOE_ERR_TIMEOUT, or what the hook returned. Sets no message. */
moe_status_t moe_poll_next(moe_poll_t *p);
/* Seconds waited so far, less the time this process was stopped. */
double moe_poll_waited_s(const moe_poll_t *p);
/* Test *req until it completes (MOE_OK) or the poll ends (its status; the request stays
 * pending). An MPI failure is MOE_ERR_MPI with err filled; the poll's end fills err with a
 * generic line (a stop, no answer within the time), for the caller to replace when it knows
 * what it waited for. err may be NULL. */
moe_status_t moe_poll_request(MPI_Request *req, moe_poll_t *p, moe_error_t *err);

/* How a nap sleeps: fn(ns) sleeps up to ns and returns MOE_NAP_SLEPT (the whole nap, or
 * cut by a signal), MOE_NAP_POSTED (a peer posted: something was sent to this rank), or
 * MOE_NAP_CANNOT (nothing slept: then a plain nanosleep). NULL: always nanosleep. The
 * transport layer sets one that a peer on the node can cut short (transport/wake.h). After
 * a post the wait backs off afresh from the post's time, past any expected end: the peers
 * are finishing, and the message a post announced may take a moment to be seen. */
enum { MOE_NAP_CANNOT = -1, MOE_NAP_SLEPT = 0, MOE_NAP_POSTED = 1 };
typedef int (*moe_poll_nap_fn)(int64_t ns);
void moe_poll_set_nap(moe_poll_nap_fn fn);

/* Whether a wait that spins while bytes flow yields the core between tests (default: yes).
 * The yield lets a rank sharing the core run first (3 ranks on 2 cores); where each rank
 * has a core of its own it only costs a system call per test (~0.65 us on a 2-vCPU VM),
 * which a small exchange pays in its latency. runtime.bind's start-up sets it from the
 * node's ranks, their threads and its CPUs (app/bind.c). */
void moe_poll_set_yield(bool yield);
bool moe_poll_yields(void);

/* The hook run on every poll (NULL: none). A non-OK status ends the wait with it. */
typedef moe_status_t (*moe_poll_hook_t)(void);
void moe_poll_set_hook(moe_poll_hook_t hook);

#endif /* MOE_POLL_H */
