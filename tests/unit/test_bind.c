/* runtime.bind's rule (app/bind.h): which ranks are pinned where, as a pure function. */
#include "app/bind.h"
#include "test_util.h"

/* The default job, 3 ranks on 2 cores: the expert ranks get a core each, the master (no
 * experts) shares the first; auto pins only because the node is oversubscribed. */
static void test_master_job(void)
{
    bool expert[3] = {false, true, true};
    CHECK_INT_EQ(moe_bind_slot(MOE_BIND_AUTO, expert, 3, 1, 2, 1, true), 0);
    CHECK_INT_EQ(moe_bind_slot(MOE_BIND_AUTO, expert, 3, 2, 2, 1, true), 1);
    CHECK_INT_EQ(moe_bind_slot(MOE_BIND_AUTO, expert, 3, 0, 2, 1, true), 0);
    /* none never pins; core pins the same way */
    CHECK_INT_EQ(moe_bind_slot(MOE_BIND_NONE, expert, 3, 1, 2, 1, true), -1);
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

/* Slots of runtime.threads CPUs: 2 threads on 4 CPUs make 2 slots. */
static void test_threads(void)
{
    bool expert[3] = {false, true, true};
    CHECK_INT_EQ(moe_bind_slot(MOE_BIND_AUTO, expert, 3, 2, 4, 2, true), 1);
    CHECK_INT_EQ(moe_bind_slot(MOE_BIND_AUTO, expert, 3, 0, 4, 2, true), 0);
    CHECK_INT_EQ(moe_bind_slot(MOE_BIND_CORE, expert, 3, 1, 1, 2, true), -1); /* no slot */
    CHECK_INT_EQ(moe_bind_slot(MOE_BIND_CORE, expert, 3, 3, 2, 1, true), -1); /* bad index */
}

int main(void)
{
    test_master_job();
    test_auto_leaves_alone();
    test_threads();
    return moe_test_finish("test_bind");
}
