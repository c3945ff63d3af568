/* The row helper (moe/halves.h): every row of a loop runs exactly once, the second half on
 * the helper's thread and the first on the caller's, short loops and a NULL helper all on
 * the caller's; a thousand loops in a row (each waits for its helper: no lost wake-up). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "moe/halves.h"
#include "test_util.h"

enum { ROWS = 1000 };

typedef struct visits {
    int count[ROWS];
    pthread_t by[ROWS];
} visits_t;

static void visit(void *arg, int64_t lo, int64_t hi)
{
    visits_t *v = arg;
    for (int64_t i = lo; i < hi; i++) {
        v->count[i]++;
        v->by[i] = pthread_self();
    }
}

/* Rows visited once each; returns how many ran on another thread than the caller's. */
static int run_once(moe_halves_t *h, int64_t n, int64_t min_split, int *bad)
{
    visits_t *v = calloc(1, sizeof(*v));
    moe_halves_run(h, visit, v, n, min_split);
    int other = 0;
    for (int64_t i = 0; i < n; i++) {
        *bad += v->count[i] != 1;
        other += !pthread_equal(v->by[i], pthread_self());
    }
    free(v);
    return other;
}

int main(void)
{
    moe_error_t err;
    moe_error_clear(&err);
    moe_halves_t *h = NULL;
    CHECK_INT_EQ(moe_halves_create(false, &h, &err), MOE_OK);
    int bad = 0;
    CHECK_INT_EQ(run_once(h, ROWS, 64, &bad), ROWS - ROWS / 2); /* [n/2, n) on the helper */
    CHECK_INT_EQ(run_once(h, 7, 1, &bad), 4);                   /* odd n: the helper's 4 */
    CHECK_INT_EQ(run_once(h, 63, 64, &bad), 0);                 /* short: all here */
    CHECK_INT_EQ(run_once(h, 1, 1, &bad), 0);
    CHECK_INT_EQ(run_once(h, 0, 1, &bad), 0);
    CHECK_INT_EQ(run_once(NULL, ROWS, 64, &bad), 0); /* no helper: all here */
    int others = 0;
    for (int r = 0; r < 1000; r++) {
        others += run_once(h, 100, 64, &bad) == 50;
    }
    CHECK_INT_EQ(others, 1000);
    CHECK_INT_EQ(bad, 0);
    moe_halves_destroy(h);
    moe_halves_destroy(NULL);
    return moe_test_finish("test_halves");
}
