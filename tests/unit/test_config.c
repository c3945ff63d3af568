/* Unit tests for the config loader: the example config, defaults, every error message
 * (code, line:col, key path), the placement for several world sizes, the queries, a
 * small built-in mutation run so malformed input is exercised on every build, and the
 * checks made before the run (app/preflight.c) on a parsed config. */
#include "moe_config/config.h"

#include "app/preflight.h"
#include "config/config_int.h"
#include "model/family.h"
#include "moe_model/routing_trace.h"
#include "test_util.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char example_yaml[] =
    "model:\n"
    "  hidden_dim: 1024\n"
    "  ffn_dim: 3584\n"
    "  num_experts: 8\n"
    "  top_k: 2\n"
    "  num_layers: 2\n"
    "  activation: swiglu        # swiglu | gelu\n"
    "  normalize_topk: true\n"
    "  capacity_factor: 0\n"
    "  weights: random\n"
    "  seed: 42\n"
    "placement:\n"
    "  master_rank: 0\n"
    "  experts: {1: [0, 1, 2, 3], 2: [4, 5, 6, 7]}\n"
    "runtime:\n"
    "  routing: master\n"
    "  transport: mpi\n"
    "  device: cpu\n"
    "  threads: 1\n"
    "workload:\n"
    "  tokens_per_step: 2048\n"
    "  steps: 20\n"
    "  input: random\n"
    "  routing_skew: 0.0\n"
    "profiler:\n"
    "  enabled: true\n"
    "  warmup_steps: 5\n"
    "  wait_steps: 0\n"
    "  measurement_steps: 10\n"
    "  repeat: 1\n"
    "  sampling_rate: 1\n"
    "  profiled_ranks: all\n"
    "  memory_sample_ms: 50\n"
    "  trace: true\n"
    "  output_dir: experiments\n";

/* The struct is ~30 KiB: keep it off the stack. */
static moe_config_t cfg;
static moe_error_t err;

static moe_status_t parse(const char *yaml, int world)
{
    moe_error_clear(&err);
    return moe_cfg_parse(yaml, strlen(yaml), "cfg.yaml", world, &cfg, &err);
}

/* A config error: the code, the position prefix, the key path / text, and one line. */
#define CHECK_CFG_ERROR(yaml, world, where, text)                     \
    do {                                                              \
        CHECK_INT_EQ(parse((yaml), (world)), MOE_ERR_CONFIG);         \
        CHECK_INT_EQ(err.code, MOE_ERR_CONFIG);                       \
        CHECK_STR_CONTAINS(err.msg, (where));                         \
        CHECK_STR_CONTAINS(err.msg, (text));                          \
        CHECK(strncmp(err.msg, "cfg.yaml", 8) == 0);                  \
        CHECK(strchr(err.msg, '\n') == NULL);                         \
    } while (0)

static void test_table(void)
{
    moe_error_t e;
    moe_error_clear(&e);
    CHECK_INT_EQ(moe_cfg_table_check(&e), MOE_OK);
    CHECK(e.msg[0] == '\0');
    if (e.msg[0] != '\0') {
        fprintf(stderr, "table check: %s\n", e.msg);
    }
    CHECK(moe_cfg_table_size() >= 35);
}

/* The family names are written once, in the key table's model.family names: every row of
 * model/family.c has one of them, in the enum's order, and nothing else has a name. */
static void test_family_names(void)
{
    const cfg_key_t *k = cfg_key_by_path("model.family");
    CHECK(k != NULL && k->type == CFG_ENUM && k->names != NULL);
    if (k == NULL || k->names == NULL) {
        return;
    }
    int n = 0;
    while (k->names[n] != NULL) {
        CHECK(moe_cfg_family_name((moe_family_id_t)n) == k->names[n]);
        n++;
    }
    CHECK_INT_EQ(n, moe_family_count());
    CHECK(strcmp(moe_cfg_family_name(MOE_FAMILY_MIXTRAL), "mixtral") == 0);
    CHECK(strcmp(moe_cfg_family_name(MOE_FAMILY_GPT_OSS), "gpt_oss") == 0);
    CHECK(moe_cfg_family_name((moe_family_id_t)n) == NULL);
    CHECK(moe_cfg_family_name((moe_family_id_t)-1) == NULL);
    for (int i = 0; i < moe_family_count(); i++) {
        const moe_family_t *f = moe_family_at(i);
        CHECK(f != NULL && moe_cfg_family_name(f->id) != NULL);
        CHECK(f != NULL && moe_family_get(f->id) == f);
    }
}

static void check_example_values(const moe_config_t *c)
{
    CHECK_INT_EQ(c->hidden_dim, 1024);
    CHECK_INT_EQ(c->ffn_dim, 3584);
    CHECK_INT_EQ(c->num_experts, 8);
    CHECK_INT_EQ(c->top_k, 2);
    CHECK_INT_EQ(c->num_layers, 2);
    CHECK_INT_EQ(c->activation, MOE_ACT_SWIGLU);
    CHECK(c->normalize_topk);
    CHECK_NEAR(c->capacity_factor, 0.0, 0);
    CHECK(strcmp(c->weights, "random") == 0);
    CHECK_INT_EQ(c->first_layer, 0);
    CHECK_INT_EQ(c->dtype, MOE_DTYPE_AUTO);
    CHECK_INT_EQ(c->compute_dtype, MOE_NUM_AUTO);
    CHECK_INT_EQ(c->wire_dtype, MOE_NUM_AUTO);
    CHECK(c->seed == 42);
    CHECK_INT_EQ(c->master_rank, 0);
    CHECK_INT_EQ(c->routing, MOE_ROUTING_MASTER);
    CHECK_INT_EQ(c->transport, MOE_TRANSPORT_MPI);
    CHECK_INT_EQ(c->device, MOE_DEVICE_CPU);
    CHECK_INT_EQ(c->threads, 1);
    CHECK_INT_EQ(c->chunks, 1);
    CHECK_NEAR(c->step_timeout_s, 60.0, 0);
    CHECK_INT_EQ(c->tokens_per_step, 2048);
    CHECK_INT_EQ(c->steps, 20);
    CHECK(strcmp(c->input, "random") == 0);
    CHECK_NEAR(c->routing_skew, 0.0, 0);
    CHECK(c->prof_enabled);
    CHECK_INT_EQ(c->prof_warmup_steps, 5);
    CHECK_INT_EQ(c->prof_wait_steps, 0);
    CHECK_INT_EQ(c->prof_measurement_steps, 10);
    CHECK_INT_EQ(c->prof_repeat, 1);
    CHECK_INT_EQ(c->prof_sampling_rate, 1);
    CHECK(c->prof_all_ranks);
    CHECK_INT_EQ(c->prof_memory_sample_ms, 50);
    CHECK(c->prof_trace);
    CHECK_INT_EQ(c->prof_trace_max_events, 1000000);
    CHECK(strcmp(c->prof_output_dir, "experiments") == 0);
}

static void test_example(void)
{
    CHECK_INT_EQ(parse(example_yaml, 3), MOE_OK);
    check_example_values(&cfg);
    CHECK(!cfg.placement_auto);
    CHECK(strcmp(cfg.source_name, "cfg.yaml") == 0);
    CHECK_INT_EQ(cfg.world_size, 3);
    CHECK(cfg.text_hash == moe_hash64(example_yaml, strlen(example_yaml)));
    for (int e = 0; e < 8; e++) {
        CHECK_INT_EQ(cfg.expert_owner[e], e < 4 ? 1 : 2);
    }
    CHECK_INT_EQ(cfg.expert_owner[8], -1);

    /* Block style placement gives the same owners. */
    CHECK_INT_EQ(parse("placement:\n"
                       "  experts:\n"
                       "    1:\n"
                       "      - 0\n"
                       "      - 1\n"
                       "      - 2\n"
                       "      - 3\n"
                       "    2: [4, 5, 6, 7]\n",
                       3),
                 MOE_OK);
    for (int e = 0; e < 8; e++) {
        CHECK_INT_EQ(cfg.expert_owner[e], e < 4 ? 1 : 2);
    }
}

