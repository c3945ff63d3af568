/* Waking a napping rank of the same node (transport/wake.h). */
#define _GNU_SOURCE
#include "transport/wake.h"

#include <dirent.h>
#include <fcntl.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "moe/clock.h"
#include "moe/poll.h"
#include "transport/wait.h"

static sem_t *g_own = SEM_FAILED;
static sem_t **g_peer; /* [world]: a local peer's semaphore, else NULL */
static int g_world;

static void sem_name(char *out, size_t len, const char *id, int rank)
{
    snprintf(out, len, "/moed.%s.%d", id, rank);
}

/* Remove the names a killed job left: a rank killed between creating its semaphore and the
 * unlink after the second barrier leaves /dev/shm/sem.moed.<job>.<rank>. A live job's names
 * exist only during its two set-up barriers (bounded by runtime.step_timeout_s, 0: none;
 * in practice well under a second), so a name older than MOE_WAKE_STALE_S is taken for a
 * dead job's (a live one that old only loses its wake-ups: plain naps). Names of other jobs
 * that are younger are left alone, whatever node their rank 0 is on. */
void moe_wake_sweep(const char *dir, double stale_s)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        return;
    }
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        struct stat sb;
        if (strncmp(e->d_name, "sem.moed.", 9) != 0 ||
            fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode) ||
            difftime(now, sb.st_mtime) < stale_s) {
            continue;
        }
        unlinkat(dirfd(d), e->d_name, 0); /* another rank may have removed it: ENOENT */
    }
    closedir(d);
}

moe_status_t moe_wake_setup(MPI_Comm comm, int rank, int world, const char (*hosts)[64],
                            moe_error_t *err)
{
    moe_wake_teardown(); /* a second set-up replaces the first */
    moe_wake_sweep("/dev/shm", MOE_WAKE_STALE_S);
    char id[32] = {0};
    if (rank == 0) { /* one name space per job: rank 0's pid and start time */
        snprintf(id, sizeof(id), "%x.%llx", (unsigned)getpid(),
                 (unsigned long long)(moe_now_ns() & 0xffffffffffffULL));
    }
    moe_status_t st = moe_wait_bcast(id, (int)sizeof(id), MPI_CHAR, 0, comm,
                                     "the wake-up names", err);
    char name[64];
    sem_name(name, sizeof(name), id, rank);
    if (st == MOE_OK) {
        g_own = sem_open(name, O_CREAT | O_EXCL, 0600, 0);
        st = moe_wait_barrier(comm, err); /* every rank's semaphore exists */
    }
    g_peer = st == MOE_OK ? calloc((size_t)world, sizeof(*g_peer)) : NULL;
    g_world = g_peer != NULL ? world : 0;
    if (g_world > 0) {
        g_peer[rank] = g_own != SEM_FAILED ? g_own : NULL; /* a post to itself: for tests */
    }
    for (int p = 0; p < g_world; p++) {
        if (p != rank && strncmp(hosts[p], hosts[rank], 64) == 0) {
            char pn[64];
            sem_name(pn, sizeof(pn), id, p);
            sem_t *s = sem_open(pn, 0);
            g_peer[p] = s != SEM_FAILED ? s : NULL;
        }
    }
    if (st == MOE_OK) {
        st = moe_wait_barrier(comm, err); /* every peer opened its local peers' */
    }
    if (g_own != SEM_FAILED) {
        sem_unlink(name); /* open handles stay valid; nothing is left behind */
        moe_poll_set_nap(moe_wake_nap);
    }
    return st;
}

void moe_wake_post(int peer)
{
    if (peer >= 0 && peer < g_world && g_peer[peer] != NULL) {
        sem_post(g_peer[peer]);
    }
}

int moe_wake_nap(int64_t ns)
{
    if (g_own == SEM_FAILED) {
        return MOE_NAP_CANNOT;
    }
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    int64_t end = (int64_t)until.tv_sec * 1000000000LL + until.tv_nsec + ns;
    until.tv_sec = (time_t)(end / 1000000000LL);
    until.tv_nsec = (long)(end % 1000000000LL);
    bool posted = sem_clockwait(g_own, CLOCK_MONOTONIC, &until) == 0; /* else timeout, EINTR */
    while (sem_trywait(g_own) == 0) {
        posted = true;
    }
    return posted ? MOE_NAP_POSTED : MOE_NAP_SLEPT;
}

void moe_wake_teardown(void)
{
    for (int p = 0; p < g_world; p++) {
        if (g_peer[p] != NULL && g_peer[p] != g_own) {
            sem_close(g_peer[p]);
        }
    }
    free(g_peer);
    g_peer = NULL;
    g_world = 0;
    if (g_own != SEM_FAILED) {
        moe_poll_set_nap(NULL);
        sem_close(g_own);
        g_own = SEM_FAILED;
    }
}
