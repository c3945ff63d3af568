/* Waking a rank that naps (moe/poll.h) when a rank on the same node sends it something.
 *
 * A rank that waits tests its requests, then naps; what arrives during a nap waits for its
 * end. For the master of the default job, waiting ~100 ms for the expert ranks, that was
 * ~1-2 ms a layer after the slower rank's last expert (the nap's backoff, however the wait
 * is guessed: the machine's own noise moves the experts' time by +-5%), and for the expert
 * ranks napping while the master routes, a few tenths of a ms more. So each rank owns a
 * POSIX semaphore (named, opened by the node's other ranks at start, then unlinked: nothing
 * stays in /dev/shm; a name a killed rank left is swept by a later job), naps on it (sem_clockwait with the nap as its bound), and a rank that
 * posts a send to a peer on its node (the rows, the counts) posts the peer's semaphore:
 * the peer wakes at once and its next test finds the message. A rank on another node is
 * not posted (its naps bound the delay as before); where semaphores cannot be made, every
 * nap is a plain sleep. A post can wake a nap that is not waiting for that message: the
 * nap's caller tests and naps again (cost: one test). */
#ifndef MOE_TRANSPORT_WAKE_H
#define MOE_TRANSPORT_WAKE_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "moe/status.h"

/* Collective over comm: this rank's semaphore, the node's ranks' (hosts: [world][64]);
 * moe/poll.h's naps then go through moe_wake_nap. Fails only when MPI does; a semaphore
 * that cannot be made or opened leaves that rank's naps plain. */
moe_status_t moe_wake_setup(MPI_Comm comm, int rank, int world, const char (*hosts)[64],
                            moe_error_t *err);
/* A semaphore name older than this (seconds) is taken for a killed job's: a live job's names
 * exist during its two set-up barriers only (right after the hosts exchange: well under a
 * second in practice), bounded by runtime.step_timeout_s (0: no bound), not by
 * MOE_WATCHDOG_STARTUP_S. A set-up longer than this may lose its names to another job's
 * sweep: its naps are then plain (slower, never wrong). */
#define MOE_WAKE_STALE_S 600.0
/* Unlink the sem.moed.* names in dir (/dev/shm) older than stale_s: what a rank killed during
 * the set-up left. Called by moe_wake_setup; public for its test. */
void moe_wake_sweep(const char *dir, double stale_s);
/* Wake `peer` if it shares this node (nothing otherwise, or before setup). */
void moe_wake_post(int peer);
/* Nap up to ns, ending early when posted or signalled; the posts that came are consumed
 * (the caller tests right after). MOE_NAP_POSTED when a post ended it, MOE_NAP_SLEPT when
 * the time (or a signal) did, MOE_NAP_CANNOT when this rank has no semaphore (moe/poll.h). */
int moe_wake_nap(int64_t ns);
/* Close the semaphores (at the end; accepts no set-up, and a second call). The exit board
 * below stays. */
void moe_wake_teardown(void);

/* The node's exit board, made with the semaphores: after MPI_Finalize no MPI call can tell
 * whether a rank of the node ended, and a rank stopped (SIGSTOP) or hung past Open MPI's
 * last fence would hold mpirun forever while the others have left. Each rank marks the
 * board after MPI_Finalize (or as it ends without it), then waits for its node's other
 * ranks' marks. */
void moe_wake_exit_mark(void);
/* Wait up to timeout_s (0: no bound; time this process itself spent stopped not counted:
 * a moe/poll.h wait, so after MPI_Finalize its hook must be gone) for every rank of this
 * node to have marked the board; the number that did not (0: all
 * did, or there is no board) and the first `cap` of them in late. *report: this rank is
 * the node's lowest rank that marked it, the one to say so. */
int moe_wake_exit_wait(double timeout_s, int *late, int cap, bool *report);
/* A rank's host name as the set-up had it ("?" without a board). */
const char *moe_wake_exit_host(int rank);

#endif /* MOE_TRANSPORT_WAKE_H */