static void test_other_values(void)
{
    CHECK_INT_EQ(parse("model:\n"
                       "  activation: gelu\n"
                       "  normalize_topk: False\n"
                       "  capacity_factor: 1.25\n"
                       "  weights: \"/data/mixtral layer.safetensors\"\n"
                       "  first_layer: 3\n"
                       "  dtype: bf16\n"
                       "  seed: 9223372036854775807\n"
                       "runtime:\n"
                       "  routing: symmetric\n"
                       "  transport: nccl\n"
                       "  device: cuda\n"
                       "  chunks: 4\n"
                       "  step_timeout_s: 1e3\n"
                       "workload:\n"
                       "  routing_skew: 1.1\n"
                       "profiler:\n"
                       "  enabled: FALSE\n"
                       "  trace_max_events: 5000\n"
                       "  output_dir: out/run1\n",
                       2),
                 MOE_OK);
    CHECK_INT_EQ(cfg.activation, MOE_ACT_GELU);
    CHECK(!cfg.normalize_topk);
    CHECK_NEAR(cfg.capacity_factor, 1.25, 0);
    CHECK(strcmp(cfg.weights, "/data/mixtral layer.safetensors") == 0);
    CHECK_INT_EQ(cfg.first_layer, 3);
    CHECK_INT_EQ(cfg.dtype, MOE_DTYPE_BF16);
    CHECK(cfg.seed == (uint64_t)INT64_MAX);
    CHECK_INT_EQ(cfg.routing, MOE_ROUTING_SYMMETRIC);
    CHECK_INT_EQ(cfg.transport, MOE_TRANSPORT_NCCL);
    CHECK_INT_EQ(cfg.device, MOE_DEVICE_CUDA);
    CHECK_INT_EQ(cfg.chunks, 4);
    CHECK_NEAR(cfg.step_timeout_s, 1000.0, 0);
    CHECK_NEAR(cfg.routing_skew, 1.1, 1e-12);
    CHECK(!cfg.prof_enabled);
    CHECK_INT_EQ(cfg.prof_trace_max_events, 5000);
    CHECK(strcmp(cfg.prof_output_dir, "out/run1") == 0);
}

static void test_defaults(void)
{
    static moe_config_t d;
    moe_cfg_defaults(&d);
    CHECK_INT_EQ(d.hidden_dim, 1024);
    CHECK(d.placement_auto);
    CHECK(d.prof_all_ranks);
    CHECK_INT_EQ(d.expert_owner[0], -1);
    CHECK_INT_EQ(d.world_size, 0);

    /* Asked for in so many words, every default: an empty mapping, or null sections. */
    const char *defaults[] = {"{}\n", "model:\n", "# header\nmodel: ~\nruntime:\n"};
    for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++) {
        CHECK_INT_EQ(parse(defaults[i], 1), MOE_OK);
        check_example_values(&cfg);
        CHECK(cfg.placement_auto);
        CHECK_INT_EQ(cfg.expert_owner[7], 0);
    }
    /* A file with no content is a mistake (a truncated copy, the wrong file), not a job. */
    const char *empties[] = {"", " \n\n  \n", "# only a comment\n", "\n# a\n  # b\n",
                             "~\n", "null\n", "---\n", "---\n...\n", "--- # c\n"};
    for (size_t i = 0; i < sizeof(empties) / sizeof(empties[0]); i++) {
        CHECK_CFG_ERROR(empties[i], 1, "cfg.yaml: ",
                        "the file is empty (no configuration keys): start from "
                        "configs/experts.yaml");
    }
    /* NULL text with length 0 is empty too. */
    CHECK_INT_EQ(moe_cfg_parse(NULL, 0, "cfg.yaml", 1, &cfg, &err), MOE_ERR_CONFIG);
    CHECK_STR_CONTAINS(err.msg, "cfg.yaml: the file is empty");
    CHECK_INT_EQ(moe_cfg_parse("", 0, "cfg.yaml", 0, &cfg, &err), MOE_ERR_INVALID_ARG);
    CHECK_INT_EQ(moe_cfg_parse("", 0, "cfg.yaml", 1, NULL, &err), MOE_ERR_INVALID_ARG);
    /* Text is taken by length, not up to a NUL: only "model:\n  top_k: 3" is read. */
    const char *longer = "model:\n  top_k: 3\n  junk junk";
    CHECK_INT_EQ(moe_cfg_parse(longer, 17, "cfg.yaml", 1, &cfg, &err), MOE_OK);
    CHECK_INT_EQ(cfg.top_k, 3);
}

static void test_unknown_names(void)
{
    CHECK_CFG_ERROR("model:\n  hiden_dim: 5\n", 1, "cfg.yaml:2:3: ",
                    "unknown key 'model.hiden_dim' (did you mean 'model.hidden_dim'?)");
    CHECK_CFG_ERROR("runtime:\n  top_k: 2\n", 1, "cfg.yaml:2:3: ",
                    "unknown key 'runtime.top_k' (did you mean 'model.top_k'?)");
    CHECK_CFG_ERROR("model:\n  zzzzzzzz: 1\n", 1, "cfg.yaml:2:3: ",
                    "unknown key 'model.zzzzzzzz'; the keys of section 'model' are hidden_dim, "
                    "ffn_dim");
    CHECK_CFG_ERROR("modle:\n  top_k: 2\n", 1, "cfg.yaml:1:1: ",
                    "unknown section 'modle' (did you mean 'model'?)");
    CHECK_CFG_ERROR("model: {}\nprofile:\n  trace: true\n", 1, "cfg.yaml:2:1: ",
                    "unknown section 'profile' (did you mean 'profiler'?)");
    CHECK_CFG_ERROR("hidden_dim: 512\n", 1, "cfg.yaml:1:1: ",
                    "(did you mean 'model.hidden_dim'?)");
    CHECK_CFG_ERROR("foo:\n  x: 1\n", 1, "cfg.yaml:1:1: ",
                    "unknown section 'foo'; the sections are model, placement, runtime, "
                    "workload, profiler");
    /* Control bytes in a name are escaped so the message stays one line. */
    CHECK_CFG_ERROR("\"a\\nb\": 1\n", 1, "cfg.yaml:1:1: ", "unknown section 'a\\x0ab'");
}

