/* Stop requests: SIGINT, SIGTERM and SIGHUP (Ctrl-C on mpirun, mpirun ending the job because
 * a rank died, a signal sent to one rank, a closed terminal) set one flag that every wait
 * loop checks, so a rank leaves an exchange it can no longer finish within one poll and can
 * flush what it measured before Open MPI's SIGKILL follows (odls_base_sigkill_timeout, 1 s
 * by default). A rank that receives a signal passes the stop on to the others (moe/watchdog.h),
 * so a signal to one rank stops the job the same way. */
#ifndef MOE_STOP_H
#define MOE_STOP_H

#include <stdbool.h>

#include <stdint.h>

/* Install the SIGINT/SIGTERM/SIGHUP handlers (main, once), and SIGCONT's: mpirun's first
 * signal when it ends a job, a stop for rank 0 when it was running, unless it saw its
 * launcher (mpirun) stopped within the last 2 s: then mpirun was paused and passes on its
 * own SIGCONT (see stop.c). Other ranks leave SIGCONT to rank 0 and mpirun's SIGTERM. */
void moe_stop_install_handlers(void);
/* This process runs at now_ns (every poll says so): tells mpirun's SIGCONT from a resume.
 * On rank 0 it also reads its launcher's state (/proc/PPID/stat) every 20 ms at most. */
void moe_stop_alive(int64_t now_ns);
/* Around MPI_Init: the handlers are installed, and a stop signal meanwhile ends the process
 * at once (rank 0 says so), since MPI_Init may never return once mpirun ends the job. */
void moe_stop_mpi_init_begin(void);
void moe_stop_mpi_init_end(void);
/* True once a stop was requested (signal-safe flag; cheap: one load). */
bool moe_stop_requested(void);
/* The signal that requested it, 0 if none. */
int moe_stop_signal(void);
/* The rank whose signal it was: -1 this process (or not known), else the rank that passed
 * its stop on. */
int moe_stop_origin(void);
/* A stop passed on by rank `origin` that received signal `sig` (kept if one is already
 * requested: the first cause wins). */
void moe_stop_request_from(int sig, int origin);
/* "SIGINT" style name of a signal number (static text; "signal N" is not possible, so
 * unknown numbers give "a signal"). */
const char *moe_stop_signal_name(int sig);

#endif /* MOE_STOP_H */
