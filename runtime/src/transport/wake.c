/* Waking a napping rank of the same node (transport/wake.h). */
#define _GNU_SOURCE
#include "transport/wake.h"

#include <dirent.h>
#include <fcntl.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

/* The node's exit board (moe_wake_exit_*): a byte a rank of the job, in shared memory made
 * by the node's lowest rank, opened by the others, unlinked after the set-up: BOARD_HERE
 * once the rank has it (kept only where every rank of the node has it), BOARD_ENDED. */
enum { BOARD_HERE = 1, BOARD_ENDED = 2 };
static uint8_t *g_board;
static size_t g_board_len;
static int g_board_rank = -1;
static bool *g_board_local; /* [g_board_len] ranks of this node, this one included */
static char (*g_board_hosts)[64];

static void board_release(void)
{
    if (g_board != NULL) {
        munmap(g_board, g_board_len);
    }
    free(g_board_local);
    free(g_board_hosts);
    g_board = NULL;
    g_board_local = NULL;
    g_board_hosts = NULL;
    g_board_len = 0;
    g_board_rank = -1;
}

/* The board of the node whose lowest rank is `leader`: made (create) or opened. */
static uint8_t *board_map(const char *id, int leader, size_t len, bool create)
{
    char name[64];
    snprintf(name, sizeof(name), "/moed.%s.exit.%d", id, leader);
    int fd = shm_open(name, create ? O_CREAT | O_EXCL | O_RDWR : O_RDWR, 0600);
    if (fd < 0) {
        return NULL;
    }
    void *p = MAP_FAILED;
    if (!create || ftruncate(fd, (off_t)len) == 0) {
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    close(fd);
    return p != MAP_FAILED ? p : NULL;
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
        if ((strncmp(e->d_name, "sem.moed.", 9) != 0 && strncmp(e->d_name, "moed.", 5) != 0) ||
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
    int leader = rank;
    for (int p = 0; p < rank; p++) {
        leader = leader == rank && strncmp(hosts[p], hosts[rank], 64) == 0 ? p : leader;
    }
    board_release();
    if (st == MOE_OK) {
        g_own = sem_open(name, O_CREAT | O_EXCL, 0600, 0);
        g_board = leader == rank ? board_map(id, leader, (size_t)world, true) : NULL;
        st = moe_wait_barrier(comm, err); /* every rank's semaphore exists, and the board */
    }
    if (st == MOE_OK && leader != rank) {
        g_board = board_map(id, leader, (size_t)world, false);
    }
    g_board_local = g_board != NULL ? calloc((size_t)world, sizeof(bool)) : NULL;
    g_board_hosts = g_board_local != NULL ? malloc((size_t)world * sizeof(*g_board_hosts)) : NULL;
    if (g_board_hosts == NULL) {
        board_release(); /* no board: the exit is not watched */
    } else {
        g_board_len = (size_t)world;
        g_board_rank = rank;
        memcpy(g_board_hosts, hosts, (size_t)world * sizeof(*g_board_hosts));
        for (int p = 0; p < world; p++) {
            g_board_local[p] = strncmp(hosts[p], hosts[rank], 64) == 0;
        }
        __atomic_store_n(&g_board[rank], (uint8_t)BOARD_HERE, __ATOMIC_RELEASE);
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
        st = moe_wait_barrier(comm, err); /* every peer opened its local peers', and the board */
    }
    for (size_t p = 0; g_board != NULL && p < g_board_len; p++) {
        if (g_board_local[p] && __atomic_load_n(&g_board[p], __ATOMIC_ACQUIRE) != BOARD_HERE) {
            board_release(); /* a rank of the node has no board: every rank's exit unwatched */
        }
    }
    if (g_own != SEM_FAILED) {
        sem_unlink(name); /* open handles stay valid; nothing is left behind */
        moe_poll_set_nap(moe_wake_nap);
    }
    if (leader == rank) {
        char bn[64];
        snprintf(bn, sizeof(bn), "/moed.%s.exit.%d", id, leader);
        shm_unlink(bn); /* the node's ranks have it mapped (or not: an unwatched exit) */
    }
    return st;
}

void moe_wake_exit_mark(void)
{
    if (g_board != NULL) {
        __atomic_store_n(&g_board[g_board_rank], (uint8_t)BOARD_ENDED, __ATOMIC_RELEASE);
    }
}

int moe_wake_exit_wait(double timeout_s, int *late, int cap, bool *report)
{
    *report = false;
    if (g_board == NULL) {
        return 0;
    }
    moe_poll_t poll; /* its deadline leaves out time this process spent stopped */
    moe_poll_begin(&poll, timeout_s, false);
    for (;;) {
        int n = 0, lowest_marked = -1;
        for (size_t p = 0; p < g_board_len; p++) {
            if (!g_board_local[p]) {
                continue;
            }
            bool marked = __atomic_load_n(&g_board[p], __ATOMIC_ACQUIRE) == BOARD_ENDED;
            lowest_marked = marked && lowest_marked < 0 ? (int)p : lowest_marked;
            if ((int)p == g_board_rank) {
                continue; /* its node's other ranks */
            }
            if (!marked && n < cap) {
                late[n] = (int)p;
            }
            n += marked ? 0 : 1;
        }
        if (n == 0 || moe_poll_next(&poll) == MOE_ERR_TIMEOUT) {
            *report = n > 0 && lowest_marked == g_board_rank;
            return n;
        }
    }
}

const char *moe_wake_exit_host(int rank)
{
    return g_board_hosts != NULL && rank >= 0 && (size_t)rank < g_board_len
               ? g_board_hosts[rank]
               : "?";
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
