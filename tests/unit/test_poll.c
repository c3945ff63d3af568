/* The waiting primitive (moe/poll.h), the fault channel on one rank (moe/watchdog.h), the
 * stop signals (moe/stop.h): deadlines, a process's own stop not counted, SIGCONT; and the
 * nap a peer's post ends (transport/wake.h). */
#include <fcntl.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "moe/clock.h"
#include "moe/poll.h"
#include "moe/stop.h"
#include "moe/watchdog.h"
#include "transport/wait.h"
#include "transport/wake.h"
#include "test_util.h"

static void nap_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* A wait ends at its deadline, not before, and not much after. */
static void test_deadline(void)
{
    moe_poll_t p;
    moe_poll_begin(&p, 0.05, true);
    int64_t t0 = moe_now_ns();
    moe_status_t st;
    while ((st = moe_poll_next(&p)) == MOE_OK) {
    }
    double took = (double)(moe_now_ns() - t0) * 1e-9;
    CHECK_INT_EQ(st, MOE_ERR_TIMEOUT);
    /* not much after: a few seconds bound a wait that would not end (a busy machine can
     * delay the last nap by tens of ms, never by seconds) */
    CHECK(took >= 0.05 && took < 5.0);
}

/* The nap schedule: nothing during the spin, then an eighth of the time waited, from the
 * first nap up to the cap, never shrinking as the wait goes on. So a stop or a peer's
 * fault is seen within one cap (1 ms) of waiting, whatever the wait's length. */
static void test_nap(void)
{
    CHECK_INT_EQ(moe_poll_nap_max_ns(), MOE_POLL_NAP_MAX_NS); /* MOED_POLL_NAP_MAX_US unset */
    CHECK_INT_EQ(moe_poll_nap_ns(0), 0);
    CHECK_INT_EQ(moe_poll_nap_ns(MOE_POLL_SPIN_NS), 0);
    CHECK_INT_EQ(moe_poll_nap_ns(MOE_POLL_SPIN_NS + 1), MOE_POLL_NAP_MIN_NS);
    CHECK_INT_EQ(moe_poll_nap_ns(800000), 100000);
    CHECK_INT_EQ(moe_poll_nap_ns(60LL * 1000000000LL), MOE_POLL_NAP_MAX_NS);
    int64_t prev = 0;
    bool monotone = true, bounded = true;
    for (int64_t w = 0; w < 100000000; w += 7919) {
        int64_t n = moe_poll_nap_ns(w);
        monotone = monotone && n >= prev;
        bounded = bounded && n <= MOE_POLL_NAP_MAX_NS && n <= (w > MOE_POLL_SPIN_NS ? w : 0);
        prev = n;
    }
    CHECK(monotone);
    CHECK(bounded);
}

/* A kind of wait that lately ended within MOE_POLL_SPIN_MAX_NS spins through its length (a
 * quarter and the first nap longer), a longer or unknown one the usual MOE_POLL_SPIN_NS;
 * the spin moves the first nap; the kinds keep their own last two lengths. */