static void test_wrong_types(void)
{
    CHECK_CFG_ERROR("model:\n  top_k: two\n", 1, "cfg.yaml:2:10: ",
                    "model.top_k: expected an integer, found 'two'");
    CHECK_CFG_ERROR("model:\n  top_k: 2.0\n", 1, "cfg.yaml:2:10: ",
                    "model.top_k: expected an integer, found '2.0'");
    CHECK_CFG_ERROR("model:\n  top_k: 2x\n", 1, "cfg.yaml:2:10: ",
                    "model.top_k: expected an integer, found '2x'");
    CHECK_CFG_ERROR("model:\n  top_k: 0x2\n", 1, "cfg.yaml:2:10: ", "found '0x2'");
    CHECK_CFG_ERROR("model:\n  top_k: [1]\n", 1, "cfg.yaml:2:10: ",
                    "model.top_k: expected an integer, found a sequence");
    CHECK_CFG_ERROR("model:\n  top_k:\n", 1, "cfg.yaml:",
                    "model.top_k: expected an integer, found nothing");
    CHECK_CFG_ERROR("profiler:\n  enabled: yes\n", 1, "cfg.yaml:2:12: ",
                    "profiler.enabled: expected true or false, found 'yes'");
    CHECK_CFG_ERROR("runtime:\n  step_timeout_s: abc\n", 1, "cfg.yaml:2:19: ",
                    "runtime.step_timeout_s: expected a number, found 'abc'");
    CHECK_CFG_ERROR("runtime:\n  step_timeout_s: nan\n", 1, "cfg.yaml:2:19: ",
                    "expected a number, found 'nan'");
    CHECK_CFG_ERROR("runtime:\n  step_timeout_s: .inf\n", 1, "cfg.yaml:2:19: ",
                    "expected a number, found '.inf'");
    CHECK_CFG_ERROR("runtime:\n  step_timeout_s: 1.5s\n", 1, "cfg.yaml:2:19: ",
                    "expected a number, found '1.5s'");
    CHECK_CFG_ERROR("model:\n  activation: relu\n", 1, "cfg.yaml:2:15: ",
                    "model.activation: expected swiglu, gelu or swiglu_oai, found 'relu'");
    CHECK_CFG_ERROR("model:\n  dtype: fp8\n", 1, "cfg.yaml:2:10: ",
                    "model.dtype: expected f32, bf16, f16 or auto, found 'fp8'");
    CHECK_CFG_ERROR("runtime:\n  compute_dtype: f16\n", 1, "cfg.yaml:2:18: ",
                    "runtime.compute_dtype: expected auto, f32 or bf16, found 'f16'");
    CHECK_CFG_ERROR("model:\n  weights: {a: 1}\n", 1, "cfg.yaml:2:12: ",
                    "model.weights: expected a non-empty string, found a mapping");
    CHECK_CFG_ERROR("model:\n  weights: \"\"\n", 1, "cfg.yaml:2:12: ",
                    "model.weights: expected a non-empty string, found nothing");
    CHECK_CFG_ERROR("model: 5\n", 1, "cfg.yaml:1:8: ",
                    "section 'model' must be a mapping of keys (like key: value), found '5'");
    CHECK_CFG_ERROR("placement:\n  experts: manual\n", 3, "cfg.yaml:2:12: ",
                    "placement.experts: expected 'auto' or a mapping rank -> [expert ids]");
    CHECK_CFG_ERROR("profiler:\n  profiled_ranks: some\n", 3, "cfg.yaml:2:19: ",
                    "profiler.profiled_ranks: expected 'all' or a sequence of ranks like [0, 2], "
                    "found 'some'");

    /* A string as long as MOE_PATH_MAX does not fit its buffer. */
    char *long_yaml = malloc(MOE_PATH_MAX + 64);
    CHECK(long_yaml != NULL);
    if (long_yaml != NULL) {
        int n = snprintf(long_yaml, 64, "model:\n  weights: ");
        memset(long_yaml + n, 'w', MOE_PATH_MAX);
        strcpy(long_yaml + n + MOE_PATH_MAX, "\n");
        CHECK_CFG_ERROR(long_yaml, 1, "cfg.yaml:2:12: ",
                        "model.weights: the value is 1024 bytes long; the limit is 1023");
        long_yaml[n + MOE_PATH_MAX - 1] = '\n';
        long_yaml[n + MOE_PATH_MAX] = '\0';
        CHECK_INT_EQ(parse(long_yaml, 1), MOE_OK);
        CHECK_INT_EQ(strlen(cfg.weights), MOE_PATH_MAX - 1);
        free(long_yaml);
    }
}

static void test_out_of_range(void)
{
    CHECK_CFG_ERROR("model:\n  hidden_dim: 0\n", 1, "cfg.yaml:2:15: ",
                    "model.hidden_dim: 0 is out of range [1, 65536]");
    CHECK_CFG_ERROR("model:\n  hidden_dim: 99999999999999999999\n", 1, "cfg.yaml:2:15: ",
                    "model.hidden_dim: 99999999999999999999 is out of range [1, 65536]");
    CHECK_CFG_ERROR("model:\n  seed: -1\n", 1, "cfg.yaml:2:9: ",
                    "model.seed: -1 is out of range [0, 9223372036854775807]");
    CHECK_CFG_ERROR("model:\n  capacity_factor: -0.5\n", 1, "cfg.yaml:2:20: ",
                    "model.capacity_factor: -0.5 is out of range [0, 1024]");
    CHECK_CFG_ERROR("profiler:\n  trace_max_events: 10\n", 1, "cfg.yaml:2:21: ",
                    "profiler.trace_max_events: 10 is out of range [1000, 100000000]");
    CHECK_CFG_ERROR("model:\n  num_experts: 4\n  top_k: 6\n", 1, "cfg.yaml:3:10: ",
                    "model.top_k: 6 is more than model.num_experts (4); set top_k to at most 4");
    /* top_k left at its default (2): the message cites num_experts instead. */
    CHECK_CFG_ERROR("model:\n  num_experts: 1\n", 1, "cfg.yaml:2:16: ",
                    "model.top_k: 2 is more than model.num_experts (1)");

    /* model.num_layers: the table's bound is moed's real limit of layers (it once said 4096
     * and 1025 then failed on another key, without a line). */
    CHECK_CFG_ERROR("model:\n  num_layers: 1025\n", 1, "cfg.yaml:2:15: ",
                    "model.num_layers: 1025 is out of range [1, 1024]");
    CHECK_INT_EQ(parse("model:\n  num_layers: 1024\n", 1), MOE_OK);
    CHECK_INT_EQ(cfg.num_layers, MOE_MAX_LAYER_IDS);
    /* runtime.step_timeout_s: 0 (off) or at least 1 s; 1e-300 once ended the job at once. */
    CHECK_CFG_ERROR("runtime:\n  step_timeout_s: 1e-300\n", 1, "cfg.yaml:2:19: ",
                    "runtime.step_timeout_s: 1e-300 is below the watchdog's minimum of 1 s "
                    "(0 turns the watchdog off)");
    CHECK_CFG_ERROR("runtime:\n  step_timeout_s: 0.999\n", 1, "cfg.yaml:2:19: ",
                    "runtime.step_timeout_s: 0.999 is below the watchdog's minimum of 1 s");
    CHECK_INT_EQ(parse("runtime:\n  step_timeout_s: 1\n", 1), MOE_OK);
    CHECK_NEAR(cfg.step_timeout_s, 1.0, 0);
    CHECK_INT_EQ(parse("runtime:\n  step_timeout_s: 0\n", 1), MOE_OK);
    CHECK_NEAR(cfg.step_timeout_s, 0.0, 0);
}

/* --help-config prints the bounds the loader applies: model.num_layers's is moed's limit of
 * layers, and step_timeout_s's line names its minimum. */
static void test_reference_bounds(void)
{
    char *text = NULL, want[64];
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK(f != NULL);
    if (f == NULL) {
        return;
    }
    moe_cfg_print_reference(f);
    fclose(f);
    const char *line = strstr(text, "\nmodel.num_layers ");
    CHECK(line != NULL);
    snprintf(want, sizeof(want), "[1, %d]", MOE_MAX_LAYER_IDS);
    if (line != NULL) {
        const char *end = strchr(line + 1, '\n');
        CHECK(end != NULL && strstr(line, want) != NULL && strstr(line, want) < end);
    }
    line = strstr(text, "\nruntime.step_timeout_s ");
    CHECK(line != NULL && strstr(line, "0 = off, else at least 1") != NULL);
    free(text);
}

static const char *const placement_head = "placement:\n  experts: ";

/* "placement:\n  experts: <flow>\n" */
static moe_status_t parse_placement(const char *flow, int world)
{
    static char buf[512];
    snprintf(buf, sizeof(buf), "%s%s\n", placement_head, flow);
    return parse(buf, world);
}

#define CHECK_PLACEMENT_ERROR(flow, world, where, text)                  \
    do {                                                                 \
        CHECK_INT_EQ(parse_placement((flow), (world)), MOE_ERR_CONFIG);  \
        CHECK_STR_CONTAINS(err.msg, (where));                            \
        CHECK_STR_CONTAINS(err.msg, (text));                             \
        CHECK(strchr(err.msg, '\n') == NULL);                            \
    } while (0)

