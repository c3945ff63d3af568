#include "moe/stop.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
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

/* Whether this process judges mpirun's SIGCONT (rank 0), and when it last saw its launcher
 * (parent process: mpirun, when rank 0 runs on mpirun's node) stopped; 0: never. */
static volatile sig_atomic_t g_judge_cont = 0;
static volatile int64_t g_launcher_stopped_ns = 0;
static int64_t g_launcher_seen_ns = 0;
#define LAUNCHER_LOOK_NS 20000000LL      /* the launcher's state is read every 20 ms at most */
#define LAUNCHER_RESUMED_NS 2000000000LL /* a SIGCONT this soon after it was seen stopped */

/* mpirun ends a job (Ctrl-C, a lost rank, MPI_Abort) with SIGCONT to every rank, then
 * SIGTERM only odls_base_sigkill_timeout later, and SIGKILL soon after: with the 10 s of
 * docs/faults.md, a rank that waits for SIGTERM loses 10 s, and then has little time. But mpirun also
 * passes on a SIGCONT it receives itself (ess_base_forward_signals): after a pause of mpirun
 * alone (SIGSTOP, then SIGCONT) the ranks, which ran on, get one too. Rank 0 judges: a
 * SIGCONT to it while it was running (it polled within the last 0.5 s) is mpirun ending the
 * job, unless it saw its launcher stopped within the last 2 s (mpirun resumed: ignored); its
 * stop reaches the other ranks through the watchdog's channel within a poll, and mpirun's
 * SIGTERM follows anyway. A rank that was stopped itself (SIGSTOP, a debugger) is being
 * resumed: ignored. Other ranks ignore SIGCONT: their launcher may be an orted, which a
 * pause of mpirun does not stop. */
static void on_continue(int sig)
{
    int64_t alive = g_alive_ns, now = moe_now_ns(), paused = g_launcher_stopped_ns;
    if (!g_judge_cont || g_stop_signal != 0 || alive <= 0 || now - alive >= 500000000LL) {
        return;
    }
    if (paused > 0 && now - paused < LAUNCHER_RESUMED_NS) {
        return;
    }
    g_stop_origin = -1;
    g_stop_signal = sig;
}

/* Rank 0, from its polls: is its launcher (parent process) stopped now? */
static void look_at_launcher(int64_t now)
{
    if (!g_judge_cont || now - g_launcher_seen_ns < LAUNCHER_LOOK_NS) {
        return;
    }
    g_launcher_seen_ns = now;
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)getppid());
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return;
    }
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) {
        return;
    }
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')'); /* "pid (comm) S ...": comm may hold spaces */
    if (paren != NULL && (paren[1] == ' ') && (paren[2] == 'T' || paren[2] == 't')) {
        g_launcher_stopped_ns = now;
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
    look_at_launcher(now_ns);
}

void moe_stop_mpi_init_begin(void)
{
    const char *r = getenv("OMPI_COMM_WORLD_RANK"); /* Open MPI's, before MPI_Init */
    g_in_mpi_init = r == NULL || strcmp(r, "0") == 0 ? 2 : 1;
    g_judge_cont = g_in_mpi_init == 2;
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