static void test_spin(void)
{
    const int64_t us = 1000;
    CHECK_INT_EQ(moe_poll_spin_for(0), MOE_POLL_SPIN_NS);
    CHECK_INT_EQ(moe_poll_spin_for(10 * us), MOE_POLL_SPIN_NS);
    CHECK_INT_EQ(moe_poll_spin_for(100 * us), 145 * us);
    CHECK_INT_EQ(moe_poll_spin_for(900 * us), MOE_POLL_SPIN_MAX_NS);
    CHECK_INT_EQ(moe_poll_spin_for(2000 * us), MOE_POLL_SPIN_NS);
    moe_poll_t p;
    moe_poll_begin_at(&p, 0, true);
    p.start_ns = p.last_ns = 1000000 * us;
    CHECK_INT_EQ(p.spin_ns, MOE_POLL_SPIN_NS);
    moe_poll_spin(&p, 200 * us);
    CHECK_INT_EQ(moe_poll_nap_at(&p, p.start_ns + 150 * us), 0);
    CHECK_INT_EQ(moe_poll_nap_at(&p, p.start_ns + 240 * us), 30 * us); /* an eighth */
    moe_poll_spin(&p, 5000 * us); /* clamped */
    CHECK_INT_EQ(p.spin_ns, MOE_POLL_SPIN_MAX_NS);
    CHECK_INT_EQ(moe_poll_nap_at(&p, p.start_ns + 999 * us), 0);
    moe_poll_spin(&p, 0);
    CHECK_INT_EQ(p.spin_ns, MOE_POLL_SPIN_NS);
    /* the kinds' lengths: the longer of the last two */
    CHECK_INT_EQ(moe_wait_spin_of("test: a short wait"), MOE_POLL_SPIN_NS);
    moe_wait_ended("test: a short wait", moe_now_ns() - 300 * us);
    moe_wait_ended("test: a long wait", moe_now_ns() - 5000 * us);
    int64_t s = moe_wait_spin_of("test: a short wait");
    CHECK(s >= 395 * us && s < 500 * us);
    CHECK_INT_EQ(moe_wait_spin_of("test: a long wait"), MOE_POLL_SPIN_NS);
    moe_wait_ended("test: a short wait", moe_now_ns() - 20 * us);
    CHECK(moe_wait_spin_of("test: a short wait") >= 395 * us); /* the longer of two */
    moe_wait_ended("test: a short wait", moe_now_ns() - 20 * us);
    CHECK(moe_wait_spin_of("test: a short wait") < 100 * us);
}

/* With an expected end (moe_poll_expect): one nap straight to it (at most the quiet cap),
 * none past the deadline; once it has passed, the backoff counts from it, from the first
 * nap, without a spin; a wait without one naps as before. */
static void test_nap_expected(void)
{
    const int64_t ms = 1000000;
    moe_poll_t p;
    moe_poll_begin_at(&p, 0, true);
    p.start_ns = p.last_ns = 1000 * ms;
    CHECK_INT_EQ(moe_poll_nap_at(&p, p.start_ns + 10 * ms), moe_poll_nap_ns(10 * ms));
    moe_poll_expect(&p, p.start_ns + 95 * ms);
    CHECK_INT_EQ(moe_poll_nap_at(&p, p.start_ns), 95 * ms);
    CHECK_INT_EQ(moe_poll_nap_at(&p, p.start_ns + 90 * ms), 5 * ms);
    CHECK_INT_EQ(moe_poll_nap_at(&p, p.start_ns + 95 * ms), MOE_POLL_NAP_MIN_NS);
    CHECK_INT_EQ(moe_poll_nap_at(&p, p.start_ns + 95 * ms + 800000 - MOE_POLL_SPIN_NS - 1),
                 100000); /* 0.8 ms past it: an eighth */
    CHECK_INT_EQ(moe_poll_nap_at(&p, p.start_ns + 200 * ms), MOE_POLL_NAP_MAX_NS);
    moe_poll_expect(&p, p.start_ns + 500 * ms); /* far: the quiet cap */
    CHECK_INT_EQ(moe_poll_nap_at(&p, p.start_ns), MOE_POLL_QUIET_MAX_NS);
    p.deadline_ns = p.start_ns + 30 * ms; /* never past the deadline */
    CHECK_INT_EQ(moe_poll_nap_at(&p, p.start_ns + 20 * ms), 10 * ms);
    CHECK_INT_EQ(moe_poll_nap_at(&p, p.start_ns + 31 * ms), 0);
    moe_poll_expect(&p, 0); /* no guess: as before */
    p.deadline_ns = 0;
    CHECK_INT_EQ(moe_poll_nap_at(&p, p.start_ns + 10 * ms), moe_poll_nap_ns(10 * ms));
    CHECK_INT_EQ(moe_poll_nap_at(&p, p.start_ns + MOE_POLL_SPIN_NS), 0);
}

/* Reported progress (moe_poll_progress: a piece of a transfer arrived) spins the wait for
 * MOE_POLL_SPIN_NS from it, whatever the backoff or an expected end said; then the naps are
 * as before. */