static void test_placement_errors(void)
{
    /* Columns: "  experts: " is 11 wide, so the flow mapping starts at column 12. */
    CHECK_PLACEMENT_ERROR("{1: [0, 1, 2, 3, 3], 2: [4, 5, 6, 7]}", 3, "cfg.yaml:2:29: ",
                          "placement.experts: expert 3 is listed twice under rank 1 (first at "
                          "line 2)");
    CHECK_PLACEMENT_ERROR("{1: [0, 1, 2, 3], 2: [4, 5]}", 3, "cfg.yaml:2:12: ",
                          "placement.experts: experts 6 7 are assigned to no rank");
    CHECK_PLACEMENT_ERROR("{1: [0, 1, 2, 3], 2: [4, 5, 6]}", 3, "cfg.yaml:2:12: ",
                          "placement.experts: expert 7 is assigned to no rank");
    CHECK_PLACEMENT_ERROR("{1: [0, 1, 2, 3], 2: [4, 5, 6, 7, 8]}", 3, "cfg.yaml:2:46: ",
                          "placement.experts: expert 8 does not exist: model.num_experts is 8 "
                          "(ids 0..7)");
    CHECK_PLACEMENT_ERROR("{1: [0, 1, 2, 3], 3: [4, 5, 6, 7]}", 3, "cfg.yaml:2:30: ",
                          "placement.experts: rank 3 does not exist: the job has 3 ranks (0..2)");
    CHECK_PLACEMENT_ERROR("{1: [0, 1, 2, 3], a: [4, 5, 6, 7]}", 3, "cfg.yaml:2:30: ",
                          "placement.experts: expected a rank (an integer >= 0), found 'a'");
    CHECK_PLACEMENT_ERROR("{-1: [0, 1, 2, 3, 4, 5, 6, 7]}", 3, "cfg.yaml:2:13: ",
                          "placement.experts: expected a rank (an integer >= 0), found '-1'");
    CHECK_PLACEMENT_ERROR("{1: [0, 1, 2, 3], 1: [4, 5, 6, 7]}", 3, "cfg.yaml:2:30: ",
                          "placement.experts: rank 1 is listed twice (first at line 2)");
    CHECK_PLACEMENT_ERROR("{1: [0, 1, x]}", 3, "cfg.yaml:2:23: ",
                          "placement.experts: expected an expert id (an integer >= 0), found 'x'");
    CHECK_PLACEMENT_ERROR("{1: 0}", 3, "cfg.yaml:2:16: ",
                          "placement.experts: rank 1: expected a sequence of expert ids like "
                          "[0, 1], found '0'");
    CHECK_PLACEMENT_ERROR("{1: [0, 1, 5000]}", 3, "cfg.yaml:2:23: ",
                          "placement.experts: 5000 is beyond moed's limit of 1024 experts");
    CHECK_PLACEMENT_ERROR("{9999: [0]}", 3, "cfg.yaml:2:13: ",
                          "placement.experts: 9999 is beyond moed's limit of 4096 ranks");
    CHECK_PLACEMENT_ERROR("{99999999999999999999: [0]}", 3, "cfg.yaml:2:13: ",
                          "placement.experts: 99999999999999999999 is beyond moed's limit of "
                          "4096 ranks");
    /* An expert under two ranks is replicated: valid. Twice under one rank is found even
     * with one rank (the placement is still checked). */
    CHECK_INT_EQ(parse_placement("{1: [0, 1, 2, 3], 2: [3, 4, 5, 6, 7]}", 3), MOE_OK);
    CHECK_PLACEMENT_ERROR("{1: [0, 1, 2, 3, 3], 2: [4, 5, 6, 7]}", 1, "cfg.yaml:2:29: ",
                          "expert 3 is listed twice under rank 1");
    CHECK_PLACEMENT_ERROR("{1: [0, 1, 2, 3], 2: [4, 5, 6, 7, 8]}", 1, "cfg.yaml:2:46: ",
                          "expert 8 does not exist");
}

static void test_rank_errors(void)
{
    CHECK_CFG_ERROR("placement:\n  master_rank: 5\n", 4, "cfg.yaml:2:16: ",
                    "placement.master_rank: rank 5 does not exist: the job has 4 ranks (0..3)");
    /* placement.experts may be 'auto'; a layer of placement.layers may not, so its hint
     * is to leave the layer out (it then follows placement.experts) */
    CHECK_CFG_ERROR("placement:\n  experts: {1: [0, 1, 2, 3], 5: [4, 5, 6, 7]}\n", 3,
                    "cfg.yaml:2:30: ",
                    "placement.experts: rank 5 does not exist: the job has 3 ranks (0..2); list "
                    "experts only under ranks that exist, or use 'auto'");
    CHECK_CFG_ERROR("placement:\n  layers: {0: {5: [0, 1, 2, 3, 4, 5, 6, 7]}}\n", 3,
                    "cfg.yaml:2:20: ", /* the first id under it */
                    "placement.layers: rank 5 does not exist: the job has 3 ranks (0..2); list "
                    "the layer's experts only under ranks that exist, or leave the layer out (it "
                    "then follows placement.experts)");
    CHECK_CFG_ERROR("profiler:\n  profiled_ranks: [0, 7]\n", 4, "cfg.yaml:2:23: ",
                    "profiler.profiled_ranks: rank 7 does not exist: the job has 4 ranks (0..3)");
    CHECK_CFG_ERROR("profiler:\n  profiled_ranks: [1, 2, 1]\n", 4, "cfg.yaml:2:26: ",
                    "profiler.profiled_ranks: rank 1 is listed twice (first at line 2)");
    CHECK_CFG_ERROR("profiler:\n  profiled_ranks: [0, -2]\n", 4, "cfg.yaml:2:23: ",
                    "profiler.profiled_ranks: expected a rank (an integer >= 0), found '-2'");
    CHECK_CFG_ERROR("profiler:\n  profiled_ranks: {0: 1}\n", 4, "cfg.yaml:2:19: ",
                    "profiler.profiled_ranks: expected 'all' or a sequence of ranks");
}

static void test_yaml_errors(void)
{
    CHECK_CFG_ERROR("model:\n  hidden_dim: 1024\n  top_k: 2: 3\n", 1, "cfg.yaml:3:11: ",
                    "YAML syntax error: mapping values are not allowed in this context");
    CHECK_CFG_ERROR("model:\n  top_k: [1, 2\n", 1, "cfg.yaml:", "YAML syntax error: ");
    CHECK_CFG_ERROR("model:\n  top_k: *nothing\n", 1, "cfg.yaml:2:10: ",
                    "YAML syntax error: found undefined alias");
    CHECK_CFG_ERROR("model:\n  top_k: 2\n  top_k: 3\n", 1, "cfg.yaml:3:3: ",
                    "model.top_k: duplicate key (first set at line 2)");
    CHECK_CFG_ERROR("model:\n  top_k: 2\nmodel:\n  top_k: 3\n", 1, "cfg.yaml:3:1: ",
                    "duplicate section 'model' (first at line 1)");
    CHECK_CFG_ERROR("- model\n- runtime\n", 1, "cfg.yaml:1:1: ",
                    "the top level must be a mapping of sections (model, placement, runtime, "
                    "workload, profiler), found a sequence");
    CHECK_CFG_ERROR("hello\n", 1, "cfg.yaml:1:1: ",
                    "the top level must be a mapping of sections");
    CHECK_CFG_ERROR("model:\n  top_k: 2\n---\nmodel:\n  top_k: 3\n", 1, "cfg.yaml:3:1: ",
                    "a second YAML document");
    CHECK_CFG_ERROR("[1]: 2\n", 1, "cfg.yaml:1:1: ", "expected a section name, found a sequence");
    /* Invalid UTF-8 is a reader error: the position comes from the byte offset. */
    CHECK_CFG_ERROR("model:\n  weights: \xff\xfe\n", 1, "cfg.yaml:2:12: ", "YAML syntax error: ");

    /* A failed parse leaves the caller's struct as it was. */
    cfg.hidden_dim = 777;
    CHECK_INT_EQ(parse("model:\n  hidden_dim: 0\n", 1), MOE_ERR_CONFIG);
    CHECK_INT_EQ(cfg.hidden_dim, 777);

    /* No source name: messages still have a prefix. */
    CHECK_INT_EQ(moe_cfg_parse("x: 1\n", 5, NULL, 1, &cfg, &err), MOE_ERR_CONFIG);
    CHECK_STR_CONTAINS(err.msg, "<config>:1:1: unknown section 'x'");
}

/* Check the experts of `rank` are exactly [first, first + count). */
static void check_block(int rank, int first, int count)
{
    int32_t ids[MOE_MAX_EXPERTS];
    CHECK_INT_EQ(moe_cfg_experts_of_rank(&cfg, rank, ids), count);
    CHECK_INT_EQ(moe_cfg_experts_of_rank(&cfg, rank, NULL), count);
    for (int i = 0; i < count; i++) {
        CHECK_INT_EQ(ids[i], first + i);
    }
}

