/* libFuzzer target: moe_cfg_parse() (moe_config/config.h, under runtime/src/config/include)
 * on arbitrary bytes, for one rank and for three.
 *
 * Properties:
 *  - a rejection fills err with one line, NUL-terminated in its buffer, starting with the
 *    source name ("fuzz.yaml");
 *  - an accepted config has a complete placement (every expert 0..num_experts-1 owned by
 *    a rank < world, nothing beyond), values within the bounds of the key table, and
 *    the provenance fields set;
 *  - whatever parses for three ranks parses for one (one rank is the more permissive
 *    world), with the same model / runtime / workload / profiler values;
 *  - a text of nothing but blank lines and comments is rejected, and one of only spaces
 *    and line breaks (or no bytes) says "the file is empty" (`{}` stays valid). */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fuzz_common.h"
#include "moe_config/config.h"

#define SRC "fuzz.yaml"

static bool str_ok(const char *s, size_t cap)
{
    return memchr(s, '\0', cap) != NULL && s[0] != '\0';
}

#define IN_RANGE(v, lo, hi) ((v) >= (lo) && (v) <= (hi))
#define CHECK_RANGE(field, lo, hi)                                                       \
    FUZZ_CHECK(IN_RANGE(c->field, lo, hi), #field " = %lld outside [%lld, %lld]",        \
               (long long)c->field, (long long)(lo), (long long)(hi))
