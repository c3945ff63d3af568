/* runtime.bind's rule (app/bind.h): which ranks are pinned where, as a pure function; and the
 * short scheduler slice a waiting rank asks for. */
#include "app/bind.h"
#include "moe/sched.h"

#include <stdio.h>
#include <string.h>

#include "test_util.h"

/* The default job, 3 ranks on 2 cores: the expert ranks get a core each, the master (no
 * experts) stays on both (auto) or shares the first (core); auto pins only because the node
 * is oversubscribed. */
static void test_master_job(void)
{
    bool expert[3] = {false, true, true};
    CHECK_INT_EQ(moe_bind_slot(MOE_BIND_AUTO, expert, 3, 1, 2, 1, true), 0);
    CHECK_INT_EQ(moe_bind_slot(MOE_BIND_AUTO, expert, 3, 2, 2, 1, true), 1);
    CHECK_INT_EQ(moe_bind_slot(MOE_BIND_AUTO, expert, 3, 0, 2, 1, true), -1);
    CHECK_INT_EQ(moe_bind_slot(MOE_BIND_CORE, expert, 3, 0, 2, 1, true), 0);
    /* none never pins; core pins the same way */
    CHECK_INT_EQ(moe_bind_slot(MOE_BIND_NONE, expert, 3, 1, 2, 1, true), -1);
    /* runtime.bind as resolved for the node: auto pins the expert ranks only */
    CHECK(strcmp(moe_bind_node_name(MOE_BIND_AUTO, expert, 3, 2, 1, true), "experts") == 0);
    CHECK(strcmp(moe_bind_node_name(MOE_BIND_CORE, expert, 3, 2, 1, true), "core") == 0);
    CHECK(strcmp(moe_bind_node_name(MOE_BIND_AUTO, expert, 3, 4, 1, true), "none") == 0);
    CHECK(strcmp(moe_bind_node_name(MOE_BIND_NONE, expert, 3, 2, 1, true), "none") == 0);
    CHECK_INT_EQ(moe_bind_slot(MOE_BIND_CORE, expert, 3, 2, 2, 1, true), 1);
}

/* auto leaves the scheduler alone when it is not oversubscribed, when someone else pinned
 * the process, and when the expert ranks alone outnumber the slots (two of them would get
 * half a core each); core pins regardless. */
static void test_auto_leaves_alone(void)
{
    bool expert[3] = {false, true, true};
    CHECK_INT_EQ(moe_bind_slot(MOE_BIND_AUTO, expert, 3, 1, 4, 1, true), -1);
    CHECK_INT_EQ(moe_bind_slot(MOE_BIND_AUTO, expert, 3, 1, 2, 1, false), -1);
    bool all[3] = {true, true, true}; /* symmetric routing: every rank computes */
    CHECK_INT_EQ(moe_bind_slot(MOE_BIND_AUTO, all, 3, 0, 2, 1, true), -1);
    CHECK_INT_EQ(moe_bind_slot(MOE_BIND_CORE, all, 3, 2, 2, 1, true), 0);
    CHECK_INT_EQ(moe_bind_slot(MOE_BIND_CORE, all, 3, 1, 4, 1, true), 1);
}

/* A wait yields between its tests only where the node's ranks' threads outnumber its
 * CPUs: 3 ranks on 2 (the default job), 2 ranks of 2 threads on 2; not 2 ranks on 2, nor 2
 * of 2 threads on 4; an unknown CPU count is taken as shared. */
static void test_shares_cores(void)
{
    CHECK(moe_bind_shares_cores(3, 1, 2));
    CHECK(moe_bind_shares_cores(2, 2, 2));
    CHECK(!moe_bind_shares_cores(2, 1, 2));
    CHECK(!moe_bind_shares_cores(2, 2, 4));
    CHECK(!moe_bind_shares_cores(1, 1, 1));
    CHECK(moe_bind_shares_cores(1, 1, -1));
    /* the CPUs the node's ranks may use: the union of their masks on this host; ranks bound
     * to a core each (CPUs 0 and 1) do not share, three ranks in a 2-CPU cpuset do */
    static const char hosts[4][64] = {"a", "a", "b", "a"};
    moe_cpu_mask_t m[4] = {{{0}}};
    m[0].w[0] = 1;        /* CPU 0 */
    m[1].w[0] = 2;        /* CPU 1 */
    m[2].w[0] = 0xff;     /* another host's */
    m[3].w[1] = 1;        /* CPU 64 */
    CHECK_INT_EQ(moe_bind_node_cpus(m, hosts, 0, 4), 3);
    CHECK_INT_EQ(moe_bind_node_cpus(m, hosts, 2, 4), 8);
    CHECK_INT_EQ(moe_bind_node_cpus(m, hosts, 0, 2), 2);
    m[3].w[1] = 0;
    m[3].w[0] = 3;        /* CPUs 0-1 */
    CHECK_INT_EQ(moe_bind_node_cpus(m, hosts, 1, 4), 2);
    moe_cpu_mask_t own;
    moe_bind_own_mask(&own);
    int n = 0;
    for (int i = 0; i < MOE_BIND_MASK_WORDS; i++) {
        n += __builtin_popcountll(own.w[i]);
    }
    CHECK_INT_EQ(n, moe_bind_cpus_allowed());
}

/* Slots of runtime.threads CPUs: 2 threads on 4 CPUs make 2 slots. */
static void test_threads(void)
{
    bool expert[3] = {false, true, true};
    CHECK_INT_EQ(moe_bind_slot(MOE_BIND_AUTO, expert, 3, 2, 4, 2, true), 1);
    CHECK_INT_EQ(moe_bind_slot(MOE_BIND_AUTO, expert, 3, 0, 4, 2, true), -1);
    CHECK_INT_EQ(moe_bind_slot(MOE_BIND_CORE, expert, 3, 0, 4, 2, true), 0);
    CHECK_INT_EQ(moe_bind_slot(MOE_BIND_CORE, expert, 3, 1, 1, 2, true), -1); /* no slot */
    CHECK_INT_EQ(moe_bind_slot(MOE_BIND_CORE, expert, 3, 3, 2, 1, true), -1); /* bad index */
}

/* The short slice a waiting rank asks for: granted, a Linux >= 6.12 reads it back; an older
 * kernel either refuses or grants and ignores it (sched_runtime reads back 0 there). */
static void test_short_slice(void)
{
    bool granted = moe_sched_short_slice();
    long long now = moe_sched_slice_ns();
    CHECK(now >= 0);
    if (granted && now != 0) {
        CHECK_INT_EQ(now, (long long)MOE_SCHED_WAIT_SLICE_NS);
    } else {
        printf("test_bind: this kernel keeps no custom slice (granted %d, reads back %lld)\n",
               (int)granted, now);
    }
}

int main(void)
{
    test_master_job();
    test_auto_leaves_alone();
    test_threads();
    test_shares_cores();
    test_short_slice();
    return moe_test_finish("test_bind");
}