static void test_world_one(void)
{
    CHECK_INT_EQ(parse(example_yaml, 1), MOE_OK);
    check_block(0, 0, 8);
    check_block(1, 0, 0);
    /* Ranks that do not exist and a master beyond the world are ignored with one rank. */
    CHECK_INT_EQ(parse("placement:\n"
                       "  master_rank: 3\n"
                       "  experts: {5: [0, 1, 2, 3], 7: [4, 5, 6, 7]}\n"
                       "profiler:\n"
                       "  profiled_ranks: [2]\n",
                       1),
                 MOE_OK);
    CHECK_INT_EQ(cfg.master_rank, 0);
    check_block(0, 0, 8);
}

/* summary.json's config values: a long placement.layers (here ~30 KB, beyond the 8 KiB
 * the values were once cut at) comes out whole. */
static void long_value(void *ctx, const char *path, const char *value, bool quoted)
{
    (void)quoted;
    if (strcmp(path, "placement.layers") == 0) {
        *(char **)ctx = strdup(value);
    }
}

static void test_long_placement_value(void)
{
    size_t cap = 1 << 20, pos = 0;
    char *yaml = malloc(cap);
    CHECK(yaml != NULL);
    if (yaml == NULL) {
        return;
    }
    pos += (size_t)snprintf(yaml + pos, cap - pos, "model:\n  num_experts: 64\n  num_layers: "
                            "40\nplacement:\n  layers:\n");
    for (int l = 0; l < 40; l++) {
        pos += (size_t)snprintf(yaml + pos, cap - pos, "    %d: {1: [", l);
        for (int e = 0; e < 64; e++) {
            pos += (size_t)snprintf(yaml + pos, cap - pos, "%s%d", e ? ", " : "", e);
        }
        pos += (size_t)snprintf(yaml + pos, cap - pos, "], 2: [");
        for (int e = 0; e < 64; e++) {
            pos += (size_t)snprintf(yaml + pos, cap - pos, "%s%d", e ? ", " : "", e);
        }
        pos += (size_t)snprintf(yaml + pos, cap - pos, "]}\n");
    }
    CHECK_INT_EQ(parse(yaml, 3), MOE_OK);
    char *v = NULL;
    moe_cfg_each_value(&cfg, long_value, &v);
    CHECK(v != NULL && strlen(v) > 8192);
    CHECK(v != NULL && strstr(v, "truncated") == NULL);
    CHECK(v != NULL && strncmp(v, "{0: {1: [0, 1, 2", 16) == 0);
    CHECK(v != NULL && strlen(v) > 9 && strcmp(v + strlen(v) - 9, "62, 63]}}") == 0);
    free(v);
    free(yaml);
}

static void test_auto_placement(void)
{
    /* master routing, world 3: master 0 routes, ranks 1 and 2 share 8 experts. */
    CHECK_INT_EQ(parse("{}", 3), MOE_OK);
    check_block(0, 0, 0);
    check_block(1, 0, 4);
    check_block(2, 4, 4);
    /* master routing, world 4: 8 over 3 hosts = 3, 3, 2. */
    CHECK_INT_EQ(parse("{}", 4), MOE_OK);
    check_block(0, 0, 0);
    check_block(1, 0, 3);
    check_block(2, 3, 3);
    check_block(3, 6, 2);
    /* master is rank 2: hosts are 0, 1, 3. */
    CHECK_INT_EQ(parse("placement:\n  master_rank: 2\n", 4), MOE_OK);
    check_block(0, 0, 3);
    check_block(1, 3, 3);
    check_block(2, 0, 0);
    check_block(3, 6, 2);
    /* symmetric, world 3: every rank hosts: 3, 3, 2. */
    CHECK_INT_EQ(parse("runtime:\n  routing: symmetric\n", 3), MOE_OK);
    check_block(0, 0, 3);
    check_block(1, 3, 3);
    check_block(2, 6, 2);
    /* symmetric, world 4: 2 each. */
    CHECK_INT_EQ(parse("runtime:\n  routing: symmetric\n", 4), MOE_OK);
    for (int r = 0; r < 4; r++) {
        check_block(r, 2 * r, 2);
    }
    /* More hosts than experts: the last hosts own none. */
    CHECK_INT_EQ(parse("model:\n  num_experts: 2\n  top_k: 1\n", 4), MOE_OK);
    check_block(1, 0, 1);
    check_block(2, 1, 1);
    check_block(3, 0, 0);
    CHECK_INT_EQ(cfg.expert_owner[2], -1);
}

/* runtime.rebalance_every / redundant_experts: the checks, the slots rule, and the live
 * config's placement.layers replaced whole (placement.experts kept). */
static void test_rebalance(void)
{
    CHECK_INT_EQ(parse("runtime:\n  rebalance_every: 4\n  redundant_experts: 2\n", 3), MOE_OK);
    CHECK_INT_EQ(cfg.rebalance_every, 4);
    CHECK_INT_EQ(cfg.redundant_experts, 2);
    int32_t ranks[MOE_MAX_RANKS];
    CHECK_INT_EQ(moe_cfg_expert_ranks(&cfg, 3, ranks), 2); /* master 0 hosts none */
    CHECK(ranks[0] == 1 && ranks[1] == 2);
    CHECK_INT_EQ(moe_cfg_rebalance_slots(&cfg, 3), 5); /* ceil((8 + 2) / 2) */
    int L = (int)cfg.num_layers, n = 0;
    moe_cfg_replica_t ent[64];
    for (int l = 0; l < L; l++) { /* expert 0 on both ranks, the rest alternate */
        ent[n++] = (moe_cfg_replica_t){.set = (uint16_t)(l + 1), .expert = 0, .rank = 2};
        for (int e = 0; e < 8; e++) {
            ent[n++] = (moe_cfg_replica_t){.set = (uint16_t)(l + 1), .expert = (uint16_t)e,
                                           .rank = 1 + e % 2};
        }
    }
    ent[1].rank = 1; /* layer 0: expert 0 on rank 1 and 2 (listed rank 2 first) */
    CHECK_INT_EQ(moe_cfg_set_layer_sets(&cfg, ent, n, &err), MOE_OK);
    CHECK(cfg.placement_per_layer && cfg.placement_replicas);
    CHECK_INT_EQ(moe_cfg_experts_of_rank(&cfg, 1, NULL), 4); /* placement.experts kept */
    int32_t ids[MOE_MAX_EXPERTS];
    CHECK_INT_EQ(moe_cfg_experts_of_rank_layer(&cfg, 0, 1, ids), 4);
    CHECK(ids[0] == 0 && ids[1] == 2 && ids[3] == 6);
    CHECK_INT_EQ(moe_cfg_experts_of_rank_layer(&cfg, 0, 2, ids), 5);
    CHECK(ids[0] == 0 && ids[1] == 1 && ids[4] == 7);
    CHECK_INT_EQ(moe_cfg_replicas_of(&cfg, 0, 0, ranks), 2);
    CHECK(ranks[0] == 1 && ranks[1] == 2);
    CHECK_INT_EQ(moe_cfg_local_expert(&cfg, 0, 2, 1), 1);
    CHECK_CFG_ERROR("runtime:\n  rebalance_every: -1\n", 3, "cfg.yaml:2:20",
                    "runtime.rebalance_every");
    CHECK_CFG_ERROR("runtime:\n  device: cuda\n  rebalance_every: 2\n", 3, "cfg.yaml:3:20",
                    "runtime.device: cpu only");
    CHECK_CFG_ERROR("runtime:\n  rebalance_every: 2\n  redundant_experts: 9\n", 3,
                    "cfg.yaml:3:22", "do not fit apart on 2 expert ranks");
}

