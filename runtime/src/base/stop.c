#include "moe/stop.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "moe/clock.h"

static volatile sig_atomic_t g_stop_signal = 0;
static volatile sig_atomic_t g_stop_origin = -1;
static volatile sig_atomic_t g_in_mpi_init = 0; /* 1: exit at once; 2: and say so (rank 0) */
/* When this process last showed it runs (a poll); 0: never. int64_t is written by the
 * process and only read by the handler, which at worst misjudges one SIGCONT. */
static volatile int64_t g_alive_ns = 0;

/* mpirun ends a job (Ctrl-C, a lost rank, MPI_Abort) with SIGCONT to every rank, then
 * SIGTERM only odls_base_sigkill_timeout later, and SIGKILL soon after: with the README's
 * 10 s, a rank that waits for SIGTERM loses 10 s, and then has little time. A SIGCONT to a
 * rank that was running (it polled within the last 0.5 s) can only be that, so it stops the
 * rank like SIGTERM. One that was stopped (SIGSTOP, a debugger) is being resumed: ignored. */
static void on_continue(int sig)
{
    int64_t alive = g_alive_ns;
    if (g_stop_signal == 0 && alive > 0 && moe_now_ns() - alive < 500000000LL) {
        g_stop_origin = -1;
        g_stop_signal = sig;
    }
}

static void on_stop_signal(int sig)
{
    if (g_in_mpi_init) {
        /* MPI_Init may never return once mpirun tears the job down: leave now, and say
         * why (only what is async-signal-safe here) */
        static const char msg[] = "moed: error: stopped by a signal during MPI start-up "
                                  "(MPI_Init), before any step\n";
        if (g_in_mpi_init == 2) {
            ssize_t n = write(STDERR_FILENO, msg, sizeof(msg) - 1);
            (void)n;
        }
        _exit(130);
    }
    if (g_stop_signal == 0 || g_stop_origin >= 0) {
        g_stop_origin = -1; /* a signal of our own outranks one passed on */
        g_stop_signal = sig;
    }
}

void moe_stop_install_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    /* a signal must not fail a system call inside MPI (EINTR): the flag is what counts */
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sa.sa_handler = on_continue;
    sigaction(SIGCONT, &sa, NULL);
}

void moe_stop_alive(int64_t now_ns)
{
    g_alive_ns = now_ns;
}

void moe_stop_mpi_init_begin(void)
{
    const char *r = getenv("OMPI_COMM_WORLD_RANK"); /* Open MPI's, before MPI_Init */
    g_in_mpi_init = r == NULL || strcmp(r, "0") == 0 ? 2 : 1;
    moe_stop_install_handlers();
}

void moe_stop_mpi_init_end(void)
{
    g_in_mpi_init = 0;
}

bool moe_stop_requested(void)
{
    return g_stop_signal != 0;
}

int moe_stop_signal(void)
{
    return g_stop_signal;
}

int moe_stop_origin(void)
{
    return g_stop_origin;
}

void moe_stop_request_from(int sig, int origin)
{
    if (g_stop_signal == 0) {
        g_stop_origin = origin;
        g_stop_signal = sig != 0 ? sig : SIGTERM;
    }
}

const char *moe_stop_signal_name(int sig)
{
    switch (sig) {
    case SIGINT:
        return "SIGINT";
    case SIGTERM:
        return "SIGTERM";
    case SIGHUP:
        return "SIGHUP";
    case SIGKILL:
        return "SIGKILL";
    case SIGCONT:
        return "mpirun ending the job (SIGCONT: Ctrl-C, a signal to mpirun, a lost rank)";
    default:
        return "a signal";
    }
}
