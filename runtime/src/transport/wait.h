/* Waiting on MPI without wasting a core, without hanging, and without ignoring Ctrl-C.
 *
 * Every wait of the runtime on a peer goes through here, from the start-up agreement to the
 * end barrier: each is a non-blocking MPI call polled by moe/poll.h (50 us spin, then naps
 * growing from 20 us to 1 ms: a waiting rank costs little CPU); it returns
 * MOE_ERR_INTERRUPTED as soon as a stop is requested (moe/stop.h); and, as the watchdog,
 * MOE_ERR_TIMEOUT once one wait has lasted runtime.step_timeout_s (60 s until the config
 * is read), with a message naming this rank, the step, layer and phase, what it
 * waits on, and the ranks that no longer answer (moe/watchdog.h), reported once. */
#ifndef MOE_WAIT_H
#define MOE_WAIT_H

#include <mpi.h>
#include <stdint.h>

#include "moe/status.h"

/* Once per process, after MPI_Init: timeout (0 = no watchdog) and the hosts table used in
 * messages ([world][64], kept by the caller). */
void moe_wait_configure(double timeout_s, int rank, int world, const char (*hosts)[64]);
/* Where the caller is, for the watchdog's message. phase must be a static string. */
void moe_wait_set_where(int64_t step, int layer, const char *phase);

/* The waits that start from now on should end at about end_ns (moe_now_ns() time; 0: no
 * guess, the default): they nap towards it (moe/poll.h, moe_poll_expect). The caller sets
 * it before one long wait and clears it after. */
void moe_wait_expect(int64_t end_ns);
/* The wait in progress saw its transfer move (a piece completed): it spins a moment before
 * napping again (moe_poll_progress). Outside a wait: the next wait starts afresh anyway. */
void moe_wait_progress(void);

/* The poll helper for loops that test their own requests: returns MOE_OK to keep waiting
 * (after napping if the spin time is over), or INTERRUPTED / TIMEOUT with err filled.
 * pending: the peers not heard from yet (may be NULL when unknown, e.g. a collective). */
moe_status_t moe_wait_poll(int64_t start_ns, const char *what, const int *pending, int npending,
                           moe_error_t *err);

/* A wait that is not a poll (a tight spin, e.g. --bench's latency rounds, which must not
 * nap) has lasted runtime.step_timeout_s without this process being stopped: the
 * watchdog's check and report, as a poll's timeout does (TIMEOUT, the ranks that no longer
 * answer named, one rank reports); MOE_OK when every rank answers and one still loads its
 * weights (wait on, the bound afresh). pending as moe_wait_poll's. */
moe_status_t moe_wait_timed_out(double waited_s, const char *what, const int *pending,
                                int npending, moe_error_t *err);

/* A wait that started at start_ns ended now: its kind (`what`, a static string) lately
 * lasted that long, and the next wait of the kind spins as long before it naps
 * (moe_poll_spin_for). moe_wait_request, moe_wait_all and moe_transport_wait report
 * theirs; a loop of its own over moe_wait_poll may. */
void moe_wait_ended(const char *what, int64_t start_ns);
/* The spin the next wait of kind `what` takes: moe_poll_spin_for of the longer of its last
 * two lengths (MOE_POLL_SPIN_NS while none is known). */
int64_t moe_wait_spin_of(const char *what);

/* A transport learned that `peer` is gone (e.g. UCX's endpoint error callback): reported
 * like a watchdog that fired on that peer (named, the step, layer and phase; rank 0 writes
 * the report of the completed steps, marked partial), without waiting out the timeout.
 * how: the transport's words for it. Returns MOE_ERR_TIMEOUT with err filled. */
moe_status_t moe_wait_peer_lost(int peer, const char *what, const char *how, moe_error_t *err);

/* Add `peer` to list[0..n) unless it is there already (at most cap entries); returns the
 * new count. The watchdog names each peer it waits on once. */
int moe_wait_note_peer(int *list, int n, int cap, int peer);

/* Wait for n point-to-point requests; peers[i] is the rank at the other end of reqs[i],
 * named by the watchdog while its request is pending. */
moe_status_t moe_wait_all(MPI_Request *reqs, const int *peers, int n, const char *what,
                          moe_error_t *err);

/* Wait for one request (a non-blocking collective, typically). */
moe_status_t moe_wait_request(MPI_Request *req, const char *what, moe_error_t *err);
/* MPI_Ibcast, waited for the same way (what: for the watchdog's message). */
moe_status_t moe_wait_bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm,
                            const char *what, moe_error_t *err);
/* MPI_Barrier, waited for the same way. */
moe_status_t moe_wait_barrier(MPI_Comm comm, moe_error_t *err);

#endif /* MOE_WAIT_H */
