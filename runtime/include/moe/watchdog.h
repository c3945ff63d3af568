/* The job's side channel for faults: liveness pings, stop requests passed between ranks, and
 * fault notices to rank 0, on the watchdog's own duplicate of the job's communicator.
 *
 * Every poll (moe/poll.h) services it: a rank that waits answers pings, takes in a stop
 * another rank passed on, and (rank 0) learns that another rank's watchdog fired. So when a
 * wait times out, the rank can tell a peer that is stopped, killed or hung (no answer within
 * a second) from one that merely waits too, and name only the former; and rank 0, told of
 * the fault wherever it waits, writes the report of the completed steps before the job
 * ends. */
#ifndef MOE_WATCHDOG_H
#define MOE_WATCHDOG_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "moe/status.h"

/* Once, after MPI_Init (collective on comm, bounded by timeout_s). Installs the poll hook. */
moe_status_t moe_watchdog_init(MPI_Comm comm, double timeout_s, moe_error_t *err);
/* Service the channel now (the poll hook; also called at step boundaries). Returns
 * MOE_ERR_TIMEOUT once rank 0 holds a fault notice. */
moe_status_t moe_watchdog_tick(void);
/* Ping every other rank and wait up to grace_s for the answers: fills dead[] (ascending) with
 * the ranks that did not answer and returns their count. */
int moe_watchdog_unresponsive(double grace_s, int *dead, int cap);
/* A rank's load progress as its answer carried it: bytes of weights built or read so far,
 * and ns since it last made some (-1: none yet, or no answer). */
typedef struct moe_watchdog_load {
    int64_t bytes, age_ns;
} moe_watchdog_load_t;
/* The same; load[world] (when not NULL) gets every rank's progress, this rank's included. */
int moe_watchdog_unresponsive_progress(double grace_s, int *dead, int cap,
                                       moe_watchdog_load_t *load);
/* This rank made `bytes` of load progress (weights generated, read or packed): counted for
 * the pongs, and the channel is serviced (pings answered, a stop taken in) as a poll would.
 * Start-up's waits then see a rank that loads as busy, not hung (transport/wait.c). Main
 * thread only. */
void moe_watchdog_progress(int64_t bytes);
/* Rank 0: if another rank reported a fault, MOE_ERR_TIMEOUT with its message in err. */
moe_status_t moe_watchdog_notice(moe_error_t *err);
/* A watchdog fired here with message msg; dead[0..ndead) are the ranks that do not answer.
 * The fault is reported once, by rank 0 (which writes the report first) or, when rank 0 is
 * gone, by the lowest rank that answers. Another rank hands msg to rank 0 and waits up to
 * wait_s for the job's end; returns at once on the reporter, and after wait_s on another
 * rank whose reporter did not end the job: the caller then prints msg and aborts. */
void moe_watchdog_defer(const char *msg, const int *dead, int ndead, double wait_s);
/* The job's end (the transports' and the plug-in's teardown, MPI_Finalize): waits inside
 * libraries that no poll bounds. Arm: if the process has not exited (or re-armed, or
 * disarmed) within timeout_s, a thread prints "moed: error: msg" (msg "" prints nothing)
 * and _exits with `code`. Time this process spent stopped does not count. timeout_s <= 0
 * disarms (the watchdog is off: runtime.step_timeout_s 0). */
void moe_watchdog_end_arm(double timeout_s, int code, const char *msg);
void moe_watchdog_end_disarm(void);
/* The bound of the waits before a step_timeout_s is known (start-up before the config). */
#define MOE_WATCHDOG_STARTUP_S 60.0
/* How long a rank whose watchdog fired waits for the reporter (rank 0 writing the report)
 * to end the job before it reports the fault itself. */
#define MOE_WATCHDOG_REPORT_S 20.0

#endif /* MOE_WATCHDOG_H */