static void test_nap_progress(void)
{
    const int64_t ms = 1000000;
    moe_poll_t p;
    moe_poll_begin_at(&p, 0, true);
    p.start_ns = p.last_ns = 1000 * ms;
    int64_t t = p.start_ns + 50 * ms; /* deep in the backoff: the cap */
    CHECK_INT_EQ(moe_poll_nap_at(&p, t), MOE_POLL_NAP_MAX_NS);
    moe_poll_progress(&p, t);
    CHECK_INT_EQ(moe_poll_nap_at(&p, t), 0);
    CHECK_INT_EQ(moe_poll_nap_at(&p, t + MOE_POLL_SPIN_NS - 1), 0);
    CHECK_INT_EQ(moe_poll_nap_at(&p, t + MOE_POLL_SPIN_NS), MOE_POLL_NAP_MAX_NS);
    moe_poll_expect(&p, t + 95 * ms); /* an expected end ahead: progress still spins */
    moe_poll_progress(&p, t + 10 * ms);
    CHECK_INT_EQ(moe_poll_nap_at(&p, t + 10 * ms + 1000), 0);
    CHECK_INT_EQ(moe_poll_nap_at(&p, t + 10 * ms + MOE_POLL_SPIN_NS), 85 * ms - MOE_POLL_SPIN_NS);
    moe_poll_begin_at(&p, 0, true); /* a new wait starts without it */
    CHECK_INT_EQ(p.progress_ns, 0);
}

/* A gap of over a second between two polls is this process stopped: the deadline moves and
 * the time is not counted as waited (a resumed rank does not blame its peers). */
static void test_stopped_gap(void)
{
    moe_poll_t p;
    moe_poll_begin(&p, 0.3, true);
    CHECK_INT_EQ(moe_poll_next(&p), MOE_OK);
    nap_ms(1200);
    CHECK_INT_EQ(moe_poll_next(&p), MOE_OK);
    CHECK(moe_poll_waited_s(&p) < 0.2);
}

/* The same for a step's wait (transport/wait.h) stopped between its start and its first
 * poll (mpi.faults.stop_midstep_r1 once saw it): resumed 4 s later, with a 3 s watchdog, it
 * keeps waiting instead of blaming the peer it waits for; a real 0.2 s wait still fires. */
static void test_wait_stopped_before_poll(void)
{
    moe_error_t err;
    moe_error_clear(&err);
    moe_wait_configure(3.0, 0, 1, NULL);
    int64_t start = moe_now_ns() - 4000000000LL;
    CHECK_INT_EQ(moe_wait_poll(start, "a test wait", NULL, 0, &err), MOE_OK);
    moe_wait_configure(0.2, 0, 1, NULL);
    start = moe_now_ns();
    moe_status_t st;
    while ((st = moe_wait_poll(start, "a test wait", NULL, 0, &err)) == MOE_OK) {
    }
    CHECK_INT_EQ(st, MOE_ERR_TIMEOUT);
    CHECK(strstr(err.msg, "made no progress for 0.2 s") != NULL);
}

/* A request polled to completion; one that never completes ends at the deadline. */
static void test_request(void)
{
    int out = 7, in = 0;
    MPI_Request rr, sr;
    CHECK_INT_EQ(MPI_Irecv(&in, 1, MPI_INT, 0, 1, MPI_COMM_SELF, &rr), MPI_SUCCESS);
    CHECK_INT_EQ(MPI_Isend(&out, 1, MPI_INT, 0, 1, MPI_COMM_SELF, &sr), MPI_SUCCESS);
    moe_poll_t p;
    moe_poll_begin(&p, 5.0, true);
    CHECK_INT_EQ(moe_poll_request(&rr, &p, NULL), MOE_OK);
    CHECK_INT_EQ(moe_poll_request(&sr, &p, NULL), MOE_OK);
    CHECK_INT_EQ(in, 7);
    MPI_Request never;
    CHECK_INT_EQ(MPI_Irecv(&in, 1, MPI_INT, 0, 2, MPI_COMM_SELF, &never), MPI_SUCCESS);
    moe_poll_begin(&p, 0.05, true);
    CHECK_INT_EQ(moe_poll_request(&never, &p, NULL), MOE_ERR_TIMEOUT);
    CHECK_INT_EQ(MPI_Cancel(&never), MPI_SUCCESS);
    CHECK_INT_EQ(MPI_Request_free(&never), MPI_SUCCESS);
}

