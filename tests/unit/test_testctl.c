/* Test control (moe/testctl.h): each hook's variable, set as the tests set it, gives the typed
 * answer production code acts on; unset or malformed values leave the hook off; the variables
 * are read once (a later setenv changes nothing until moe_testctl_reload); a pause stops the
 * process (SIGSTOP) only at its rank and phase. */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "moe/clock.h"
#include "moe/testctl.h"
#include "test_util.h"

/* Sets (value != NULL) or unsets one hook's variable, then reads them all again. */
static void set_hook(moe_testctl_hook_t hook, const char *value)
{
    if (value != NULL) {
        setenv(moe_testctl_name(hook), value, 1);
    } else {
        unsetenv(moe_testctl_name(hook));
    }
    moe_testctl_reload();
}

static void test_names(void)
{
    const char *want[MOE_TESTCTL_COUNT] = {
        [MOE_TESTCTL_MPI_FAIL] = "MOED_TEST_MPI_FAIL",
        [MOE_TESTCTL_STALL] = "MOED_TEST_STALL",
        [MOE_TESTCTL_HOOK_DELAY_US] = "MOED_TEST_HOOK_DELAY_US",
        [MOE_TESTCTL_PAUSE] = "MOED_TEST_PAUSE",
        [MOE_TESTCTL_BUILD_ID] = "MOED_TEST_BUILD_ID",
        [MOE_TESTCTL_REBALANCE_DELAY] = "MOED_TEST_REBALANCE_DELAY_MS",
        [MOE_TESTCTL_GATE_DELAY] = "MOED_TEST_GATE_DELAY_MS",
        [MOE_TESTCTL_EXPERT_DELAY] = "MOED_TEST_EXPERT_DELAY_MS",
        [MOE_TESTCTL_LOAD_DELAY] = "MOED_TEST_LOAD_DELAY_MS",
        [MOE_TESTCTL_TOUCH] = "MOED_TEST_TOUCH_MIB",
        [MOE_TESTCTL_ABSORB_FAIL] = "MOED_TEST_ABSORB_FAIL",
        [MOE_TESTCTL_PANEL_FLOATS] = "MOED_TEST_PANEL_FLOATS",
    };
    for (int h = 0; h < MOE_TESTCTL_COUNT; h++) {
        CHECK(moe_testctl_name((moe_testctl_hook_t)h) != NULL &&
              strcmp(moe_testctl_name((moe_testctl_hook_t)h), want[h]) == 0);
        unsetenv(want[h]);
    }
    CHECK(moe_testctl_name(MOE_TESTCTL_COUNT) == NULL);
    moe_testctl_reload();
    for (int h = 0; h < MOE_TESTCTL_COUNT; h++) { /* nothing set: every hook off */
        CHECK(!moe_testctl_armed((moe_testctl_hook_t)h));
    }
    CHECK(!moe_testctl_agree_fails(1));
    CHECK_INT_EQ(moe_testctl_stall_step(0), -1);
    CHECK_INT_EQ(moe_testctl_hook_delay_ns(0), 0);
    CHECK(!moe_testctl_pause_at(0, "startup"));
    CHECK(moe_testctl_build_id() == NULL);
    CHECK_INT_EQ(moe_testctl_delay_ms(MOE_TESTCTL_LOAD_DELAY, 0), 0);
    CHECK_INT_EQ(moe_testctl_delay_ms(MOE_TESTCTL_GATE_DELAY, 0), 0);
    CHECK_INT_EQ(moe_testctl_touch_mib(0), 0);
    CHECK(!moe_testctl_absorb_fails(0));
}

