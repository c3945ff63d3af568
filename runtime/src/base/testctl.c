#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
/* Test control (moe/testctl.h): the one file that reads the tests' fault hooks from the
 * environment. One table row per hook: its variable and its parser; the variables are read
 * once, on the first query, into typed values that the queries only look at. */
#include "moe/testctl.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

/* One rank:ms element of a delay hook. */
typedef struct testctl_pair {
    int64_t rank;
    int64_t ms;
} testctl_pair_t;

/* A hook's parsed value; `armed` false when its variable is unset or does not parse. */
typedef struct testctl_value {
    bool armed;
    int64_t n;       /* N of agree:N, N, or the rank of rank:step and rank:phase */
    int64_t step;    /* rank:step */
    char text[64];   /* the build id, the phase */
    testctl_pair_t *pairs; /* rank:ms elements with ms > 0, in order */
    int num_pairs;
} testctl_value_t;

typedef void (*testctl_parse_fn)(const char *s, testctl_value_t *v);

/* agree:N */
static void parse_agree(const char *s, testctl_value_t *v)
{
    long long n = 0;
    v->armed = sscanf(s, "agree:%lld", &n) == 1;
    v->n = n;
}

/* rank:step */
static void parse_rank_step(const char *s, testctl_value_t *v)
{
    long long r = -1, step = -1;
    v->armed = sscanf(s, "%lld:%lld", &r, &step) == 2;
    v->n = r;
    v->step = step;
}

/* N in us (a bad N reads as 0); kept so that N * 1000 fits */
static void parse_us(const char *s, testctl_value_t *v)
{
    long long n = strtoll(s, NULL, 10);
    v->n = n < 0 ? 0 : n > INT64_MAX / 1000 ? INT64_MAX / 1000 : n;
    v->armed = v->n > 0;
}

/* N in ms (a bad N reads as 0), clamped to 0..10000 */
static void parse_load_ms(const char *s, testctl_value_t *v)
{
    long n = strtol(s, NULL, 10);
    v->n = n < 0 ? 0 : n > 10000 ? 10000 : n;
    v->armed = v->n > 0;
}

/* rank:phase (the phase one word, at most 31 characters) */
static void parse_rank_phase(const char *s, testctl_value_t *v)
{
    int r = -1;
    v->armed = sscanf(s, "%d:%31s", &r, v->text) == 2;
    v->n = r;
}

/* rank (>= 0) */
static void parse_rank(const char *s, testctl_value_t *v)
{
    long long r = -1;
    v->armed = sscanf(s, "%lld", &r) == 1 && r >= 0;
    v->n = r;
}

/* any text, even empty */
static void parse_text(const char *s, testctl_value_t *v)
{
    snprintf(v->text, sizeof(v->text), "%s", s);
    v->armed = true;
}

/* rank:ms[,rank:ms...], or only the first element when `one`; elements that do not parse
 * or whose ms is not > 0 are skipped */
static void parse_pairs(const char *s, testctl_value_t *v, bool one)
{
    int cap = 1;
    for (const char *p = s; !one && *p != '\0'; p++) {
        cap += *p == ',';
    }
    v->pairs = calloc((size_t)cap, sizeof(*v->pairs));
    for (const char *p = s; v->pairs != NULL; p++) {
        long long r = -1, ms = 0;
        if (sscanf(p, "%lld:%lld", &r, &ms) == 2 && ms > 0) { /* kept so that ms in ns fits */
            ms = ms > INT64_MAX / 1000000 ? INT64_MAX / 1000000 : ms;
            v->pairs[v->num_pairs++] = (testctl_pair_t){r, ms};
        }
        if (one || (p = strchr(p, ',')) == NULL) {
            break;
        }
    }
    v->armed = v->num_pairs > 0;
}

static void parse_rank_ms(const char *s, testctl_value_t *v)
{
    parse_pairs(s, v, true);
}

static void parse_rank_ms_list(const char *s, testctl_value_t *v)
{
    parse_pairs(s, v, false);
}

/* The hooks, in moe_testctl_hook_t's order (moe/testctl.h documents each). */
static const struct testctl_row {
    const char *name;
    testctl_parse_fn parse;
    const char *syntax;
} testctl_rows[MOE_TESTCTL_COUNT] = {
    [MOE_TESTCTL_MPI_FAIL] = {"MOED_TEST_MPI_FAIL", parse_agree, "agree:N"},
    [MOE_TESTCTL_STALL] = {"MOED_TEST_STALL", parse_rank_step, "rank:step"},
    [MOE_TESTCTL_HOOK_DELAY_US] = {"MOED_TEST_HOOK_DELAY_US", parse_us, "N (us)"},
    [MOE_TESTCTL_PAUSE] = {"MOED_TEST_PAUSE", parse_rank_phase, "rank:phase"},
    [MOE_TESTCTL_BUILD_ID] = {"MOED_TEST_BUILD_ID", parse_text, "text"},
    [MOE_TESTCTL_REBALANCE_DELAY] = {"MOED_TEST_REBALANCE_DELAY_MS", parse_rank_ms, "rank:ms"},
    [MOE_TESTCTL_GATE_DELAY] = {"MOED_TEST_GATE_DELAY_MS", parse_rank_ms_list,
                                "rank:ms[,rank:ms...]"},
    [MOE_TESTCTL_EXPERT_DELAY] = {"MOED_TEST_EXPERT_DELAY_MS", parse_rank_ms_list,
                                  "rank:ms[,rank:ms...]"},
    [MOE_TESTCTL_LOAD_DELAY] = {"MOED_TEST_LOAD_DELAY_MS", parse_load_ms, "N (ms)"},
    [MOE_TESTCTL_TOUCH] = {"MOED_TEST_TOUCH_MIB", parse_rank_ms_list, "rank:mib[,rank:mib...]"},
    [MOE_TESTCTL_ABSORB_FAIL] = {"MOED_TEST_ABSORB_FAIL", parse_rank, "rank"},
    [MOE_TESTCTL_PANEL_FLOATS] = {"MOED_TEST_PANEL_FLOATS", parse_us, "N"},
};