/* One rank: everyone answers (there is no one else), and no fault was reported. */
static void test_watchdog_alone(void)
{
    moe_error_t err;
    moe_error_clear(&err);
    CHECK_INT_EQ(moe_watchdog_init(MPI_COMM_WORLD, 5.0, &err), MOE_OK);
    int dead[4];
    CHECK_INT_EQ(moe_watchdog_unresponsive(0.1, dead, 4), 0);
    CHECK_INT_EQ(moe_watchdog_notice(&err), MOE_OK);
    CHECK_INT_EQ(moe_watchdog_tick(), MOE_OK);
}

/* mpirun's SIGCONT stops a rank that was running, not one that is being resumed; a stop
 * ends a wait that honours it, and only such a wait. */
static void test_signals(void)
{
    moe_stop_alive(moe_now_ns() - 2000000000LL); /* last seen running 2 s ago: resumed */
    raise(SIGCONT);
    CHECK(!moe_stop_requested());
    moe_stop_alive(moe_now_ns());
    raise(SIGCONT);
    CHECK(moe_stop_requested());
    CHECK_INT_EQ(moe_stop_signal(), SIGCONT);
    CHECK_INT_EQ(moe_stop_origin(), -1);
    raise(SIGHUP); /* a signal of its own outranks the first cause only if that was passed on */
    CHECK_INT_EQ(moe_stop_signal(), SIGCONT);
    moe_poll_t p;
    moe_poll_begin(&p, 0.05, true);
    CHECK_INT_EQ(moe_poll_next(&p), MOE_ERR_INTERRUPTED);
    moe_poll_begin(&p, 0.05, false);
    CHECK_INT_EQ(moe_poll_next(&p), MOE_OK);
}

static void *post_later(void *arg)
{
    (void)arg;
    nap_ms(50);
    moe_wake_post(0);
    return NULL;
}

/* The transport's wake-up (transport/wake.h) on one rank: a post (here from another thread,
 * as a peer's would come) ends a 5 s nap at once; an unposted nap lasts its length; a wait
 * naps on it once set up, and a post ends its nap towards an expected end 3 s ahead, after
 * which it backs off afresh; after teardown naps are plain sleeps again. */
static void test_wake(void)
{
    moe_error_t err;
    moe_error_clear(&err);
    char hosts[1][64] = {"here"};
    moe_wait_configure(10.0, 0, 1, (const char (*)[64])hosts);
    CHECK_INT_EQ(moe_wake_setup(MPI_COMM_WORLD, 0, 1, (const char (*)[64])hosts, &err), MOE_OK);
    int64_t t0 = moe_now_ns();
    CHECK_INT_EQ(moe_wake_nap(20000000), MOE_NAP_SLEPT);
    CHECK(moe_now_ns() - t0 >= 20000000); /* nobody posted: the whole nap */
    pthread_t th;
    pthread_create(&th, NULL, post_later, NULL);
    t0 = moe_now_ns();
    CHECK_INT_EQ(moe_wake_nap(5000000000LL), MOE_NAP_POSTED);
    double took = (double)(moe_now_ns() - t0) * 1e-9;
    pthread_join(th, NULL);
    CHECK(took >= 0.04 && took < 2.5); /* woken by the post, not the 5 s bound */
    moe_wake_post(0); /* posts before a nap: consumed by it, the next one sleeps */
    moe_wake_post(0);
    CHECK_INT_EQ(moe_wake_nap(1000000), MOE_NAP_POSTED);
    t0 = moe_now_ns();
    CHECK_INT_EQ(moe_wake_nap(20000000), MOE_NAP_SLEPT);
    CHECK(moe_now_ns() - t0 >= 20000000);
    /* a wait expecting its end far ahead: a post makes it back off afresh from then */
    moe_poll_t p;
    moe_poll_begin(&p, 0, false); /* test_signals left a stop requested */
    moe_poll_expect(&p, moe_now_ns() + 3000000000LL);
    pthread_create(&th, NULL, post_later, NULL);
    t0 = moe_now_ns();
    CHECK_INT_EQ(moe_poll_next(&p), MOE_OK); /* the first nap, towards the expected end */
    took = (double)(moe_now_ns() - t0) * 1e-9;
    pthread_join(th, NULL);
    CHECK(took < 2.5);
    CHECK(p.expect_ns <= moe_now_ns()); /* no longer ahead */
    CHECK(moe_poll_nap_at(&p, moe_now_ns()) < MOE_POLL_NAP_MAX_NS);
    moe_wake_teardown();
    CHECK_INT_EQ(moe_wake_nap(1000000), MOE_NAP_CANNOT);
    moe_wake_post(0); /* after teardown: nothing */
}