static void test_mpi_fail(void)
{
    set_hook(MOE_TESTCTL_MPI_FAIL, "agree:3");
    CHECK(moe_testctl_armed(MOE_TESTCTL_MPI_FAIL));
    CHECK(!moe_testctl_agree_fails(1));
    CHECK(!moe_testctl_agree_fails(2));
    CHECK(moe_testctl_agree_fails(3));
    CHECK(!moe_testctl_agree_fails(4));
    const char *bad[] = {"3", "agree", "agree:", "agree:x", "bcast:3", ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        set_hook(MOE_TESTCTL_MPI_FAIL, bad[i]);
        CHECK(!moe_testctl_armed(MOE_TESTCTL_MPI_FAIL));
        CHECK(!moe_testctl_agree_fails(3));
    }
    set_hook(MOE_TESTCTL_MPI_FAIL, NULL);
}

static void test_stall(void)
{
    set_hook(MOE_TESTCTL_STALL, "1:5");
    CHECK_INT_EQ(moe_testctl_stall_step(1), 5);
    CHECK_INT_EQ(moe_testctl_stall_step(0), -1);
    CHECK_INT_EQ(moe_testctl_stall_step(2), -1);
    set_hook(MOE_TESTCTL_STALL, "2:0");
    CHECK_INT_EQ(moe_testctl_stall_step(2), 0);
    const char *bad[] = {"1", "1:", ":5", "a:b", "1;5", ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        set_hook(MOE_TESTCTL_STALL, bad[i]);
        CHECK_INT_EQ(moe_testctl_stall_step(1), -1);
    }
    set_hook(MOE_TESTCTL_STALL, NULL);
}

static void test_hook_delay(void)
{
    set_hook(MOE_TESTCTL_HOOK_DELAY_US, "2500");
    CHECK_INT_EQ(moe_testctl_hook_delay_ns(0), 2500000);
    CHECK_INT_EQ(moe_testctl_hook_delay_ns(1), 0); /* rank 0's hook only */
    set_hook(MOE_TESTCTL_HOOK_DELAY_US, "x");
    CHECK_INT_EQ(moe_testctl_hook_delay_ns(0), 0);
    set_hook(MOE_TESTCTL_HOOK_DELAY_US, "-7");
    CHECK_INT_EQ(moe_testctl_hook_delay_ns(0), 0);
    set_hook(MOE_TESTCTL_HOOK_DELAY_US, NULL);
}

static void test_pause(void)
{
    set_hook(MOE_TESTCTL_PAUSE, "1:teardown");
    CHECK(moe_testctl_pause_at(1, "teardown"));
    CHECK(!moe_testctl_pause_at(0, "teardown"));
    CHECK(!moe_testctl_pause_at(1, "end"));
    CHECK(!moe_testctl_pause_at(1, "tear"));
    const char *bad[] = {"teardown", "1", "1:", "x:teardown", ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        set_hook(MOE_TESTCTL_PAUSE, bad[i]);
        CHECK(!moe_testctl_pause_at(1, "teardown"));
    }

    /* the pause itself: a child stops at its phase, not at another's */
    set_hook(MOE_TESTCTL_PAUSE, "2:end");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        moe_testctl_pause_here(2, "startup"); /* not this phase: goes on */
        moe_testctl_pause_here(1, "end");     /* not this rank: goes on */
        moe_testctl_pause_here(2, "end");     /* stops here until continued */
        _exit(7);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, WUNTRACED) == pid);
    CHECK(WIFSTOPPED(status) && WSTOPSIG(status) == SIGSTOP);
    kill(pid, SIGCONT);
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 7);
    set_hook(MOE_TESTCTL_PAUSE, NULL);
}

static void test_build_id(void)
{
    set_hook(MOE_TESTCTL_BUILD_ID, "other-build");
    CHECK(moe_testctl_build_id() != NULL && strcmp(moe_testctl_build_id(), "other-build") == 0);
    set_hook(MOE_TESTCTL_BUILD_ID, ""); /* set but empty: announced as empty */
    CHECK(moe_testctl_build_id() != NULL && moe_testctl_build_id()[0] == '\0');
    set_hook(MOE_TESTCTL_BUILD_ID, NULL);
    CHECK(moe_testctl_build_id() == NULL);
}