#define CHECK_DRANGE(field, lo, hi)                                                      \
    FUZZ_CHECK(isfinite(c->field) && IN_RANGE(c->field, lo, hi),                         \
               #field " = %g outside [%g, %g]", c->field, (double)(lo), (double)(hi))

static void check_config(const moe_config_t *c, int world, const uint8_t *data, size_t size)
{
    /* provenance */
    FUZZ_CHECK(c->world_size == world, "world_size %d, parsed for %d", c->world_size, world);
    FUZZ_CHECK(strcmp(c->source_name, SRC) == 0, "source_name '%.64s'", c->source_name);
    FUZZ_CHECK(c->text_hash == moe_hash64(data, size), "text_hash is not FNV-1a of the text");

    /* bounds of the key table (config.c), spot checks over every type */
    CHECK_RANGE(hidden_dim, 1, 65536);
    CHECK_RANGE(ffn_dim, 1, 1048576);
    CHECK_RANGE(num_experts, 1, MOE_MAX_EXPERTS);
    CHECK_RANGE(top_k, 1, c->num_experts); /* cross check: top_k <= num_experts */
    CHECK_RANGE(num_layers, 1, 4096);
    CHECK_RANGE(first_layer, 0, 100000);
    FUZZ_CHECK(c->seed <= (uint64_t)INT64_MAX, "seed %llu", (unsigned long long)c->seed);
    CHECK_DRANGE(capacity_factor, 0, 1024);
    CHECK_RANGE(master_rank, 0, world - 1);
    CHECK_RANGE(threads, 1, 256);
    CHECK_RANGE(chunks, 1, 64);
    CHECK_DRANGE(step_timeout_s, 0, 86400);
    CHECK_RANGE(tokens_per_step, 1, 4194304);
    CHECK_RANGE(steps, 0, 1000000000); /* 0: run until SIGINT/SIGTERM */
    CHECK_DRANGE(routing_skew, 0, 16);
    CHECK_RANGE(prof_warmup_steps, 0, 1000000000);
    CHECK_RANGE(prof_wait_steps, 0, 1000000000);
    CHECK_RANGE(prof_measurement_steps, 1, 1000000000);
    CHECK_RANGE(prof_repeat, 0, 1000000000);
    CHECK_RANGE(prof_sampling_rate, 1, 1000000);
    CHECK_RANGE(prof_memory_sample_ms, 1, 60000);
    CHECK_RANGE(prof_trace_max_events, 1000, 100000000);
    CHECK_RANGE(activation, MOE_ACT_SWIGLU, MOE_ACT_GELU);
    CHECK_RANGE(dtype, MOE_DTYPE_F32, MOE_DTYPE_AUTO);
    CHECK_RANGE(compute_dtype, MOE_NUM_AUTO, MOE_NUM_BF16);
    CHECK_RANGE(wire_dtype, MOE_NUM_AUTO, MOE_NUM_BF16);
    CHECK_RANGE(bind, MOE_BIND_AUTO, MOE_BIND_CORE);
    CHECK_RANGE(routing, MOE_ROUTING_MASTER, MOE_ROUTING_SYMMETRIC);
    CHECK_RANGE(transport, MOE_TRANSPORT_MPI, MOE_TRANSPORT_NCCL);
    CHECK_RANGE(device, MOE_DEVICE_CPU, MOE_DEVICE_CUDA);
    FUZZ_CHECK(str_ok(c->weights, sizeof(c->weights)), "model.weights empty or unterminated");
    FUZZ_CHECK(str_ok(c->input, sizeof(c->input)), "workload.input empty or unterminated");
    FUZZ_CHECK(str_ok(c->prof_output_dir, sizeof(c->prof_output_dir)),
               "profiler.output_dir empty or unterminated");

    /* profiled ranks: 'all', or distinct ranks that exist */
    if (!c->prof_all_ranks) {
        CHECK_RANGE(prof_num_ranks, 0, MOE_MAX_RANKS);
        for (int i = 0; i < c->prof_num_ranks; i++) {
            int32_t r = c->prof_ranks[i];
            FUZZ_CHECK(r >= 0 && r < MOE_MAX_RANKS, "prof_ranks[%d] = %d", i, (int)r);
            FUZZ_CHECK(world == 1 || r < world, "profiled rank %d in a world of %d", (int)r,
                       world);
            for (int j = 0; j < i; j++) {
                FUZZ_CHECK(c->prof_ranks[j] != r, "profiled rank %d listed twice", (int)r);
            }
        }
    }
    for (int r = 0; r < world; r++) {
        bool listed = c->prof_all_ranks;
        for (int i = 0; !listed && i < c->prof_num_ranks; i++) {
            listed = c->prof_ranks[i] == r;
        }
        FUZZ_CHECK(moe_cfg_rank_profiled(c, r) == listed, "rank_profiled(%d) is %d", r,
                   !listed);
    }
    FUZZ_CHECK(!moe_cfg_rank_profiled(c, world) && !moe_cfg_rank_profiled(c, -1),
               "a rank outside the world is profiled");
    if (world == 1) {
        FUZZ_CHECK(c->master_rank == 0, "one rank but master_rank %lld",
                   (long long)c->master_rank);
    }

    /* the placement is complete: every expert has an owner that exists (its lowest rank
     * when it has replicas), nothing beyond; the per-rank counts come from the entries
     * (an expert with replicas counts once on each of its ranks) */
    int per_rank[3] = {0, 0, 0};
    int copies = 0;
    for (int e = 0; e < MOE_MAX_EXPERTS; e++) {
        int32_t o = c->expert_owner[e];
        if (e < c->num_experts) {
            FUZZ_CHECK(o >= 0 && o < world, "expert %d owned by rank %d (world %d)", e, (int)o,
                       world);
            int32_t ranks[3];
            int n = moe_cfg_replicas_of(c, -1, e, NULL);
            FUZZ_CHECK(n >= 1 && n <= world, "expert %d has %d copies (world %d)", e, n, world);
            moe_cfg_replicas_of(c, -1, e, ranks);
            FUZZ_CHECK(ranks[0] == o, "expert %d: owner %d but lowest replica rank %d", e,
                       (int)o, (int)ranks[0]);
            for (int i = 0; i < n; i++) {
                FUZZ_CHECK(i == 0 || ranks[i] > ranks[i - 1], "expert %d: replica ranks not "
                           "ascending and distinct", e);
                per_rank[ranks[i]]++;
            }
            copies += n;
        } else {
            FUZZ_CHECK(o == -1, "expert %d beyond num_experts %lld owned by %d", e,
                       (long long)c->num_experts, (int)o);
        }
    }
    FUZZ_CHECK(c->placement_replicas == (copies > c->num_experts) || c->placement_per_layer,
               "placement_replicas %d but %d copies of %lld experts", c->placement_replicas,
               copies, (long long)c->num_experts);
    int total = 0;
    for (int r = 0; r < world; r++) {
        int n = moe_cfg_experts_of_rank(c, r, NULL);
        FUZZ_CHECK(n == per_rank[r], "experts_of_rank(%d) = %d, the entries say %d", r, n,
                   per_rank[r]);
        FUZZ_CHECK(moe_cfg_max_local(c, r) >= n, "max_local(%d) below experts_of_rank", r);
        total += n;
    }
    FUZZ_CHECK(total == copies, "ranks hold %d copies, the entries say %d", total, copies);
    static FILE *null_out;
    if (null_out == NULL) {
        null_out = fopen("/dev/null", "w");
    }
    moe_cfg_print_placement(c, null_out); /* accepts NULL */

    /* auto placement over several ranks: balanced blocks; in master routing the master
     * only routes and hosts nothing (config.c placement_auto_blocks) */
    if (c->placement_auto && world > 1) {
        bool skip_master = c->routing == MOE_ROUTING_MASTER;
        int lo = INT32_MAX, hi = -1;
        for (int r = 0; r < world; r++) {
            if (skip_master && r == c->master_rank) {
                FUZZ_CHECK(per_rank[r] == 0, "auto placement gave the master %d experts",
                           per_rank[r]);
                continue;
            }
            lo = per_rank[r] < lo ? per_rank[r] : lo;
            hi = per_rank[r] > hi ? per_rank[r] : hi;
        }
        FUZZ_CHECK(hi - lo <= 1, "auto placement is unbalanced: %d..%d experts per host", lo,
                   hi);
    }
}

/* The fields that do not depend on the world size. */
static void check_same_values(const moe_config_t *a, const moe_config_t *b)
{
#define SAME(f) FUZZ_CHECK(memcmp(&a->f, &b->f, sizeof(a->f)) == 0, #f " differs by world")
    SAME(hidden_dim);
    SAME(ffn_dim);
    SAME(num_experts);
    SAME(top_k);
    SAME(num_layers);
    SAME(activation);
    SAME(capacity_factor);
    SAME(seed);
    SAME(placement_auto);
    SAME(routing);
    SAME(threads);
    SAME(tokens_per_step);
    SAME(steps);
    SAME(prof_all_ranks);
    SAME(prof_num_ranks);
    SAME(text_hash);
    FUZZ_CHECK(strcmp(a->weights, b->weights) == 0, "model.weights differs by world");
    FUZZ_CHECK(strcmp(a->prof_output_dir, b->prof_output_dir) == 0,
               "profiler.output_dir differs by world");
#undef SAME
}

/* 2: only spaces and line breaks (or nothing); 1: also '#' comments; 0: anything else. */
static int blank_kind(const uint8_t *data, size_t size)
{
    int kind = 2;
    bool in_comment = false;
    for (size_t i = 0; i < size; i++) {
        uint8_t c = data[i];
        if (c == '\n' || c == '\r') {
            in_comment = false;
        } else if (in_comment) {
            continue;
        } else if (c == '#') { /* only spaces and line breaks come before it */
            in_comment = true;
            kind = 1;
        } else if (c == ' ') {
            continue;
        } else {
            return 0;
        }
    }
    return kind;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int blank = blank_kind(data, size);
    /* ~40 KiB each: static, not on the stack */
    static moe_config_t cfg1, cfg3;
    static const int worlds[2] = {1, 3};
    moe_config_t *out[2] = {&cfg1, &cfg3};
    moe_status_t st[2];

    for (int i = 0; i < 2; i++) {
        moe_error_t err;
        memset(&err, 0x5a, sizeof(err)); /* no stale NUL to hide an unterminated message */
        /* data is exactly `size` bytes, not NUL-terminated: ASan sees any overread. */
        st[i] = moe_cfg_parse((const char *)data, size, SRC, worlds[i], out[i], &err);
        if (st[i] == MOE_OK) {
            check_config(out[i], worlds[i], data, size);
        } else {
            fuzz_check_error(&err, st[i], SRC, 1);
            FUZZ_CHECK(blank != 2 || strstr(err.msg, "the file is empty") != NULL,
                       "a blank text is rejected for another reason: %s", err.msg);
        }
        FUZZ_CHECK(blank == 0 || st[i] != MOE_OK, "a text of only comments and blank lines "
                   "(%zu bytes) is accepted", size);
    }
    FUZZ_CHECK(st[1] != MOE_OK || st[0] == MOE_OK,
               "accepted for 3 ranks but rejected for 1 (status %d)", (int)st[0]);
    if (st[0] == MOE_OK && st[1] == MOE_OK) {
        check_same_values(&cfg1, &cfg3);
    }
    return 0;
}
