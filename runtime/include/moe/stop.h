/* Stop requests: SIGINT and SIGTERM (Ctrl-C on mpirun, or mpirun ending the job because a
 * rank died) set one flag that every wait loop checks, so a rank leaves an exchange it can
 * no longer finish within one poll and can flush what it measured before Open MPI's
 * SIGKILL follows (odls_base_sigkill_timeout, 1 s by default). */
#ifndef MOE_STOP_H
#define MOE_STOP_H

#include <stdbool.h>

/* Install the SIGINT/SIGTERM handlers (main, once). */
void moe_stop_install_handlers(void);
/* True once a stop was requested (signal-safe flag; cheap: one load). */
bool moe_stop_requested(void);
/* The signal that requested it, 0 if none. */
int moe_stop_signal(void);

#endif /* MOE_STOP_H */
