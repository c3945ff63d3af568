/* moed-routing/1 traces (moe_model/routing_trace.h): written and read back exactly, the
 * counts, a folder resolved to its routing.safetensors, and every check of the reader
 * caused by a file built to break it (with the safetensors writer, so only the one fault
 * differs from a good file). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "moe_model/routing_trace.h"
#include "moe_model/safetensors.h"
#include "test_util.h"

static char dir[256];

/* Two layers (decoder layers 3 and 7), 4 tokens, top-2 of 5 experts. */
static const int32_t ids3[8] = {0, 1, 4, 2, 1, 0, 3, 4};
static const int32_t ids7[8] = {2, 3, 2, 1, 0, 4, 1, 2};
static const float w3[8] = {0.75f, 0.25f, 0.5f, 0.5f, 0.9f, 0.1f, 1.0f, 0.0f};
static const float w7[8] = {0.6f, 0.4f, 0.3f, 0.7f, 0.2f, 0.8f, 0.55f, 0.45f};

static void write_good(const char *path)
{
    const int32_t layers[2] = {3, 7};
    const int32_t *ids[2] = {ids3, ids7};
    const float *ws[2] = {w3, w7};
    moe_routing_out_t o = {.num_layers = 2, .layer_ids = layers, .num_experts = 5, .top_k = 2,
                           .rows = 4, .tokens_per_step = 2, .family = "mixtral",
                           .source = "unit test", .ids = ids, .weights = ws};
    moe_error_t err = {0};
    CHECK(moe_routing_trace_write(path, &o, &err) == MOE_OK);
}

static void test_roundtrip(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, MOE_ROUTING_FILE);
    write_good(path);
    struct stat sb;
    CHECK(stat(path, &sb) == 0);
    CHECK((uint64_t)sb.st_size <= moe_routing_trace_bytes(2, 4, 2));
    moe_routing_trace_t tr;
    moe_error_t err = {0};
    CHECK(moe_routing_trace_open(dir, true, &tr, &err) == MOE_OK); /* the folder */
    CHECK(strcmp(tr.path, path) == 0);
    CHECK_INT_EQ(tr.num_layers, 2);
    CHECK_INT_EQ(tr.layer_ids[0], 3);
    CHECK_INT_EQ(tr.layer_ids[1], 7);
    CHECK_INT_EQ(tr.num_experts, 5);
    CHECK_INT_EQ(tr.top_k, 2);
    CHECK_INT_EQ(tr.rows, 4);
    CHECK_INT_EQ(tr.tokens_per_step, 2);
    CHECK(strcmp(tr.family, "mixtral") == 0 && strcmp(tr.source, "unit test") == 0);
    CHECK(!tr.uniform_weights);
    CHECK(memcmp(moe_routing_trace_ids(&tr, 0, 0), ids3, sizeof(ids3)) == 0);
    CHECK(memcmp(moe_routing_trace_ids(&tr, 1, 0), ids7, sizeof(ids7)) == 0);
    CHECK(memcmp(moe_routing_trace_weights(&tr, 0, 0), w3, sizeof(w3)) == 0);
    CHECK(memcmp(moe_routing_trace_weights(&tr, 1, 2), w7 + 4, 4 * sizeof(float)) == 0);
    CHECK_INT_EQ(moe_routing_trace_layer(&tr, 7), 1);
    CHECK_INT_EQ(moe_routing_trace_layer(&tr, 4), -1);
    int64_t c[5];
    moe_routing_trace_counts(&tr, 0, 0, 4, c); /* 0 1 | 4 2 | 1 0 | 3 4 */
    CHECK(c[0] == 2 && c[1] == 2 && c[2] == 1 && c[3] == 1 && c[4] == 2);
    moe_routing_trace_counts(&tr, 1, 3, 3, c); /* rows 3, 0, 1 (cycling): 1 2 | 2 3 | 2 1 */
    CHECK(c[0] == 0 && c[1] == 2 && c[2] == 3 && c[3] == 1 && c[4] == 0);
    moe_routing_trace_free(&tr);
    char slash[300], got[512];
    snprintf(slash, sizeof(slash), "%s//", dir); /* a folder written with its slash */
    CHECK(moe_routing_trace_resolve(slash, got, sizeof(got)) == 0);
    CHECK(strcmp(got, path) == 0);
    /* the header alone */
    CHECK(moe_routing_trace_open(path, false, &tr, &err) == MOE_OK);
    CHECK(tr.ids == NULL && tr.rows == 4);
    moe_routing_trace_free(&tr);
}