static void test_delays(void)
{
    set_hook(MOE_TESTCTL_GATE_DELAY, "0:200,2:50");
    CHECK_INT_EQ(moe_testctl_delay_ms(MOE_TESTCTL_GATE_DELAY, 0), 200);
    CHECK_INT_EQ(moe_testctl_delay_ms(MOE_TESTCTL_GATE_DELAY, 1), 0);
    CHECK_INT_EQ(moe_testctl_delay_ms(MOE_TESTCTL_GATE_DELAY, 2), 50);
    CHECK_INT_EQ(moe_testctl_delay_ms(MOE_TESTCTL_EXPERT_DELAY, 0), 0); /* its own variable */
    /* malformed elements and ms <= 0 are skipped; the first element naming a rank wins */
    set_hook(MOE_TESTCTL_EXPERT_DELAY, "junk,1:0,1:30,x:9,2:-4,1:99,,3:7,");
    CHECK_INT_EQ(moe_testctl_delay_ms(MOE_TESTCTL_EXPERT_DELAY, 1), 30);
    CHECK_INT_EQ(moe_testctl_delay_ms(MOE_TESTCTL_EXPERT_DELAY, 2), 0);
    CHECK_INT_EQ(moe_testctl_delay_ms(MOE_TESTCTL_EXPERT_DELAY, 3), 7);
    set_hook(MOE_TESTCTL_EXPERT_DELAY, ",4:11");
    CHECK_INT_EQ(moe_testctl_delay_ms(MOE_TESTCTL_EXPERT_DELAY, 4), 11);
    set_hook(MOE_TESTCTL_EXPERT_DELAY, "0:99999999999999999"); /* its ns still fit */
    CHECK(moe_testctl_delay_ms(MOE_TESTCTL_EXPERT_DELAY, 0) > 0 &&
          moe_testctl_delay_ms(MOE_TESTCTL_EXPERT_DELAY, 0) <= INT64_MAX / 1000000);

    /* the rebalance's delay reads one rank:ms, the first */
    set_hook(MOE_TESTCTL_REBALANCE_DELAY, "1:300,2:400");
    CHECK_INT_EQ(moe_testctl_delay_ms(MOE_TESTCTL_REBALANCE_DELAY, 1), 300);
    CHECK_INT_EQ(moe_testctl_delay_ms(MOE_TESTCTL_REBALANCE_DELAY, 2), 0);
    set_hook(MOE_TESTCTL_REBALANCE_DELAY, "1:0");
    CHECK_INT_EQ(moe_testctl_delay_ms(MOE_TESTCTL_REBALANCE_DELAY, 1), 0);
    set_hook(MOE_TESTCTL_REBALANCE_DELAY, "300");
    CHECK_INT_EQ(moe_testctl_delay_ms(MOE_TESTCTL_REBALANCE_DELAY, 300), 0);

    /* the load's delay: every rank, clamped to 0..10000, a bad N is 0 */
    set_hook(MOE_TESTCTL_LOAD_DELAY, "40");
    CHECK_INT_EQ(moe_testctl_delay_ms(MOE_TESTCTL_LOAD_DELAY, 0), 40);
    CHECK_INT_EQ(moe_testctl_delay_ms(MOE_TESTCTL_LOAD_DELAY, 5), 40);
    set_hook(MOE_TESTCTL_LOAD_DELAY, "99999");
    CHECK_INT_EQ(moe_testctl_delay_ms(MOE_TESTCTL_LOAD_DELAY, 0), 10000);
    set_hook(MOE_TESTCTL_LOAD_DELAY, "-3");
    CHECK_INT_EQ(moe_testctl_delay_ms(MOE_TESTCTL_LOAD_DELAY, 0), 0);
    set_hook(MOE_TESTCTL_LOAD_DELAY, "slow");
    CHECK_INT_EQ(moe_testctl_delay_ms(MOE_TESTCTL_LOAD_DELAY, 0), 0);

    /* the touch: per rank, at most 4096 MiB; it is no delay */
    set_hook(MOE_TESTCTL_TOUCH, "1:64,2:99999");
    CHECK_INT_EQ(moe_testctl_touch_mib(1), 64);
    CHECK_INT_EQ(moe_testctl_touch_mib(2), 4096);
    CHECK_INT_EQ(moe_testctl_touch_mib(0), 0);
    CHECK_INT_EQ(moe_testctl_delay_ms(MOE_TESTCTL_TOUCH, 1), 0);
    moe_testctl_touch(0); /* none for rank 0: returns */
    set_hook(MOE_TESTCTL_TOUCH, "1:4");
    moe_testctl_touch(1);

    /* the absorb failure: one rank, >= 0; anything else leaves it off */
    set_hook(MOE_TESTCTL_ABSORB_FAIL, "2");
    CHECK(moe_testctl_absorb_fails(2));
    CHECK(!moe_testctl_absorb_fails(1));
    set_hook(MOE_TESTCTL_ABSORB_FAIL, "-1");
    CHECK(!moe_testctl_armed(MOE_TESTCTL_ABSORB_FAIL));
    set_hook(MOE_TESTCTL_ABSORB_FAIL, "none");
    CHECK(!moe_testctl_absorb_fails(0));

    /* the panel size: N > 0, else the caller's own */
    set_hook(MOE_TESTCTL_PANEL_FLOATS, "4096");
    CHECK_INT_EQ(moe_testctl_panel_floats(77), 4096);
    set_hook(MOE_TESTCTL_PANEL_FLOATS, "0");
    CHECK_INT_EQ(moe_testctl_panel_floats(77), 77);
    set_hook(MOE_TESTCTL_PANEL_FLOATS, "many");
    CHECK_INT_EQ(moe_testctl_panel_floats(77), 77);

    /* a hook that is no delay has none */
    set_hook(MOE_TESTCTL_STALL, "0:3");
    CHECK_INT_EQ(moe_testctl_delay_ms(MOE_TESTCTL_STALL, 0), 0);

    /* moe_testctl_sleep sleeps that rank's delay (at least), and nothing without one */
    set_hook(MOE_TESTCTL_REBALANCE_DELAY, "1:30");
    int64_t t0 = moe_now_ns();
    moe_testctl_sleep(MOE_TESTCTL_REBALANCE_DELAY, 1);
    CHECK(moe_now_ns() - t0 >= 30000000LL);
    moe_testctl_sleep(MOE_TESTCTL_REBALANCE_DELAY, 2); /* none for rank 2: returns */
    moe_testctl_sleep(MOE_TESTCTL_STALL, 0);           /* no delay hook: returns */
    for (int h = 0; h < MOE_TESTCTL_COUNT; h++) {
        unsetenv(moe_testctl_name((moe_testctl_hook_t)h));
    }
    moe_testctl_reload();
}

/* Read once: a variable set after the first query changes nothing until a reload. */
static void test_read_once(void)
{
    set_hook(MOE_TESTCTL_GATE_DELAY, "0:5");
    setenv("MOED_TEST_GATE_DELAY_MS", "0:6", 1);
    CHECK_INT_EQ(moe_testctl_delay_ms(MOE_TESTCTL_GATE_DELAY, 0), 5);
    moe_testctl_reload();
    CHECK_INT_EQ(moe_testctl_delay_ms(MOE_TESTCTL_GATE_DELAY, 0), 6);
    set_hook(MOE_TESTCTL_GATE_DELAY, NULL);
}

int main(void)
{
    /* the first query reads the environment by itself */
    setenv("MOED_TEST_STALL", "0:9", 1);
    CHECK_INT_EQ(moe_testctl_stall_step(0), 9);
    test_names();
    test_mpi_fail();
    test_stall();
    test_hook_delay();
    test_pause();
    test_build_id();
    test_delays();
    test_read_once();
    return moe_test_finish("test_testctl");
}