static void test_profiled_ranks(void)
{
    CHECK_INT_EQ(parse("profiler:\n  profiled_ranks: [0, 2]\n", 4), MOE_OK);
    CHECK(!cfg.prof_all_ranks);
    CHECK_INT_EQ(cfg.prof_num_ranks, 2);
    CHECK_INT_EQ(cfg.prof_ranks[0], 0);
    CHECK_INT_EQ(cfg.prof_ranks[1], 2);
    CHECK(moe_cfg_rank_profiled(&cfg, 0));
    CHECK(!moe_cfg_rank_profiled(&cfg, 1));
    CHECK(moe_cfg_rank_profiled(&cfg, 2));
    CHECK(!moe_cfg_rank_profiled(&cfg, 3));
    CHECK(!moe_cfg_rank_profiled(&cfg, -1));
    CHECK(!moe_cfg_rank_profiled(NULL, 0));

    CHECK_INT_EQ(parse("profiler:\n  profiled_ranks:\n    - 3\n", 4), MOE_OK);
    CHECK(moe_cfg_rank_profiled(&cfg, 3));
    CHECK(!moe_cfg_rank_profiled(&cfg, 0));

    CHECK_INT_EQ(parse("{}", 4), MOE_OK);
    for (int r = 0; r < 4; r++) {
        CHECK(moe_cfg_rank_profiled(&cfg, r));
    }
    CHECK(!moe_cfg_rank_profiled(&cfg, 4));
}

static void test_read_file(void)
{
    char *text = NULL;
    size_t len = 0;
    moe_error_t e;
    moe_error_clear(&e);
    CHECK_INT_EQ(moe_cfg_read_file("/nonexistent/moed.yaml", &text, &len, &e), MOE_ERR_IO);
    CHECK_INT_EQ(e.code, MOE_ERR_IO);
    CHECK_STR_CONTAINS(e.msg,
                       "cannot read config '/nonexistent/moed.yaml': No such file or directory");
    CHECK(text == NULL);
    CHECK_INT_EQ(moe_cfg_read_file("/", &text, &len, &e), MOE_ERR_IO);
    CHECK_STR_CONTAINS(e.msg, "cannot read config '/'");
    CHECK_INT_EQ(moe_cfg_read_file(NULL, &text, &len, &e), MOE_ERR_INVALID_ARG);

    char path[] = "/tmp/moed_test_config_XXXXXX";
    FILE *f = NULL;
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) {
        f = fdopen(fd, "w");
    }
    CHECK(f != NULL);
    if (f == NULL) {
        return;
    }
    fputs(example_yaml, f);
    fclose(f);
    CHECK_INT_EQ(moe_cfg_read_file(path, &text, &len, &e), MOE_OK);
    CHECK_INT_EQ(len, strlen(example_yaml));
    CHECK(text != NULL && memcmp(text, example_yaml, len) == 0 && text[len] == '\0');
    CHECK_INT_EQ(moe_cfg_parse(text, len, path, 3, &cfg, &err), MOE_OK);
    CHECK(strcmp(cfg.source_name, path) == 0);
    free(text);
    remove(path);
}

static void test_hash(void)
{
    CHECK(moe_hash64("", 0) == 0xcbf29ce484222325ULL);
    CHECK(moe_hash64("a", 1) == 0xaf63dc4c8601ec8cULL);
    CHECK_INT_EQ(parse("model:\n  top_k: 2\n", 1), MOE_OK);
    uint64_t h1 = cfg.text_hash;
    CHECK_INT_EQ(parse("model:\n  top_k:  2\n", 1), MOE_OK);
    CHECK(cfg.text_hash != h1);
    CHECK_INT_EQ(parse("model:\n  top_k: 2\n", 1), MOE_OK);
    CHECK(cfg.text_hash == h1);
}

/* config.yaml's copy: profiler.control_token's value as written becomes "<redacted>", the
 * rest byte for byte, and the copy parses again with that value. */
static void check_redacted(const char *yaml, const char *want)
{
    CHECK_INT_EQ(parse(yaml, 1), MOE_OK);
    size_t n = 0;
    char *out = moe_cfg_redacted_text(&cfg, yaml, strlen(yaml), &n);
    CHECK(out != NULL);
    if (out == NULL) {
        return;
    }
    CHECK_INT_EQ((long long)n, (long long)strlen(want));
    if (strcmp(out, want) != 0) {
        fprintf(stderr, "redacted:\n%s\nwanted:\n%s\n", out, want);
    }
    CHECK(strcmp(out, want) == 0);
    CHECK(strstr(out, "s3cret") == NULL);
    bool set = strcmp(cfg.prof_control_token, "none") != 0;
    CHECK_INT_EQ(parse(out, 1), MOE_OK);
    CHECK(strcmp(cfg.prof_control_token, set ? "<redacted>" : "none") == 0);
    free(out);
}

static void test_redacted_text(void)
{
    check_redacted("profiler:\n  control_token: s3cret-0123456789  # the token\n  enabled: false\n",
                   "profiler:\n  control_token: \"<redacted>\"  # the token\n  enabled: false\n");
    /* a byte-order mark and two-byte characters before it: libyaml counts characters */
    check_redacted("\xEF\xBB\xBF# caf\xC3\xA9 \xC3\xA9t\xC3\xA9\nprofiler:\n"
                   "  control_token: 's3cret-0123456789 x'\n",
                   "\xEF\xBB\xBF# caf\xC3\xA9 \xC3\xA9t\xC3\xA9\nprofiler:\n  control_token: \"<redacted>\"\n");
    check_redacted("profiler: {control_token: \"s3\\\"cret-0123456789\", enabled: false}\n",
                   "profiler: {control_token: \"<redacted>\", enabled: false}\n");
    check_redacted("profiler:\r\n  control_token: s3cret-0123456789\r\n  enabled: false\r\n",
                   "profiler:\r\n  control_token: \"<redacted>\"\r\n  enabled: false\r\n");
    check_redacted("profiler:\n  control_token: >-\n    s3cret-0123456789\n  enabled: false\n",
                   "profiler:\n  control_token: \"<redacted>\"\n  enabled: false\n");
    /* an alias: the anchored value is the one copy of the secret */
    check_redacted("profiler:\n  output_dir: &t s3cret-0123456789\n  control_token: *t\n",
                   "profiler:\n  output_dir: &t \"<redacted>\"\n  control_token: *t\n");
    check_redacted("profiler:\n  enabled: false\n", "profiler:\n  enabled: false\n");
    check_redacted("profiler:\n  control_token: !!str s3cret-0123456789\n",
                   "profiler:\n  control_token: !!str \"<redacted>\"\n");
    /* not the text cfg came from: nothing */
    const char *a = "profiler:\n  control_token: s3cret-0123456789\n";
    CHECK_INT_EQ(parse(a, 1), MOE_OK);
    size_t n = 0;
    CHECK(moe_cfg_redacted_text(&cfg, "profiler:\n  control_token: s3creT-0123456789\n",
                                strlen(a), &n) == NULL);
    CHECK(moe_cfg_redacted_text(&cfg, NULL, 0, &n) == NULL);
}

/* A control token shorter than 16 bytes is refused where it is written; 16 are enough;
 * a report's copy ("<redacted>") still parses. */
static void test_control_token_length(void)
{
    CHECK_INT_EQ(parse("profiler:\n  control_token: x\n", 1), MOE_ERR_CONFIG);
    CHECK(strstr(err.msg, ":2:") != NULL && strstr(err.msg, "1 byte;") != NULL &&
          strstr(err.msg, "at least 16") != NULL);
    CHECK_INT_EQ(parse("profiler:\n  control_token: 0123456789abcde\n", 1), MOE_ERR_CONFIG);
    CHECK_INT_EQ(parse("profiler:\n  control_token: 0123456789abcdef\n", 1), MOE_OK);
    CHECK_INT_EQ(parse("profiler:\n  control_token: none\n", 1), MOE_OK);
    CHECK_INT_EQ(parse("profiler:\n  control_token: \"<redacted>\"\n", 1), MOE_OK);
}

/* Print through a memory stream and return the text (caller frees). */
static char *print_to_string(void (*print)(const moe_config_t *, FILE *), const moe_config_t *c)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    if (f == NULL) {
        return NULL;
    }
    print(c, f);
    fclose(f);
    return buf;
}

static void print_reference_adapter(const moe_config_t *c, FILE *out)
{
    (void)c;
    moe_cfg_print_reference(out);
}