/* A file like the good one with one thing changed; the reader must refuse it with a
 * message holding `want`. */
typedef struct bad {
    const char *why, *want;
    const char *format, *experts, *topk, *layers;
    int32_t bad_id_at, bad_id;   /* ids3[at] = id when at >= 0 */
    int bad_w_at;                /* w3[at] = -0.5 (or NaN when nan) */
    int nan;
    int drop_weights, rows7, extra_layer, ids_f32;
} bad_t;

static void write_bad(const char *path, const bad_t *b)
{
    int32_t i3[8], i7[12];
    float f3[8], f7[12], fi[8];
    memcpy(i3, ids3, sizeof(ids3));
    memcpy(f3, w3, sizeof(w3));
    memcpy(i7, ids7, sizeof(ids7));
    memcpy(f7, w7, sizeof(w7));
    i7[8] = 0, i7[9] = 1, i7[10] = 2, i7[11] = 3;
    f7[8] = f7[9] = f7[10] = f7[11] = 0.5f;
    if (b->bad_id_at >= 0) {
        i3[b->bad_id_at] = b->bad_id;
    }
    if (b->bad_w_at >= 0) {
        f3[b->bad_w_at] = b->nan ? NAN : -0.5f;
    }
    for (int i = 0; i < 8; i++) {
        fi[i] = (float)i3[i];
    }
    int64_t r7 = b->rows7 ? b->rows7 : 4;
    moe_st_out_tensor_t t[5] = {
        {"layers.3.topk_ids", b->ids_f32 ? MOE_ST_F32 : MOE_ST_I32, 2, {4, 2},
         b->ids_f32 ? (const void *)fi : (const void *)i3},
        {"layers.3.topk_weights", MOE_ST_F32, 2, {4, 2}, f3},
        {"layers.7.topk_ids", MOE_ST_I32, 2, {r7, 2}, i7},
        {"layers.7.topk_weights", MOE_ST_F32, 2, {r7, 2}, f7},
        {"layers.9.topk_ids", MOE_ST_I32, 2, {4, 2}, i7},
    };
    int n = b->extra_layer ? 5 : 4;
    if (b->drop_weights) { /* layer 7's weights left out */
        n = 3;
    }
    const char *meta[] = {"format", b->format ? b->format : MOE_ROUTING_FORMAT,
                          "num_experts", b->experts ? b->experts : "5",
                          "top_k", b->topk ? b->topk : "2", "tokens_per_step", "2",
                          "layers", b->layers ? b->layers : "[3, 7]"};
    moe_error_t err = {0};
    CHECK(moe_st_write_meta(path, t, n, meta, 5, &err) == MOE_OK);
}

