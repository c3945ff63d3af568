/* The synthetic merged profile the report tests write and read back (report_fixture.c):
 * 3 ranks (rank 0 routes, ranks 1 and 2 host 4 experts each), 2 layers x 8 experts, 10
 * recorded steps; see test_report.c's header for what each figure is made to show. */
#ifndef MOE_TEST_REPORT_FIXTURE_H
#define MOE_TEST_REPORT_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moe_config/config.h"
#include "report/report.h"
#include "test_util.h"

#define HOT_LAYER 0
#define HOT_EXPERT 3
#define SLOW_LAYER 1
#define SLOW_EXPERT 5
#define REC_STEPS 10
#define FIRST_REC_STEP 5
#define HIDDEN 1024
#define FFN 3584
#define CHUNKS 2
#define DEVICE "NVIDIA H200"
#define INFLIGHT_MS 8.0 /* exchange in flight per step, every rank */

typedef struct fixture {
    moe_config_t cfg;
    char yaml[2048];
    moe_report_t rep;
} fixture_t;

typedef struct shape {
    int world, layers, experts;
    bool partial;
    double tokens_per_s;
    const char *runtime_extra; /* YAML lines added to the runtime section, or NULL */
    const char *placement;     /* placement.experts as written; NULL: auto */
} shape_t;

extern const shape_t small_shape;
/* The files a report folder holds (summary_rank_<r>.txt aside). */
#define REPORT_FILES_N 7
extern const char *const report_files[REPORT_FILES_N];
/* Rank k's figures (its memory series allocated anew). */
void fx_rank(moe_report_t *r, const moe_config_t *cfg, int k, bool partial);
fixture_t *fx_make(const shape_t *s);
void fx_free(fixture_t *fx);
void remove_report(const char *dir, int world);
bool make_dir(const char *parent, const char *name, char *out, size_t cap);
bool write_into(fixture_t *fx, const char *parent, const char *name);
void fx_drop(fixture_t *fx);
bool fx_config(fixture_t *fx, const shape_t *s);
int64_t fx_tokens(int l, int e, int ne);
int64_t fx_call_ns(int l, int e, int64_t tokens, int step, bool straggler);

/* Writes a fixture of `s` (then `edit`ed) into root/name; NULL on failure. Inline: its check
 * counts in the test that calls it (test_util.h's counters are per file). */
static inline fixture_t *fx_written(const char *root, const char *name, const shape_t *s,
                                    void (*edit)(fixture_t *))
{
    fixture_t *fx = fx_make(s);
    CHECK(fx != NULL);
    if (fx != NULL && edit != NULL) {
        edit(fx);
    }
    if (fx != NULL && !write_into(fx, root, name)) {
        fx_free(fx);
        return NULL;
    }
    return fx;
}

#endif /* MOE_TEST_REPORT_FIXTURE_H */