static void test_print(void)
{
    CHECK_INT_EQ(parse(example_yaml, 3), MOE_OK);
    char *text = print_to_string(moe_cfg_print_placement, &cfg);
    CHECK(text != NULL);
    CHECK(text != NULL && strcmp(text, "rank 0: master (routes tokens), experts -\n"
                                       "rank 1: experts 0 1 2 3\n"
                                       "rank 2: experts 4 5 6 7\n") == 0);
    free(text);

    CHECK_INT_EQ(parse("runtime:\n  routing: symmetric\n", 2), MOE_OK);
    text = print_to_string(moe_cfg_print_placement, &cfg);
    CHECK_STR_CONTAINS(text, "rank 0: routes its tokens, experts 0 1 2 3\n");
    CHECK_STR_CONTAINS(text, "rank 1: routes its tokens, experts 4 5 6 7\n");
    free(text);

    text = print_to_string(print_reference_adapter, NULL);
    CHECK_STR_CONTAINS(text, "KEY");
    CHECK_STR_CONTAINS(text, "model.hidden_dim");
    CHECK_STR_CONTAINS(text, "[1, 65536]");
    CHECK_STR_CONTAINS(text, "swiglu | gelu");
    CHECK_STR_CONTAINS(text, "auto | {rank: [ids]}");
    CHECK_STR_CONTAINS(text, "all | [rank, ...]");
    CHECK_STR_CONTAINS(text, "profiler.output_dir");
    /* One header line plus one line per key. */
    int lines = 0;
    for (const char *s = text; s != NULL && *s != '\0'; s++) {
        lines += *s == '\n';
    }
    CHECK_INT_EQ(lines, (int)moe_cfg_table_size() + 1);
    free(text);
}

/* Malformed input must give OK or one clean error line, never a crash: every prefix of
 * the example, byte mutations of it (a fixed LCG, so failures reproduce), and deep nests. */
static void test_malformed(void)
{
    size_t n = strlen(example_yaml);
    char *buf = malloc(n + 1);
    int bad = 0;
    CHECK(buf != NULL);
    if (buf == NULL) {
        return;
    }
    for (size_t len = 0; len <= n; len++) {
        moe_status_t st = moe_cfg_parse(example_yaml, len, "cfg.yaml", 3, &cfg, &err);
        bad += st != MOE_OK && (strncmp(err.msg, "cfg.yaml", 8) != 0 || strchr(err.msg, '\n'));
    }
    uint32_t seed = 12345;
    const char alphabet[] = "{}[]:,-#&*!|>'\"\n \t0123456789abcxyz\\%@`?\x01\xc3\xa9\xff";
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(buf, example_yaml, n + 1);
        for (int m = 0; m < 1 + iter % 4; m++) {
            seed = seed * 1664525u + 1013904223u;
            size_t at = (seed >> 8) % n;
            seed = seed * 1664525u + 1013904223u;
            buf[at] = alphabet[(seed >> 8) % (sizeof(alphabet) - 1)];
        }
        moe_status_t st = moe_cfg_parse(buf, n, "cfg.yaml", 1 + iter % 4, &cfg, &err);
        bad += st != MOE_OK && (strncmp(err.msg, "cfg.yaml", 8) != 0 || strchr(err.msg, '\n'));
    }
    free(buf);
    CHECK_INT_EQ(bad, 0);

    size_t depth = 100000;
    char *deep = malloc(2 * depth + 16);
    CHECK(deep != NULL);
    if (deep != NULL) {
        memcpy(deep, "model: ", 7);
        memset(deep + 7, '[', depth);  /* the top mapping is level 1 */
        memset(deep + 7 + depth, ']', depth);
        CHECK_INT_EQ(moe_cfg_parse(deep, 7 + 2 * depth, "cfg.yaml", 1, &cfg, &err),
                     MOE_ERR_CONFIG);
        CHECK_STR_CONTAINS(err.msg, "cfg.yaml:1:39: YAML nesting is deeper than 32 levels");
        free(deep);
    }
    /* Anchors are bounded too (libyaml looks each one up linearly). */
    char *anchors = malloc(16 * 300 + 16);
    CHECK(anchors != NULL);
    if (anchors != NULL) {
        size_t pos = (size_t)sprintf(anchors, "x: [");
        for (int i = 0; i < 300; i++) {
            pos += (size_t)sprintf(anchors + pos, "&a%d 0, ", i);
        }
        strcpy(anchors + pos, "1]\n");
        CHECK_INT_EQ(parse(anchors, 1), MOE_ERR_CONFIG);
        CHECK_STR_CONTAINS(err.msg, "more than 256 YAML anchors");
        free(anchors);
    }
    /* An anchor inside itself is a cycle in the node graph; the walk has fixed depth. */
    CHECK_INT_EQ(parse("placement:\n  experts: &a {1: *a}\n", 3), MOE_ERR_CONFIG);
}

/* Entries in a folder other than . and .. (the preflight must leave none behind). */
static int dir_entries(const char *path)
{
    int n = 0;
    DIR *d = opendir(path);
    if (d == NULL) {
        return -1;
    }
    for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    }
    closedir(d);
    return n;
}

static moe_preflight_fail_t preflight(const moe_build_caps_t *caps, const char *dump)
{
    moe_preflight_opts_t po = {.dump_output = dump, .caps = *caps};
    moe_error_clear(&err);
    return moe_preflight_run(&cfg, &po, &err);
}

/* The build against the config: each build kind pretended through opts.caps. */
static void test_preflight_build(const char *outdir)
{
    const moe_build_caps_t cpu = {false, false, false}, full = {true, true, true};
    moe_build_caps_t cuda_no_nccl = {false, true, false};
    CHECK_INT_EQ(parse(example_yaml, 3), MOE_OK);
    snprintf(cfg.prof_output_dir, sizeof(cfg.prof_output_dir), "%s", outdir);
    CHECK_INT_EQ(preflight(&cpu, NULL), MOE_PREFLIGHT_OK);
    cfg.device = MOE_DEVICE_CUDA;
    CHECK_INT_EQ(preflight(&cpu, NULL), MOE_PREFLIGHT_CONFIG);
    CHECK_INT_EQ(err.code, MOE_ERR_CONFIG);
    CHECK_STR_CONTAINS(err.msg, "runtime.device: cuda is not available in this build");
    CHECK_INT_EQ(preflight(&full, NULL), MOE_PREFLIGHT_OK);
    cfg.transport = MOE_TRANSPORT_NCCL;
    CHECK_INT_EQ(preflight(&cuda_no_nccl, NULL), MOE_PREFLIGHT_CONFIG);
    CHECK_STR_CONTAINS(err.msg, "runtime.transport: nccl is not available in this build");
    CHECK_INT_EQ(preflight(&full, NULL), MOE_PREFLIGHT_OK);
    cfg.device = MOE_DEVICE_CPU;
    CHECK_INT_EQ(preflight(&full, NULL), MOE_PREFLIGHT_CONFIG); /* nccl moves GPU memory */
    CHECK_STR_CONTAINS(err.msg, "nccl moves GPU memory; it needs runtime.device: cuda");
    cfg.transport = MOE_TRANSPORT_UCX;
    CHECK_INT_EQ(preflight(&cpu, NULL), MOE_PREFLIGHT_CONFIG);
    CHECK_STR_CONTAINS(err.msg, "runtime.transport: ucx is not available in this build");
    CHECK_INT_EQ(preflight(&full, NULL), MOE_PREFLIGHT_OK);
    moe_build_caps_t mine = moe_build_caps();
    CHECK(!mine.nccl || mine.cuda); /* NCCL is only built with CUDA */
}

