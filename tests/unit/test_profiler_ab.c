/* --profiler-ab's statistics (app/profiler_ab.h) against figures worked out by hand. */
#include "app/profiler_ab.h"
#include "test_util.h"

/* k = 10: blocks on, off | off, on | on, off | off, on ... */
static void test_blocks(void)
{
    CHECK(moe_ab_step_on(10, 0) && moe_ab_step_on(10, 9));
    CHECK(!moe_ab_step_on(10, 10) && !moe_ab_step_on(10, 19));
    CHECK(!moe_ab_step_on(10, 20) && !moe_ab_step_on(10, 29));
    CHECK(moe_ab_step_on(10, 30) && moe_ab_step_on(10, 39));
    CHECK(moe_ab_step_on(10, 40) && !moe_ab_step_on(10, 50));
    CHECK(moe_ab_step_on(1, 0) && !moe_ab_step_on(1, 1) && !moe_ab_step_on(1, 2) &&
          moe_ab_step_on(1, 3));
}

/* Four pairs; pair 0 is warm-up and left out. Pair 1 (off first): off 110, on 100 -> 1.1;
 * pair 2 (on first): on 100, off 90 -> 0.9; pair 3 (off first): off 120, on 100 -> 1.2.
 * Median 1.1, mean 3.2/3, totals 320/300, standard error sqrt(0.046667/2/3) = 0.088192. */
static void test_pairs(void)
{
    const int64_t ns[] = {100, 100, 110, 100, 100, 90, 120, 100, 55}; /* 55: unpaired */
    moe_ab_result_t r;
    CHECK_INT_EQ(moe_ab_compute(ns, 9, 10, &r), 0);
    CHECK_INT_EQ(r.pairs, 3);
    CHECK_NEAR(r.median, 1.1, 1e-12);
    CHECK_NEAR(r.mean, 3.2 / 3, 1e-12);
    CHECK_NEAR(r.totals, 320.0 / 300.0, 1e-12);
    CHECK_NEAR(r.lo, 3.2 / 3 - 1.96 * 0.0881917, 1e-6);
    CHECK_NEAR(r.hi, 3.2 / 3 + 1.96 * 0.0881917, 1e-6);
    CHECK_NEAR(r.on_ms_per_step, 300e-6 / 30, 1e-15);
    CHECK_NEAR(r.off_ms_per_step, 320e-6 / 30, 1e-15);
}

/* Two pairs: both count (no warm-up to spare), even count: the median is the mean of the
 * middle two. Fewer than one pair: no figure. */
static void test_few(void)
{
    const int64_t ns[] = {100, 150, 200, 100};
    moe_ab_result_t r;
    CHECK_INT_EQ(moe_ab_compute(ns, 4, 5, &r), 0);
    CHECK_INT_EQ(r.pairs, 2);
    CHECK_NEAR(r.median, (1.5 + 2.0) / 2, 1e-12);
    CHECK_NEAR(r.totals, 350.0 / 200.0, 1e-12);
    CHECK_INT_EQ(moe_ab_compute(ns, 1, 5, &r), -1);
    CHECK_INT_EQ(moe_ab_compute(ns, 0, 5, &r), -1);
    CHECK_INT_EQ(moe_ab_compute(ns, 4, 0, &r), -1);
}

int main(void)
{
    test_blocks();
    test_pairs();
    test_few();
    return moe_test_finish("test_profiler_ab");
}
