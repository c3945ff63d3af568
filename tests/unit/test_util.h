/* Minimal assertion helpers for moed's unit tests: every failed check prints file:line and
 * the values, the test keeps going, and main returns non-zero if any check failed. */
#ifndef MOE_TEST_UTIL_H
#define MOE_TEST_UTIL_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int moe_test_failures_ = 0;
static int moe_test_checks_ = 0;

#define CHECK(cond)                                                             \
    do {                                                                        \
        moe_test_checks_++;                                                     \
        if (!(cond)) {                                                          \
            moe_test_failures_++;                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                       \
    } while (0)

#define CHECK_INT_EQ(a, b)                                                      \
    do {                                                                        \
        long long a_ = (long long)(a), b_ = (long long)(b);                     \
        moe_test_checks_++;                                                     \
        if (a_ != b_) {                                                         \
            moe_test_failures_++;                                               \
            fprintf(stderr, "%s:%d: %s == %s failed: %lld vs %lld\n", __FILE__, \
                    __LINE__, #a, #b, a_, b_);                                  \
        }                                                                       \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                   \
    do {                                                                        \
        double a_ = (double)(a), b_ = (double)(b);                              \
        moe_test_checks_++;                                                     \
        if (!(fabs(a_ - b_) <= (tol))) {                                        \
            moe_test_failures_++;                                               \
            fprintf(stderr, "%s:%d: %s ~ %s failed: %.9g vs %.9g (tol %g)\n",   \
                    __FILE__, __LINE__, #a, #b, a_, b_, (double)(tol));         \
        }                                                                       \
    } while (0)

#define CHECK_STR_CONTAINS(hay, needle)                                         \
    do {                                                                        \
        const char *h_ = (hay), *n_ = (needle);                                 \
        moe_test_checks_++;                                                     \
        if (h_ == NULL || strstr(h_, n_) == NULL) {                             \
            moe_test_failures_++;                                               \
            fprintf(stderr, "%s:%d: expected \"%s\" in \"%s\"\n", __FILE__,     \
                    __LINE__, n_, h_ ? h_ : "(null)");                          \
        }                                                                       \
    } while (0)

/* Call at the end of main: prints the tally, returns the exit code. */
static inline int moe_test_finish(const char *name)
{
    printf("%s: %d checks, %d failed\n", name, moe_test_checks_, moe_test_failures_);
    return moe_test_failures_ == 0 && moe_test_checks_ > 0 ? 0 : 1;
}

#endif /* MOE_TEST_UTIL_H */