/* A file named `name` in dir, its time set back by age_s. */
static void make_aged(const char *dir, const char *name, double age_s)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    CHECK(fd >= 0);
    struct timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= (time_t)age_s;
    t[1] = t[0];
    CHECK(futimens(fd, t) == 0);
    close(fd);
}

static bool exists_in(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* A rank killed between creating its semaphore and unlinking it leaves sem.moed.<job>.<rank>
 * in /dev/shm: the sweep removes such names once older than the set-up could be, keeps
 * younger ones (a live job's, during its set-up) and every other file; moe_wake_setup
 * sweeps /dev/shm itself. */
static void test_wake_sweep(void)
{
    char dir[] = "/tmp/moed-sweep.XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    make_aged(dir, "sem.moed.1f2e.18c0a.1", 3600); /* a job killed an hour ago */
    make_aged(dir, "sem.moed.2a2b.18c0b.0", 5);    /* a job in its set-up now */
    make_aged(dir, "sem.other.1", 3600);           /* not moed's */
    make_aged(dir, "moed.1f2e.18c0a.exit.0", 3600); /* a killed job's exit board */
    make_aged(dir, "moed.2a2b.18c0b.exit.0", 5);    /* a live one's */
    moe_wake_sweep(dir, MOE_WAKE_STALE_S);
    CHECK(!exists_in(dir, "sem.moed.1f2e.18c0a.1"));
    CHECK(exists_in(dir, "sem.moed.2a2b.18c0b.0"));
    CHECK(exists_in(dir, "sem.other.1"));
    CHECK(!exists_in(dir, "moed.1f2e.18c0a.exit.0"));
    CHECK(exists_in(dir, "moed.2a2b.18c0b.exit.0"));
    char path[512];
    snprintf(path, sizeof(path), "%s/moed.2a2b.18c0b.exit.0", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/sem.moed.2a2b.18c0b.0", dir);
    unlink(path);
    snprintf(path, sizeof(path), "%s/sem.other.1", dir);
    unlink(path);
    CHECK(rmdir(dir) == 0);
    /* the set-up sweeps /dev/shm (where a killed rank's name really is) */
    char name[64];
    snprintf(name, sizeof(name), "sem.moed.test%x.0.1", (unsigned)getpid());
    make_aged("/dev/shm", name, 3600); /* made (it checks); not looked for again here: any
                                         * other test's moed starting now may sweep it */
    moe_error_t err;
    moe_error_clear(&err);
    char hosts[1][64] = {"here"};
    CHECK_INT_EQ(moe_wake_setup(MPI_COMM_WORLD, 0, 1, (const char (*)[64])hosts, &err), MOE_OK);
    CHECK(!exists_in("/dev/shm", name));
    moe_wake_teardown();
    /* the exit board: one rank alone waits for nobody, marked or not, and left no name */
    int late[2];
    bool report = true;
    CHECK_INT_EQ(moe_wake_exit_wait(0.1, late, 2, &report), 0);
    CHECK(!report);
    moe_wake_exit_mark();
    CHECK_INT_EQ(moe_wake_exit_wait(0.1, late, 2, &report), 0);
    CHECK(strcmp(moe_wake_exit_host(0), "here") == 0);
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    char board[64];
    snprintf(board, sizeof(board), "moed.%x.", (unsigned)getpid());
    while (d != NULL && (e = readdir(d)) != NULL) {
        CHECK(strncmp(e->d_name, board, strlen(board)) != 0); /* unlinked after the set-up */
    }
    if (d != NULL) {
        closedir(d);
    }
}

int main(int argc, char **argv)
{
    moe_stop_mpi_init_begin();
    MPI_Init(&argc, &argv);
    moe_stop_mpi_init_end();
    test_nap();
    test_spin();
    test_nap_expected();
    test_nap_progress();
    test_deadline();
    test_stopped_gap();
    test_wait_stopped_before_poll();
    test_request();
    test_watchdog_alone();
    test_signals();
    test_wake();
    test_wake_sweep();
    int rc = moe_test_finish("test_poll");
    MPI_Finalize();
    return rc;
}