/* Input files: the key, the path as written, the absolute path a relative one led to. */
static void test_preflight_inputs(const char *outdir)
{
    const moe_build_caps_t cpu = {false, false, false};
    char cwd[MOE_PATH_MAX], want[2 * MOE_PATH_MAX], file[MOE_PATH_MAX / 2];
    CHECK(getcwd(cwd, sizeof(cwd)) != NULL);
    CHECK_INT_EQ(parse(example_yaml, 3), MOE_OK);
    snprintf(cfg.prof_output_dir, sizeof(cfg.prof_output_dir), "%s", outdir);
    snprintf(cfg.weights, sizeof(cfg.weights), "./nope/w.safetensors");
    CHECK_INT_EQ(preflight(&cpu, NULL), MOE_PREFLIGHT_INPUT);
    CHECK_INT_EQ(err.code, MOE_ERR_IO);
    snprintf(want, sizeof(want),
             "model.weights: cannot read './nope/w.safetensors' (tried %s/nope/w.safetensors): "
             "No such file or directory", cwd);
    CHECK_STR_CONTAINS(err.msg, want);
    snprintf(cfg.weights, sizeof(cfg.weights), "%s", outdir);
    CHECK_INT_EQ(preflight(&cpu, NULL), MOE_PREFLIGHT_INPUT);
    CHECK_STR_CONTAINS(err.msg, "is a folder, not a .safetensors file");
    snprintf(file, sizeof(file), "%s/w.safetensors", outdir);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    if (f != NULL) {
        fclose(f);
    }
    /* exists: its content is the loader's to judge */
    snprintf(cfg.weights, sizeof(cfg.weights), "%s", file);
    CHECK_INT_EQ(preflight(&cpu, NULL), MOE_PREFLIGHT_OK);
    snprintf(cfg.input, sizeof(cfg.input), "/nonexistent/in.safetensors");
    CHECK_INT_EQ(preflight(&cpu, NULL), MOE_PREFLIGHT_INPUT);
    CHECK_STR_CONTAINS(err.msg, "workload.input: cannot read '/nonexistent/in.safetensors': No "
                                "such file or directory");
    CHECK(strstr(err.msg, "tried") == NULL); /* an absolute path is shown once */
    remove(file);
    /* a path written in the file: its errors cite file:line:col, as the config's do */
    CHECK_INT_EQ(parse("model:\n  hidden_dim: 64\n  weights: /nonexistent/w.safetensors\n", 3),
                 MOE_OK);
    snprintf(cfg.prof_output_dir, sizeof(cfg.prof_output_dir), "%s", outdir);
    CHECK_INT_EQ(preflight(&cpu, NULL), MOE_PREFLIGHT_INPUT);
    CHECK_STR_CONTAINS(err.msg, "cfg.yaml:3:12: model.weights: cannot read "
                                "'/nonexistent/w.safetensors': No such file or directory");
}

/* workload.routing: a trace that does not fit the model, or none there, is reported at the
 * value's file:line:col too (the header check; rank 0's read at start words it the same). */
static void test_preflight_routing(const char *outdir)
{
    const moe_build_caps_t cpu = {false, false, false};
    char yaml[MOE_PATH_MAX + 128], path[MOE_PATH_MAX / 2], want[MOE_PATH_MAX];
    snprintf(path, sizeof(path), "%s/t.safetensors", outdir);
    snprintf(yaml, sizeof(yaml), "model:\n  hidden_dim: 64\nworkload:\n  routing: %s\n", path);
    CHECK_INT_EQ(parse(yaml, 3), MOE_OK);
    snprintf(cfg.prof_output_dir, sizeof(cfg.prof_output_dir), "%s", outdir);
    CHECK_INT_EQ(preflight(&cpu, NULL), MOE_PREFLIGHT_INPUT); /* not there yet */
    snprintf(want, sizeof(want), "cfg.yaml:4:12: workload.routing: %s: cannot read", path);
    CHECK_STR_CONTAINS(err.msg, want);
    /* a trace of twice the model's experts */
    enum { ROWS = 4096, K = 8 };
    static int32_t ids[ROWS * K];
    static float w[ROWS * K];
    for (int i = 0; i < ROWS * K; i++) {
        ids[i] = i % K, w[i] = 1.0f / K;
    }
    const int32_t *id_rows[MOE_MAX_LAYER_IDS];
    const float *w_rows[MOE_MAX_LAYER_IDS];
    for (int l = 0; l < cfg.num_layers; l++) {
        id_rows[l] = ids, w_rows[l] = w;
    }
    CHECK(cfg.top_k <= K && cfg.tokens_per_step <= ROWS);
    moe_routing_out_t t = {.num_layers = (int)cfg.num_layers, .layer_ids = cfg.layer_ids,
                           .num_experts = 2 * (int)cfg.num_experts, .top_k = (int)cfg.top_k,
                           .rows = ROWS, .tokens_per_step = cfg.tokens_per_step, .family = "",
                           .source = "test", .ids = id_rows, .weights = w_rows};
    CHECK_INT_EQ(moe_routing_trace_write(path, &t, &err), MOE_OK);
    CHECK_INT_EQ(preflight(&cpu, NULL), MOE_PREFLIGHT_INPUT);
    snprintf(want, sizeof(want), "cfg.yaml:4:12: workload.routing: %s: metadata num_experts %d",
             path, 2 * (int)cfg.num_experts);
    CHECK_STR_CONTAINS(err.msg, want);
    remove(path);
}

/* Output folders: judged without creating anything, and the probe file is removed. */
static void test_preflight_outputs(const char *outdir)
{
    const moe_build_caps_t cpu = {false, false, false};
    char path[MOE_PATH_MAX / 2], file[MOE_PATH_MAX / 2];
    struct stat sb;
    CHECK_INT_EQ(parse(example_yaml, 3), MOE_OK);
    snprintf(cfg.prof_output_dir, sizeof(cfg.prof_output_dir), "%s/a/b/", outdir);
    CHECK_INT_EQ(preflight(&cpu, NULL), MOE_PREFLIGHT_OK);
    snprintf(path, sizeof(path), "%s/a", outdir);
    CHECK(stat(path, &sb) != 0 && errno == ENOENT); /* the run makes it, not the check */
    CHECK_INT_EQ(dir_entries(outdir), 0);
    snprintf(file, sizeof(file), "%s/f", outdir);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    if (f != NULL) {
        fclose(f);
    }
    snprintf(cfg.prof_output_dir, sizeof(cfg.prof_output_dir), "%s/x/y", file);
    CHECK_INT_EQ(preflight(&cpu, NULL), MOE_PREFLIGHT_OUTPUT);
    CHECK_STR_CONTAINS(err.msg, "profiler.output_dir: cannot write in");
    CHECK_STR_CONTAINS(err.msg, "/f' is a file: Not a directory");
    cfg.prof_enabled = false; /* no profiler, no report folder */
    CHECK_INT_EQ(preflight(&cpu, NULL), MOE_PREFLIGHT_OK);
    snprintf(path, sizeof(path), "%s/none/out.safetensors", outdir);
    CHECK_INT_EQ(preflight(&cpu, path), MOE_PREFLIGHT_OUTPUT);
    CHECK_STR_CONTAINS(err.msg, "--dump-output: cannot write in");
    CHECK_STR_CONTAINS(err.msg, "/none': No such file or directory");
    CHECK_INT_EQ(preflight(&cpu, outdir), MOE_PREFLIGHT_OUTPUT);
    CHECK_STR_CONTAINS(err.msg, "is a folder; name a file in it");
    snprintf(path, sizeof(path), "%s/out.safetensors", outdir);
    CHECK_INT_EQ(preflight(&cpu, path), MOE_PREFLIGHT_OK);
    CHECK_INT_EQ(dir_entries(outdir), 1); /* only f: no probe file left */
    remove(file);
}

static void test_preflight(void)
{
    char dir[] = "/tmp/moed_test_preflight_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    test_preflight_build(dir);
    test_preflight_inputs(dir);
    test_preflight_routing(dir);
    test_preflight_outputs(dir);
    CHECK_INT_EQ(dir_entries(dir), 0);
    rmdir(dir);
}

int main(void)
{
    test_table();
    test_family_names();
    test_example();
    test_other_values();
    test_defaults();
    test_unknown_names();
    test_wrong_types();
    test_out_of_range();
    test_reference_bounds();
    test_placement_errors();
    test_rank_errors();
    test_yaml_errors();
    test_world_one();
    test_auto_placement();
    test_long_placement_value();
    test_rebalance();
    test_profiled_ranks();
    test_read_file();
    test_hash();
    test_redacted_text();
    test_control_token_length();
    test_print();
    test_malformed();
    test_preflight();
    return moe_test_finish("test_config");
}