static void test_refusals(void)
{
    const bad_t cases[] = {
        {.why = "format", .want = "not a routing trace", .format = "moed-routing/0",
         .bad_id_at = -1, .bad_w_at = -1},
        {.why = "experts", .want = "metadata 'num_experts'", .experts = "many",
         .bad_id_at = -1, .bad_w_at = -1},
        {.why = "topk>E", .want = "more than num_experts", .topk = "6", .bad_id_at = -1,
         .bad_w_at = -1},
        {.why = "layers", .want = "metadata 'layers'", .layers = "3, 7", .bad_id_at = -1,
         .bad_w_at = -1},
        {.why = "layer twice", .want = "names layer 3 twice", .layers = "[3, 3]",
         .bad_id_at = -1, .bad_w_at = -1},
        {.why = "missing layer", .want = "tensor 'layers.5.topk_ids' is missing",
         .layers = "[3, 7, 5]", .bad_id_at = -1, .bad_w_at = -1},
        {.why = "missing weights", .want = "'layers.7.topk_weights' is missing",
         .bad_id_at = -1, .bad_w_at = -1, .drop_weights = 1},
        {.why = "rows differ", .want = "expected [4, 2]", .bad_id_at = -1, .bad_w_at = -1,
         .rows7 = 6},
        {.why = "unlisted layer", .want = "layer 9, which the metadata", .bad_id_at = -1,
         .bad_w_at = -1, .extra_layer = 1},
        {.why = "ids dtype", .want = "has dtype F32", .bad_id_at = -1, .bad_w_at = -1,
         .ids_f32 = 1},
        {.why = "top_k", .want = "expected [tokens >= 1, 3]", .topk = "3", .bad_id_at = -1,
         .bad_w_at = -1},
        {.why = "id range", .want = "row 2 column 1 is expert 5", .bad_id_at = 5, .bad_id = 5,
         .bad_w_at = -1},
        {.why = "negative id", .want = "is expert -1", .bad_id_at = 0, .bad_id = -1,
         .bad_w_at = -1},
        {.why = "repeated id", .want = "row 1 names expert 4 twice", .bad_id_at = 3,
         .bad_id = 4, .bad_w_at = -1},
        {.why = "negative weight", .want = "row 3 column 0 is -0.5", .bad_id_at = -1,
         .bad_w_at = 6},
        {.why = "NaN weight", .want = "row 0 column 1 is nan", .bad_id_at = -1,
         .bad_w_at = 1, .nan = 1},
    };
    char path[512];
    snprintf(path, sizeof(path), "%s/bad.safetensors", dir);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        write_bad(path, &cases[i]);
        moe_routing_trace_t tr;
        moe_error_t err = {0};
        moe_status_t st = moe_routing_trace_open(path, true, &tr, &err);
        if (st == MOE_OK) {
            fprintf(stderr, "case '%s': accepted\n", cases[i].why);
        }
        CHECK(st == MOE_ERR_FORMAT);
        CHECK_STR_CONTAINS(err.msg, cases[i].want);
        CHECK_STR_CONTAINS(err.msg, path);
        CHECK(tr.ids == NULL && tr.layer_ids == NULL); /* freed */
    }
    /* a bad row is a data check: the header alone passes */
    bad_t rowonly = {.bad_id_at = 5, .bad_id = 5, .bad_w_at = -1};
    write_bad(path, &rowonly);
    moe_routing_trace_t tr;
    moe_error_t err = {0};
    CHECK(moe_routing_trace_open(path, false, &tr, &err) == MOE_OK);
    moe_routing_trace_free(&tr);
    /* not there at all */
    snprintf(path, sizeof(path), "%s/none", dir);
    CHECK(moe_routing_trace_open(path, false, &tr, &err) == MOE_ERR_IO);
    CHECK_STR_CONTAINS(err.msg, "cannot read the routing trace");
}

/* A folder without routing.safetensors: a report folder says why its run wrote none. */
static void test_folder_without(void)
{
    const struct {
        const char *files[2]; /* made in the folder; "INCOMPLETE" gets the lines below */
        const char *want;
    } cases[] = {
        {{"summary.json", "INCOMPLETE"},
         "its run did not write it (its INCOMPLETE: routing.safetensors: not written: write "
         "failed: No space left on device)"},
        {{"summary.json", NULL}, "a moed report whose run recorded no routing"},
        {{NULL, NULL}, "a folder without routing.safetensors"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char sub[300], path[400];
        snprintf(sub, sizeof(sub), "%s/run%zu", dir, i);
        CHECK(mkdir(sub, 0755) == 0);
        for (int j = 0; j < 2 && cases[i].files[j] != NULL; j++) {
            snprintf(path, sizeof(path), "%s/%s", sub, cases[i].files[j]);
            FILE *f = fopen(path, "w");
            CHECK(f != NULL);
            if (f != NULL) {
                fputs(j == 1 ? "This report is not complete: ...\ntrace.json: not yet "
                               "written\nrouting.safetensors: not written: write failed: No "
                               "space left on device\n"
                             : "{}\n", f);
                fclose(f);
            }
        }
        moe_routing_trace_t tr;
        moe_error_t err = {0};
        CHECK(moe_routing_trace_open(sub, false, &tr, &err) == MOE_ERR_IO);
        CHECK_STR_CONTAINS(err.msg, sub);
        CHECK_STR_CONTAINS(err.msg, cases[i].want);
    }
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/moed-trace-XXXXXX");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    test_roundtrip();
    test_refusals();
    test_folder_without();
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "could not remove %s\n", dir);
    }
    return moe_test_finish("test_routing_trace");
}