static testctl_value_t testctl_values[MOE_TESTCTL_COUNT];
static pthread_once_t testctl_once = PTHREAD_ONCE_INIT;

static void testctl_load(void)
{
    for (int h = 0; h < MOE_TESTCTL_COUNT; h++) {
        testctl_value_t *v = &testctl_values[h];
        free(v->pairs);
        memset(v, 0, sizeof(*v));
        const char *s = getenv(testctl_rows[h].name);
        if (s != NULL) {
            testctl_rows[h].parse(s, v);
        }
    }
}

/* The hook's value, the variables read on the first call. */
static const testctl_value_t *testctl_get(moe_testctl_hook_t hook)
{
    pthread_once(&testctl_once, testctl_load);
    return &testctl_values[hook];
}

const char *moe_testctl_name(moe_testctl_hook_t hook)
{
    return (unsigned)hook < MOE_TESTCTL_COUNT ? testctl_rows[hook].name : NULL;
}

bool moe_testctl_armed(moe_testctl_hook_t hook)
{
    return (unsigned)hook < MOE_TESTCTL_COUNT && testctl_get(hook)->armed;
}

void moe_testctl_reload(void)
{
    pthread_once(&testctl_once, testctl_load);
    testctl_load();
}

bool moe_testctl_agree_fails(int64_t nth)
{
    const testctl_value_t *v = testctl_get(MOE_TESTCTL_MPI_FAIL);
    return v->armed && v->n == nth;
}

int64_t moe_testctl_stall_step(int rank)
{
    const testctl_value_t *v = testctl_get(MOE_TESTCTL_STALL);
    return v->armed && v->n == rank && v->step >= 0 ? v->step : -1;
}

int64_t moe_testctl_hook_delay_ns(int rank)
{
    const testctl_value_t *v = testctl_get(MOE_TESTCTL_HOOK_DELAY_US);
    return v->armed && rank == 0 ? 1000 * v->n : 0;
}

bool moe_testctl_pause_at(int rank, const char *phase)
{
    const testctl_value_t *v = testctl_get(MOE_TESTCTL_PAUSE);
    return v->armed && v->n == rank && strcmp(v->text, phase) == 0;
}

void moe_testctl_pause_here(int rank, const char *phase)
{
    if (moe_testctl_pause_at(rank, phase)) {
        raise(SIGSTOP);
    }
}

const char *moe_testctl_build_id(void)
{
    const testctl_value_t *v = testctl_get(MOE_TESTCTL_BUILD_ID);
    return v->armed ? v->text : NULL;
}

/* The value of the first rank:value element naming `rank`, 0 when none. */
static int64_t testctl_rank_value(moe_testctl_hook_t hook, int rank)
{
    const testctl_value_t *v = testctl_get(hook);
    for (int i = 0; i < v->num_pairs; i++) {
        if (v->pairs[i].rank == rank) {
            return v->pairs[i].ms;
        }
    }
    return 0;
}

int64_t moe_testctl_delay_ms(moe_testctl_hook_t hook, int rank)
{
    switch (hook) {
    case MOE_TESTCTL_LOAD_DELAY:
        return testctl_get(hook)->n;
    case MOE_TESTCTL_REBALANCE_DELAY:
    case MOE_TESTCTL_GATE_DELAY:
    case MOE_TESTCTL_EXPERT_DELAY:
        return testctl_rank_value(hook, rank);
    default:
        return 0;
    }
}

void moe_testctl_sleep(moe_testctl_hook_t hook, int rank)
{
    int64_t ms = moe_testctl_delay_ms(hook, rank);
    if (ms > 0) {
        struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

int64_t moe_testctl_touch_mib(int rank)
{
    int64_t mib = testctl_rank_value(MOE_TESTCTL_TOUCH, rank);
    return mib > 4096 ? 4096 : mib;
}

void moe_testctl_touch(int rank)
{
    size_t len = (size_t)moe_testctl_touch_mib(rank) << 20;
    if (len == 0) {
        return;
    }
    /* mmap, not malloc: the unmap returns the pages at once, whatever malloc keeps */
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        return;
    }
    memset(p, 0x5a, len);
    munmap(p, len);
}

bool moe_testctl_absorb_fails(int rank)
{
    const testctl_value_t *v = testctl_get(MOE_TESTCTL_ABSORB_FAIL);
    return v->armed && v->n == rank;
}

int64_t moe_testctl_panel_floats(int64_t otherwise)
{
    const testctl_value_t *v = testctl_get(MOE_TESTCTL_PANEL_FLOATS);
    return v->armed ? v->n : otherwise;
}
