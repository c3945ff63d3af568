/* Part app (runtime/src/app/): the program: main, the start-up handshake, the engine that
 * runs steps, --bench. May include: base config model transport expert layer (and the
 * public headers in moe/). One file of each part's folder opens with such a comment;
 * tests/lint/parts.sh holds every part to its list. */
/* moed: run MoE layers across MPI ranks.  See `moed --help` and README.md. */
#include <errno.h>
#include <malloc.h>
#include <mpi.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/engine.h"
#include "app/preflight.h"
#include "expert/gemm.h"
#include "moe/build_info.h"
#include "moe/hash.h"
#include "moe/log.h"
#include "moe/mpi_check.h"
#include "moe/poll.h"
#include "moe_config/config.h"
#include "moe_prof/prof.h"
#include "moe_model/safetensors.h"
#include "moe/stop.h"
#include "moe/watchdog.h"
#include "transport/wait.h"
#include "transport/wake.h"
#include "app/profiler_ab.h"
#include "app/selfbench.h"
#include "app/startup.h"
#include "model/checkpoint.h"
#include "model/weights.h"

/* Exit codes (docs/faults.md "Exit codes"). */
enum {
    EXIT_OK = 0,
    EXIT_RUNTIME = 1,  /* MPI / peer / internal failure during the run */
    EXIT_USAGE = 2,    /* bad command-line flags */
    EXIT_CONFIG = 3,   /* the config file is missing or invalid */
    EXIT_INPUT = 4,    /* weights or input file missing, corrupt or not matching the config */
    EXIT_OUTPUT = 5,   /* an output file could not be written */
    EXIT_MISMATCH = 6, /* the ranks are not the same moed (build, protocol) or not one job */
    EXIT_WATCHDOG = 7, /* a step made no progress for runtime.step_timeout_s */
    EXIT_SIGNAL = 130, /* stopped by SIGINT / SIGTERM / SIGHUP (at start-up or mid-run) */
};

typedef struct options {
    const char *config;
    const char *dump_output;
    long long steps;     /* -1: from the config */
    int ranks;           /* --ranks for --check-config; 0: the MPI world */
    bool check_config;
    bool help;
    bool help_config;
    bool version;
    bool bench;
    long long profiler_ab; /* --profiler-ab K: 0 off */
    int progress;        /* -1 auto (a terminal), 0 off, 1 on */
} options_t;

static void print_usage(FILE *out)
{
    fprintf(out,
            "usage: mpirun -np N moed --config FILE [options]\n"
            "       moed --config FILE [options]          (one rank hosting every expert)\n"
            "       moed compare RUN_DIR_A RUN_DIR_B       (two profiler reports side by side)\n"
            "       moed plan RUN_DIR --ranks N [--redundant R] [--slots S] [--hostfile F] [-o FILE]\n"
            "                 [--force]         (a balanced placement with replicas from a report;\n"
            "                                    writes RUN_DIR/planned.yaml unless -o, '-': stdout;\n"
            "                                    an existing file is replaced only with --force)\n"
            "       moed plan --routing TRACE --ranks N [--config BASE.yaml] [same options]\n"
            "                                   (the same from a routing trace: docs/routing.md)\n"
            "       moed plan --check RUN_DIR   (did a replay measure what the plan predicted?)\n"
            "       moed top URL [--once]                  (a live endpoint in the terminal)\n"
            "\n"
            "Runs Mixture-of-Experts layers across MPI ranks as the YAML config says.\n"
            "\n"
            "options:\n"
            "  --config FILE         the YAML config (read by rank 0 only)\n"
            "                        (every option with a value also takes --name=VALUE)\n"
            "  --steps N             override workload.steps (0..1000000000; 0: no end,\n"
            "                        until SIGINT/SIGTERM, as workload.steps: 0)\n"
            "  --dump-output FILE    write the last step's hidden states as tensor 'output'\n"
            "                        (F32, [tokens, hidden_dim]) to a .safetensors file\n"
            "  --check-config        validate the config and what the run needs (build,\n"
            "                        files, output folders), print the placement, exit\n"
            "  --ranks N             with --check-config only: validate for N ranks (1..4096;\n"
            "                        default: the MPI world size)\n"
            "  --help-config         print every config key with its default, range and unit\n"
            "  --bench               after the run, print figures against this machine's limits\n"
            "  --profiler-ab K       measure what profiling costs in this run: blocks of K\n"
            "                        steps alternate with the profiler's hooks on and off;\n"
            "                        prints tokens/s on/off (needs profiler.enabled or\n"
            "                        profiler.listen; the report covers the on blocks)\n"
            "  --progress / --no-progress\n"
            "                        progress line on rank 0 (default: on when stdout is a\n"
            "                        terminal)\n"
            "  --version             print version, build id and BLAS, exit\n"
            "  -h, --help            this text\n"
            "\n"
            "exit codes: 0 ok, 1 runtime failure, 2 bad flags, 3 bad config, 4 bad weights or\n"
            "input, 5 cannot write output, 6 ranks run different moed builds, 7 watchdog,\n"
            "130 interrupted\n");
}

/* One row per command-line option: what it sets and, for numbers, the accepted range.
 * The parser, "did you mean" and the repeat check all read this table. */
typedef enum { OPT_FLAG, OPT_TEXT, OPT_NUMBER } opt_kind_t;

typedef struct opt_def {
    const char *name;
    opt_kind_t kind;
    const char **text;   /* OPT_TEXT */
    long long *number;   /* OPT_NUMBER, within [min, max] */
    long long min, max;
    bool *flag;          /* OPT_FLAG: set to true ... */
    int *choice;         /* ... or OPT_FLAG: *choice = value (--progress / --no-progress) */
    int value;
} opt_def_t;

#define OPT_STEPS_MAX 1000000000LL

/* The definition named like `a` up to its '=' (or its end), or NULL. */
static const opt_def_t *opt_find(const opt_def_t *defs, size_t n, const char *a, size_t len)
{
    for (size_t i = 0; i < n; i++) {
        if (strlen(defs[i].name) == len && strncmp(defs[i].name, a, len) == 0) {
            return &defs[i];
        }
    }
    return NULL;
}

static void opt_unknown(const opt_def_t *defs, size_t n, const char *a, size_t len, char *why,
                        size_t why_len)
{
    const char *names[32];
    char word[80];
    size_t k = 0;
    for (size_t i = 0; i < n && k < sizeof(names) / sizeof(names[0]); i++) {
        names[k++] = defs[i].name;
    }
    snprintf(word, sizeof(word), "%.*s", (int)(len < sizeof(word) ? len : sizeof(word) - 1), a);
    const char *hint = moe_cfg_suggest(word, names, k);
    if (hint != NULL) {
        snprintf(why, why_len, "unknown option '%s' (did you mean %s?)", word, hint);
    } else {
        snprintf(why, why_len, "unknown option '%s' (see moed --help)", word);
    }
}

static int opt_number(const opt_def_t *d, const char *v, char *why, size_t why_len)
{
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end != '\0' || (v[0] != '-' && (v[0] < '0' || v[0] > '9'))) {
        /* digits only, as the config's numbers (strtoll alone takes " 5" and "+5") */
        snprintf(why, why_len, "%s: '%s' is not a whole number (%lld..%lld)", d->name, v, d->min,
                 d->max);
        return -1;
    }
    if (errno == ERANGE || x < d->min || x > d->max) {
        snprintf(why, why_len, "%s: %s is outside %lld..%lld", d->name, v, d->min, d->max);
        return -1;
    }
    *d->number = x;
    return 0;
}

/* Apply one definition; `v` is its value (NULL for flags). */
static int opt_apply(const opt_def_t *d, const char *v, char *why, size_t why_len)
{
    switch (d->kind) {
    case OPT_TEXT:
        *d->text = v;
        return 0;
    case OPT_NUMBER:
        return opt_number(d, v, why, why_len);
    case OPT_FLAG:
        if (d->flag != NULL) {
            *d->flag = true;
        } else {
            *d->choice = d->value;
        }
        return 0;
    }
    return 0;
}

/* Which definition already set the target of `d` (two flags may share one: --progress and
 * --no-progress), or NULL. */
static const opt_def_t *opt_seen_before(const opt_def_t *const *seen, size_t nseen,
                                        const opt_def_t *d)
{
    for (size_t i = 0; i < nseen; i++) {
        const opt_def_t *s = seen[i];
        if (s->text == d->text && s->number == d->number && s->flag == d->flag &&
            s->choice == d->choice) {
            return s;
        }
    }
    return NULL;
}

/* The value of option `d` given as argv[*i]: after '=' (`eq`), else the next argument. */
static const char *opt_value(const opt_def_t *d, int argc, char **argv, int *i, const char *eq,
                             char *why, size_t why_len)
{
    const char *v = eq != NULL ? eq + 1 : (*i + 1 < argc ? argv[++*i] : NULL);
    if (v == NULL || *v == '\0') {
        snprintf(why, why_len, "%s needs a value (%s %s or %s=%s)", d->name, d->name,
                 d->kind == OPT_NUMBER ? "N" : "FILE", d->name, d->kind == OPT_NUMBER ? "N" : "FILE");
        return NULL;
    }
    if (eq == NULL && strncmp(v, "--", 2) == 0) {
        /* `--config --steps 3`: the file name was left out. */
        snprintf(why, why_len, "%s needs a value, got the option '%s'", d->name, v);
        return NULL;
    }
    return v;
}

/* Every rank parses the same argv, so every rank reaches the same verdict. Options take
 * "--name VALUE" or "--name=VALUE"; an option given twice is an error (which one would
 * win is not obvious from a long mpirun line). */
static int parse_args(int argc, char **argv, options_t *o, char *why, size_t why_len)
{
    memset(o, 0, sizeof(*o));
    o->steps = -1;
    o->progress = -1;
    long long ranks = 0;
    const opt_def_t defs[] = {
        {.name = "--config", .kind = OPT_TEXT, .text = &o->config},
        {.name = "--steps", .kind = OPT_NUMBER, .number = &o->steps, .min = 0,
         .max = OPT_STEPS_MAX},
        {.name = "--dump-output", .kind = OPT_TEXT, .text = &o->dump_output},
        {.name = "--check-config", .kind = OPT_FLAG, .flag = &o->check_config},
        {.name = "--ranks", .kind = OPT_NUMBER, .number = &ranks, .min = 1,
         .max = MOE_MAX_RANKS},
        {.name = "--help-config", .kind = OPT_FLAG, .flag = &o->help_config},
        {.name = "--bench", .kind = OPT_FLAG, .flag = &o->bench},
        {.name = "--profiler-ab", .kind = OPT_NUMBER, .number = &o->profiler_ab, .min = 1,
         .max = 1000000},
        {.name = "--progress", .kind = OPT_FLAG, .choice = &o->progress, .value = 1},
        {.name = "--no-progress", .kind = OPT_FLAG, .choice = &o->progress, .value = 0},
        {.name = "--version", .kind = OPT_FLAG, .flag = &o->version},
        {.name = "--help", .kind = OPT_FLAG, .flag = &o->help},
        {.name = "-h", .kind = OPT_FLAG, .flag = &o->help},
    };
    const size_t ndefs = sizeof(defs) / sizeof(defs[0]);
    const opt_def_t *seen[sizeof(defs) / sizeof(defs[0])];
    size_t nseen = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-') {
            bool yaml = strstr(a, ".yaml") != NULL || strstr(a, ".yml") != NULL;
            snprintf(why, why_len, "unexpected argument '%s'%s%s%s", a,
                     yaml ? " (did you mean --config " : "", yaml ? a : "", yaml ? "?)" : "");
            return -1;
        }
        const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        size_t len = eq != NULL ? (size_t)(eq - a) : strlen(a);
        const opt_def_t *d = opt_find(defs, ndefs, a, len);
        if (d == NULL) {
            opt_unknown(defs, ndefs, a, len, why, why_len);
            return -1;
        }
        const opt_def_t *prev = opt_seen_before(seen, nseen, d);
        if (prev != NULL) {
            if (prev == d) {
                snprintf(why, why_len, "%s given twice", d->name);
            } else {
                snprintf(why, why_len, "%s and %s both given (choose one)", prev->name, d->name);
            }
            return -1;
        }
        seen[nseen++] = d;
        const char *v = NULL;
        if (d->kind == OPT_FLAG && eq != NULL) {
            snprintf(why, why_len, "%s takes no value, got '%s'", d->name, a);
            return -1;
        }
        if (d->kind != OPT_FLAG && (v = opt_value(d, argc, argv, &i, eq, why, why_len)) == NULL) {
            return -1;
        }
        if (opt_apply(d, v, why, why_len) != 0) {
            return -1;
        }
    }
    if (ranks > 0 && !o->check_config) {
        snprintf(why, why_len, "--ranks only applies with --check-config (a run has the ranks "
                               "mpirun starts: mpirun -np N)");
        return -1;
    }
    o->ranks = (int)ranks;
    if (!o->help && !o->help_config && !o->version && o->config == NULL) {
        snprintf(why, why_len, "--config FILE is required (try --config configs/experts.yaml)");
        return -1;
    }
    return 0;
}

static int exit_code_for(moe_status_t st)
{
    switch (st) {
    case MOE_OK:
        return EXIT_OK;
    case MOE_ERR_CONFIG:
        return EXIT_CONFIG;
    case MOE_ERR_IO:
    case MOE_ERR_FORMAT:
    case MOE_ERR_TRUNCATED:
    case MOE_ERR_WEIGHTS:
    case MOE_ERR_UNSUPPORTED:
        return EXIT_INPUT;
    case MOE_ERR_INTERRUPTED:
        return EXIT_SIGNAL;
    case MOE_ERR_PEER:
        return EXIT_MISMATCH;
    case MOE_ERR_TIMEOUT:
        return EXIT_WATCHDOG;
    default:
        return EXIT_RUNTIME;
    }
}

/* The summary's figures from every rank, reduced to rank 0. */
typedef struct summary_totals {
    double expert[2]; /* flops, ns: summed */
    long long dropped;
    double prof_max;  /* the largest share of run time in the profiler's hooks */
    double live_max;  /* ... and in the live path's alone (part of prof_max) */
    double threads_max; /* the largest share of run time in the profiler's threads' CPU */
} summary_totals_t;

static moe_status_t summary_reduce(const moe_engine_t *eng, summary_totals_t *tot,
                                   moe_error_t *err)
{
    double mine[2] = {eng->expert_flops, (double)eng->expert_ns};
    long long drop = eng->dropped;
    double prof_share = eng->run_ns > 0 ? (double)eng->prof_ns / (double)eng->run_ns : 0.0;
    double live_share = eng->run_ns > 0 ? (double)eng->live_ns / (double)eng->run_ns : 0.0;
    double threads = (double)(moe_prof_threads_cpu_ns(eng->prof) +
                              moe_live_threads_cpu_ns(eng->live));
    double threads_share = eng->run_ns > 0 ? threads / (double)eng->run_ns : 0.0;
    *tot = (summary_totals_t){{0, 0}, 0, 0.0, 0.0, 0.0};
    /* non-blocking and polled: a rank stopped after the last step trips the watchdog */
    MPI_Request req[5];
    moe_status_t st = MOE_MPI(MPI_Ireduce(mine, tot->expert, 2, MPI_DOUBLE, MPI_SUM, 0,
                                          eng->comm, &req[0]),
                              err);
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Ireduce(&drop, &tot->dropped, 1, MPI_LONG_LONG, MPI_SUM, 0, eng->comm,
                                 &req[1]),
                     err);
    }
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Ireduce(&prof_share, &tot->prof_max, 1, MPI_DOUBLE, MPI_MAX, 0,
                                 eng->comm, &req[2]),
                     err);
    }
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Ireduce(&live_share, &tot->live_max, 1, MPI_DOUBLE, MPI_MAX, 0,
                                 eng->comm, &req[3]),
                     err);
    }
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Ireduce(&threads_share, &tot->threads_max, 1, MPI_DOUBLE, MPI_MAX, 0,
                                 eng->comm, &req[4]),
                     err);
    }
    for (int i = 0; i < 5 && st == MOE_OK; i++) {
        st = moe_wait_request(&req[i], "the summary's reduction", err);
    }
    return st;
}

/* --profiler-ab: tokens/s with the hooks on over off, from rank 0's block times (every
 * rank steps in lockstep with the others through the exchanges). */
static void print_profiler_ab(const moe_engine_t *eng)
{
    moe_ab_result_t r;
    if (eng->ab_steps == 0) {
        return;
    }
    if (moe_ab_compute(eng->ab_block_ns, eng->ab_blocks, eng->ab_steps, &r) != 0) {
        printf("profiler A/B: no figure (%lld whole blocks of %lld steps ran: a pair needs 2)\n",
               (long long)eng->ab_blocks, (long long)eng->ab_steps);
        return;
    }
    printf("profiler A/B: %lld pairs of %lld-step blocks, hooks on %.4f ms/step, off %.4f "
           "ms/step\n",
           (long long)r.pairs, (long long)eng->ab_steps, r.on_ms_per_step, r.off_ms_per_step);
    printf("profiler A/B: tokens/s on/off %.4f (median of pairs; mean %.4f, 95%% interval "
           "%.4f-%.4f; totals %.4f)\n",
           r.median, r.mean, r.lo, r.hi, r.totals);
}

static moe_status_t print_summary(const moe_engine_t *eng, moe_error_t *err)
{
    const moe_config_t *cfg = eng->cfg;
    int W = eng->world_size;
    /* Expert figures from every rank; phases from rank 0 (the router in master mode). */
    summary_totals_t totals;
    moe_status_t st = summary_reduce(eng, &totals, err);
    if (st != MOE_OK || eng->rank != 0 || eng->steps_done == 0) {
        return st;
    }
    const double *tot = totals.expert;
    long long drop_all = totals.dropped;
    double prof_max = totals.prof_max;
    double secs = (double)eng->run_ns * 1e-9;
    double steps = (double)eng->steps_done;
    double tps = steps * (double)cfg->tokens_per_step / secs;
    printf("moed %s: %d rank%s, %s routing over %s, BLAS %s, %lld threads/rank%s%s\n",
           moe_version(), W, W == 1 ? "" : "s",
           cfg->routing == MOE_ROUTING_MASTER ? "master" : "symmetric",
           moe_transport_name(eng->transport),
           moe_gemm_backend_name(), (long long)cfg->threads, eng->bind_desc[0] ? "; " : "",
           eng->bind_desc);
    printf("model: %lld layer%s x %lld experts (top-%lld, %s), hidden %lld, ffn %lld, weights %s\n",
           (long long)cfg->num_layers, cfg->num_layers == 1 ? "" : "s",
           (long long)cfg->num_experts, (long long)cfg->top_k,
           moe_cfg_activation_name(cfg->activation),
           (long long)cfg->hidden_dim,
           (long long)cfg->ffn_dim, eng->weights.naming);
    if (strcmp(moe_engine_routing_source(eng), "router") != 0) {
        printf("routing: %s, in place of the gate\n", moe_engine_routing_source(eng));
    }
    printf("run: %lld steps x %lld tokens in %.3f s (%.2f ms/step)\n", (long long)eng->steps_done,
           (long long)cfg->tokens_per_step, secs, secs * 1e3 / steps);
    printf("rank 0 phases, ms/step:");
    for (int p = 0; p < MOE_PHASE_LAYER_COUNT; p++) {
        printf(" %s %.2f", moe_phase_name(p), (double)eng->phase_ns[p] * 1e-6 / steps);
    }
    printf("\n");
    if (tot[1] > 0) {
        printf("experts: %.1f GFLOP/s per busy expert-second, %.1f GFLOP total\n",
               tot[0] / tot[1], tot[0] * 1e-9);
    }
    if (cfg->capacity_factor > 0) {
        double choices = steps * (double)cfg->num_layers * (double)cfg->tokens_per_step *
                         (double)cfg->top_k;
        printf("capacity: %lld of %.0f expert choices dropped (%.2f%%)\n", drop_all, choices,
               100.0 * (double)drop_all / choices);
    }
    if (eng->prof != NULL || eng->live != NULL) {
        /* its direct cost: time inside its per-step hooks, and its threads' CPU time (cache
         * effects are not in these; --profiler-ab measures tokens/s with the hooks on and
         * off in one run, bench_live.sh runs on and off) */
        printf("profiler: %.3f%% of run time in its hooks (the most of any rank)\n",
               100.0 * prof_max);
        if (eng->live != NULL) {
            printf("live: %.3f%% of run time in its hooks (the most of any rank)\n",
                   100.0 * totals.live_max);
        }
        printf("profiler threads: %.3f%% of run time in CPU (memory sampler%s; the most of "
               "any rank)\n",
               100.0 * totals.threads_max,
               eng->live != NULL ? ", HTTP handlers, window writers" : "");
        print_profiler_ab(eng);
    }
    printf("tokens/s: %.0f\n", tps);
    return MOE_OK;
}

static moe_status_t dump_output(moe_engine_t *eng, const char *path, moe_error_t *err)
{
    float *all = NULL;
    moe_status_t st = moe_engine_gather_output(eng, &all, err);
    if (st != MOE_OK) {
        return st;
    }
    if (eng->rank == 0) {
        moe_st_out_tensor_t t = {.name = "output", .dtype = MOE_ST_F32, .ndim = 2,
                                 .shape = {eng->cfg->tokens_per_step, eng->cfg->hidden_dim},
                                 .data = all};
        st = moe_st_write(path, &t, 1, err);
        if (st == MOE_OK) {
            MOE_INFO("output: %s", path);
        }
    }
    free(all);
    st = moe_agree(eng->comm, st, err);
    return st == MOE_OK ? MOE_OK : MOE_ERR_IO;
}

/* Whether the person who started the job sees our stdout on a terminal. Open MPI hands
 * ranks a pty even when mpirun's own output goes to a file or pipe, so under mpirun ask
 * about mpirun's stdout instead (rank 0 runs on mpirun's node, as its child). */
static bool stdout_is_terminal(void)
{
    if (!isatty(STDOUT_FILENO)) {
        return false;
    }
    if (getenv("OMPI_COMM_WORLD_SIZE") == NULL) {
        return true;
    }
    char path[64], target[256];
    snprintf(path, sizeof(path), "/proc/%d/fd/1", (int)getppid());
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    if (n <= 0) {
        return false;
    }
    target[n] = '\0';
    return strncmp(target, "/dev/pts/", 9) == 0 || strncmp(target, "/dev/tty", 8) == 0;
}

/* The final profile records may come from ranks that are gone: wait this long for them.
 * After a signal Open MPI sends SIGKILL odls_base_sigkill_timeout (1 s) after SIGTERM. */
static double profile_deadline_s(const moe_config_t *cfg, bool interrupted)
{
    if (interrupted) {
        return 0.6; /* ranks notice within one expert call; rank 0 then has ~0.3 s to write */
    }
    return cfg->step_timeout_s > 30.0 ? cfg->step_timeout_s : 30.0;
}

static int finish_profile(moe_engine_t *eng, const moe_config_t *cfg, const char *text,
                          size_t len, bool interrupted, const char *missing_why, int rank)
{
    moe_error_t perr;
    moe_error_clear(&perr);
    char run_dir[MOE_PATH_MAX] = "";
    double deadline = missing_why != NULL ? 0.2 : profile_deadline_s(cfg, interrupted);
    moe_status_t st = moe_engine_finish_profile(eng, text, len, interrupted, deadline,
                                                missing_why, run_dir, sizeof(run_dir), &perr);
    if (st == MOE_ERR_TIMEOUT && !interrupted) {
        /* a rank stopped after the last step: the report (partial) is written; end the job */
        MOE_ERROR("%s", perr.msg);
        fflush(stdout);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, EXIT_WATCHDOG);
    }
    if (st != MOE_OK && rank == 0) {
        MOE_ERROR("profile report: %s", perr.msg);
    }
    return st == MOE_OK ? EXIT_OK : EXIT_OUTPUT;
}

/* Who stopped the job, for the one line rank 0 prints: "SIGINT" or "SIGTERM on rank 2". */
static void stop_cause(char *out, size_t len)
{
    int origin = moe_stop_origin();
    if (origin >= 0) {
        snprintf(out, len, "%s on rank %d", moe_stop_signal_name(moe_stop_signal()), origin);
    } else {
        snprintf(out, len, "%s", moe_stop_signal_name(moe_stop_signal()));
    }
}

/* A stop before any step: rank 0 says so; no MPI_Finalize (ranks may have left different
 * collectives in flight). */
static void stopped_at_startup(int rank, bool *skip_finalize)
{
    *skip_finalize = true;
    if (rank == 0) {
        char cause[128];
        stop_cause(cause, sizeof(cause));
        MOE_ERROR("stopped by %s during start-up, before any step", cause);
    }
}

/* mpirun ends the job for a Ctrl-C or for a rank it lost (killed, crashed): the ranks that
 * do not answer a ping within 0.3 s are the lost ones, named in rank 0's line ("" if none,
 * or when a signal of a rank's own, SIGINT/SIGTERM/SIGHUP, stopped the job). */
static void stop_lost_ranks(const moe_engine_t *eng, char *out, size_t len)
{
    int dead[16];
    out[0] = '\0';
    int n = moe_stop_origin() < 0 && moe_stop_signal() == SIGCONT
                ? moe_watchdog_unresponsive(0.3, dead, 16)
                : 0;
    size_t used = 0;
    for (int i = 0; i < n && used + 80 < len; i++) {
        used += (size_t)snprintf(out + used, len - used, "%srank %d (%s)%s",
                                 i ? ", " : "; lost: ", dead[i], eng->hosts[dead[i]],
                                 i + 1 == n ? " (does not answer)" : "");
    }
}

/* The watchdog fired here or on another rank (err says where; printed once, by the rank that
 * reports it). Rank 0 first writes the report of the completed steps, marked partial; then
 * the job ends, whichever rank's watchdog it was. */
static void abort_on_watchdog(moe_engine_t *eng, const moe_config_t *cfg, const char *text,
                              size_t len, int rank, const moe_error_t *err)
{
    MOE_ERROR("%s", err->msg);
    if (rank == 0 && eng != NULL) {
        /* an on-demand window's parts cannot be gathered from a rank that does not answer */
        moe_live_abandon(eng->live, "the watchdog ended the run");
        fflush(stderr);
        finish_profile(eng, cfg, text, len, true,
                       "the watchdog ended the run before its last record (see the error)",
                       rank);
    }
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, EXIT_WATCHDOG);
}

/* After a stop the ranks other than 0 stay until rank 0 has said why and written the report:
 * a rank that exits first makes mpirun end the job at once, rank 0 included (with the
 * profiler off nothing else held them). Point to point on its own tag, polled, bounded. */
enum { TAG_STOP_DONE = 7201 };
static void stop_handshake(const moe_engine_t *eng, double step_timeout_s, int rank)
{
    /* static: a request cancelled and freed (or a send left to the end) may still touch it */
    static int one = 1, got;
    moe_poll_t poll;
    if (rank != 0) {
        MPI_Request req;
        if (MOE_MPI(MPI_Irecv(&got, 1, MPI_INT, 0, TAG_STOP_DONE, eng->comm, &req), NULL) ==
            MOE_OK) {
            /* rank 0's report may take a while under load; rank 0 gone: mpirun ends this
             * rank too (and its SIGKILL bounds this wait anyway) */
            moe_poll_begin(&poll, step_timeout_s > 5.0 ? step_timeout_s : 5.0, false);
            if (moe_poll_request(&req, &poll, NULL) != MOE_OK) {
                MOE_MPI(MPI_Cancel(&req), NULL);
                MOE_MPI(MPI_Request_free(&req), NULL);
            }
        }
        return;
    }
    moe_poll_begin(&poll, 0.5, false);
    for (int r = 1; r < eng->world_size; r++) {
        MPI_Request req;
        if (MOE_MPI(MPI_Isend(&one, 1, MPI_INT, r, TAG_STOP_DONE, eng->comm, &req), NULL) ==
                MOE_OK &&
            moe_poll_request(&req, &poll, NULL) != MOE_OK) {
            MOE_MPI(MPI_Request_free(&req), NULL); /* that rank is gone: left to the end */
        }
    }
}

/* The run stopped (a signal here or on another rank, mpirun ending the job). A deliberate
 * stop is a normal end: rank 0 says after how many steps, the tokens/s of the completed
 * steps, and writes their report (its path follows in the headline); exit 130
 * (docs/faults.md "Exit codes"). mpirun ending the job for a rank it lost is a failure: rank 0 names the
 * ranks that do not answer, as an error. Point to point only from here (ranks left
 * different collectives in flight), and no MPI_Finalize. */
static int run_stopped(moe_engine_t *eng, const moe_config_t *cfg, const char *text, size_t len,
                       int rank, bool *skip_finalize)
{
    *skip_finalize = true;
    if (rank == 0) {
        char cause[128], lost[256];
        stop_cause(cause, sizeof(cause));
        stop_lost_ranks(eng, lost, sizeof(lost));
        if (lost[0] == '\0' && moe_stop_signal() == SIGCONT && moe_stop_origin() < 0) {
            snprintf(cause, sizeof(cause), "mpirun ending the job (Ctrl-C or a signal to mpirun)");
        }
        char of[48] = ""; /* workload.steps: 0 is a run without end */
        if (cfg->steps > 0) {
            snprintf(of, sizeof(of), " of %lld", (long long)cfg->steps);
        }
        double secs = (double)eng->steps_ns * 1e-9;
        char tps[96] = "";
        if (eng->steps_done > 0 && secs > 0) {
            snprintf(tps, sizeof(tps), ", %.0f tokens/s over them",
                     (double)eng->steps_done * (double)cfg->tokens_per_step / secs);
        }
        const char *report = eng->prof != NULL ? "; the report of the completed steps follows"
                                               : " (profiler off: no report)";
        if (lost[0] != '\0') {
            MOE_ERROR("stopped by %s after %lld%s steps%s%s%s", cause,
                      (long long)eng->steps_done, of, tps, lost, report);
        } else {
            printf("moed: stopped by %s after %lld%s steps%s%s\n", cause,
                   (long long)eng->steps_done, of, tps, report);
        }
        fflush(stdout);
        fflush(stderr);
    }
    moe_live_stopped(eng->live); /* an open window first: SIGKILL may follow */
    finish_profile(eng, cfg, text, len, true, NULL, rank);
    moe_live_finish(eng->live, true);
    fflush(stdout);
    stop_handshake(eng, cfg->step_timeout_s, rank);
    /* the teardown waits inside libraries, on ranks that may be gone: bounded, silently
     * (the line above said why the job ends) */
    moe_watchdog_end_arm(cfg->step_timeout_s, EXIT_SIGNAL, "");
    moe_engine_destroy(eng);
    return EXIT_SIGNAL;
}

/* runtime.step_timeout_s for exit_guard, once the config is read (60 s before). */
static double g_exit_timeout_s = MOE_WATCHDOG_STARTUP_S;

/* After MPI_Finalize: once the others' last fence is done, a rank of this node stopped or
 * hung in Open MPI's last steps (or in its exit) would hold mpirun forever, no MPI call can
 * tell, and the ranks that left cannot say. So each rank marks the node's exit board and
 * waits for the node's other ranks' marks, at most runtime.step_timeout_s; past it the
 * lowest rank that marked says which did not and ends (exit 7: mpirun then ends the job,
 * the stopped rank included); the others end 5 s later if it has not (it stopped too). */
static void exit_guard(double timeout_s, int rank)
{
    moe_engine_test_pause_rank(rank, "exit");
    moe_wake_exit_mark();
    int late[8];
    bool report = false;
    int n = moe_wake_exit_wait(timeout_s, late, 8, &report);
    if (n == 0) {
        return;
    }
    if (report) {
        char who[8 * 96] = "";
        for (int i = 0; i < n && i < 8; i++) {
            size_t used = strlen(who);
            snprintf(who + used, sizeof(who) - used, "%srank %d (%s)", i ? ", " : "", late[i],
                     moe_wake_exit_host(late[i]));
        }
        MOE_ERROR("watchdog: rank %d (%s) waited %g s after MPI_Finalize for %s%s to end: "
                  "stopped, hung or lost after Open MPI's last fence (runtime.step_timeout_s "
                  "= %g); the report is complete; ending the job", rank,
                  moe_wake_exit_host(rank), timeout_s, who, n > 8 ? " and more" : "",
                  timeout_s);
        fflush(stderr);
        _exit(EXIT_WATCHDOG);
    }
    if (moe_wake_exit_wait(5.0, late, 8, &report) > 0) {
        _exit(EXIT_WATCHDOG); /* the node's reporter has not ended the job: stopped too */
    }
}

/* Every rank is at MPI_Finalize's door (the last barrier): Open MPI's MPI_Finalize then waits
 * for every rank in a fence no poll bounds. A rank stopped or hung inside it would hold the
 * job forever: past step_timeout_s rank 0 says so and ends the job (exit 7); another rank
 * does so 5 s later, if rank 0 has not (rank 0 itself stopped there). */
static void finalize_guard(const moe_config_t *cfg, int rank)
{
    char msg[MOE_ERROR_MSG_MAX];
    double t = cfg->step_timeout_s;
    g_exit_timeout_s = t;
    snprintf(msg, sizeof(msg), "watchdog: rank %d waited %g s in MPI_Finalize: every rank "
             "reached it and one of them did not finish it (stopped, hung or lost inside "
             "Open MPI's last fence) (runtime.step_timeout_s = %g); the report is complete; "
             "ending the job", rank, t, t);
    moe_watchdog_end_arm(t > 0 && rank != 0 ? t + 5.0 : t, EXIT_WATCHDOG, msg);
    moe_engine_test_pause_rank(rank, "finalize");
}

/* After every step ran and the summary is out: the report, --bench, --dump-output, and a
 * last barrier, polled, so MPI_Finalize never waits for a rank stopped by now. */
static int run_finish(const options_t *opt, moe_engine_t *eng, const moe_config_t *cfg,
                      const char *text, size_t len, int rank, bool *skip_finalize)
{
    moe_error_t err;
    moe_error_clear(&err);
    moe_engine_test_pause(eng, "report");
    int code = finish_profile(eng, cfg, text, len, false, NULL, rank);
    moe_live_finish(eng->live, false);
    /* --bench waits on its peers as a step does: a rank stopped or hung there is the
     * watchdog's (named, exit 7); a stop request goes on to the last barrier's stop path */
    moe_status_t bst = opt->bench ? moe_selfbench_run(eng, &err) : MOE_OK;
    if (bst == MOE_ERR_TIMEOUT) {
        abort_on_watchdog(NULL, cfg, text, len, rank, &err);
    } else if (bst != MOE_OK && bst != MOE_ERR_INTERRUPTED) {
        MOE_ERROR("%s", err.msg);
        MPI_Abort(MPI_COMM_WORLD, EXIT_RUNTIME);
    }
    if (bst == MOE_OK && opt->dump_output != NULL &&
        dump_output(eng, opt->dump_output, &err) != MOE_OK) {
        if (rank == 0) {
            MOE_ERROR("%s", err.msg);
        }
        code = EXIT_OUTPUT;
    }
    moe_wait_set_where(eng->steps_done, 0, "the end (the report is written)");
    moe_status_t st = moe_wait_barrier(eng->comm, &err);
    if (st == MOE_ERR_TIMEOUT) {
        abort_on_watchdog(NULL, cfg, text, len, rank, &err);
    } else if (st == MOE_ERR_INTERRUPTED) {
        *skip_finalize = true; /* a stop after the report: nothing is lost */
        /* the teardown waits inside libraries, on ranks that may be gone: bounded as in
         * run_stopped, silently, with this path's own exit code */
        moe_watchdog_end_arm(cfg->step_timeout_s, code, "");
        moe_engine_destroy(eng);
        return code;
    }
    /* The teardown (transports, plug-in) waits inside libraries: bounded by a thread; then
     * a second polled barrier, so a rank stopped in its teardown is named and MPI_Finalize
     * starts only once every rank is at its door. */
    int64_t steps_done = eng->steps_done;
    int world = eng->world_size;
    MPI_Comm comm = eng->comm;
    char msg[MOE_ERROR_MSG_MAX];
    snprintf(msg, sizeof(msg), "watchdog: rank %d (%s) made no progress for %g s in the job's "
             "end: its transports' and plug-in's teardown did not finish (runtime.step_timeout_s"
             " = %g); the report is complete; aborting the job", rank, eng->hosts[rank],
             cfg->step_timeout_s, cfg->step_timeout_s);
    /* the barrier's message names hosts: a copy outlives the engine (NULL: ranks only) */
    char(*hosts)[64] = malloc((size_t)world * sizeof(*hosts));
    if (hosts != NULL) {
        memcpy(hosts, eng->hosts, (size_t)world * sizeof(*hosts));
    }
    moe_wait_configure(cfg->step_timeout_s, rank, world, (const char(*)[64])hosts);
    moe_engine_test_pause(eng, "teardown");
    moe_watchdog_end_arm(cfg->step_timeout_s, EXIT_WATCHDOG, msg);
    moe_engine_destroy(eng);
    moe_watchdog_end_disarm();
    moe_wait_set_where(steps_done, 0, "the end (teardown done, before MPI_Finalize)");
    st = moe_wait_barrier(comm, &err);
    moe_wait_configure(cfg->step_timeout_s, rank, world, NULL); /* err holds the names */
    free(hosts);
    if (st == MOE_ERR_TIMEOUT) {
        abort_on_watchdog(NULL, cfg, text, len, rank, &err);
    } else if (st == MOE_ERR_INTERRUPTED) {
        *skip_finalize = true;
    }
    if (st == MOE_OK) {
        finalize_guard(cfg, rank);
    }
    return code;
}

static int run_job(const options_t *opt, const moe_config_t *cfg, const char *text, size_t len,
                   int rank, bool *skip_finalize)
{
    moe_error_t err;
    moe_error_clear(&err);
    moe_engine_t *eng = NULL;
    moe_status_t st = moe_engine_create(cfg, text, len, MPI_COMM_WORLD, &eng, &err);
    if (st == MOE_ERR_TIMEOUT) {
        abort_on_watchdog(NULL, cfg, text, len, rank, &err);
    }
    if (st == MOE_ERR_INTERRUPTED) {
        stopped_at_startup(rank, skip_finalize);
        return EXIT_SIGNAL;
    }
    if (st != MOE_OK) {
        if (rank == 0) {
            MOE_ERROR("%s", err.msg);
        }
        return exit_code_for(st);
    }
    bool progress = opt->progress == 1 || (opt->progress == -1 && stdout_is_terminal());
    moe_engine_set_profiler_ab(eng, opt->profiler_ab);
    st = moe_engine_run(eng, cfg->steps, progress, &err); /* --steps already applied */
    if (st == MOE_OK) {
        /* the summary's reduction waits on every rank: a stop there is a stop like any */
        moe_wait_set_where(eng->steps_done, 0, "summary");
        st = print_summary(eng, &err);
    }
    if (st == MOE_ERR_TIMEOUT) {
        abort_on_watchdog(eng, cfg, text, len, rank, &err);
    }
    if (st == MOE_ERR_INTERRUPTED) {
        return run_stopped(eng, cfg, text, len, rank, skip_finalize);
    }
    if (st != MOE_OK) {
        /* A failure, printed by the rank that saw it; the job cannot go on. */
        MOE_ERROR("%s", err.msg);
        MPI_Abort(MPI_COMM_WORLD, exit_code_for(st));
    }
    return run_finish(opt, eng, cfg, text, len, rank, skip_finalize);
}

/* Rank 0 checks what the run needs that no MPI or GPU work is needed to see (preflight.c),
 * before any such work starts; every rank leaves with its verdict (a bounded, polled
 * broadcast like every start-up wait). */
static int preflight(const options_t *opt, const moe_config_t *cfg, int rank,
                     bool *skip_finalize)
{
    int code = EXIT_OK;
    if (rank == 0) {
        moe_error_t err;
        moe_error_clear(&err);
        moe_preflight_opts_t po = {.dump_output = opt->dump_output, .caps = moe_build_caps()};
        switch (moe_preflight_run(cfg, &po, &err)) {
        case MOE_PREFLIGHT_OK:
            break;
        case MOE_PREFLIGHT_CONFIG:
            code = EXIT_CONFIG;
            break;
        case MOE_PREFLIGHT_INPUT:
            code = EXIT_INPUT;
            break;
        case MOE_PREFLIGHT_OUTPUT:
            code = EXIT_OUTPUT;
            break;
        }
        if (code != EXIT_OK) {
            MOE_ERROR("%s", err.msg);
        }
    }
    moe_error_t err;
    moe_error_clear(&err);
    moe_status_t st = moe_wait_bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD,
                                     "the start-up checks' verdict", &err);
    if (st == MOE_ERR_INTERRUPTED) {
        stopped_at_startup(rank, skip_finalize);
        return EXIT_SIGNAL;
    }
    if (st != MOE_OK) { /* a rank that does not answer (MOE_ERR_TIMEOUT) or MPI failing */
        MOE_ERROR("%s", err.msg);
        MPI_Abort(MPI_COMM_WORLD, st == MOE_ERR_TIMEOUT ? EXIT_WATCHDOG : EXIT_RUNTIME);
    }
    return code;
}

/* workload.tokens_per_step left out with an input file is the file's row count. Only the
 * ranks that route need the input (in master routing rank 0 alone), so another node may not
 * see it: every rank takes rank 0's count. A rank that read none, or another, parses again
 * with rank 0's (the same text, so the same result but for that count). Called by every rank
 * after the pre-flight's verdict, so none is left waiting. */
static int64_t g_rank0_rows;
static moe_status_t rank0_rows(const char *path, int64_t *rows, moe_error_t *err)
{
    (void)path, (void)err;
    *rows = g_rank0_rows;
    return MOE_OK;
}

/* --check-config with model.checkpoint: what config.json set, key by key, and where each
 * value came from (a key config.json leaves out takes the family's transformers default:
 * docs/models.md). The parse read the same file a moment ago. */
static void print_checkpoint_facts(const moe_config_t *cfg)
{
    if (strcmp(cfg->checkpoint, "none") == 0) {
        return;
    }
    moe_cfg_checkpoint_info_t *info = calloc(1, sizeof(*info));
    moe_error_t err = {0};
    if (info == NULL || moe_ckpt_read_info(cfg->checkpoint, info, &err) != MOE_OK) {
        free(info);
        return;
    }
    printf("from %s:\n", info->config_path);
    for (int i = 0; i < info->num_facts; i++) {
        const moe_cfg_fact_t *f = &info->facts[i];
        printf("  %-28s %-12s (%s)\n", f->path, f->value, f->source);
    }
    printf("  MoE layers: %s\n", info->moe_rule);
    free(info);
}

/* "rank N (host): " before err's message, for a failure rank 0 reports for another rank. */
static void name_failing_rank(moe_error_t *err, int rank)
{
    char host[64] = "?", head[96];
    (void)gethostname(host, sizeof(host));
    host[sizeof(host) - 1] = '\0';
    int n = snprintf(head, sizeof(head), "rank %d (%s): ", rank, host);
    size_t h = n > 0 && (size_t)n < sizeof(head) ? (size_t)n : 0, len = strlen(err->msg);
    if (len + h >= sizeof(err->msg)) {
        len = sizeof(err->msg) - 1 - h; /* the end of a message past its room is lost */
    }
    memmove(err->msg + h, err->msg, len);
    memcpy(err->msg, head, h);
    err->msg[h + len] = '\0';
}

/* The resolved config, key by key, as one hash each (moe_cfg_each_value's text); with
 * `ref` (rank 0's), the first key whose hash differs, and its text here. */
#define AGREE_KEYS_MAX 160
typedef struct cfg_hashes {
    int n;
    uint64_t h[AGREE_KEYS_MAX];
    const uint64_t *ref;
    char path[64], value[96]; /* the first key that differs from ref */
} cfg_hashes_t;

static void hash_value(void *ctx, const char *path, const char *value, bool quoted)
{
    cfg_hashes_t *c = ctx;
    (void)quoted;
    if (c->n >= AGREE_KEYS_MAX) {
        return;
    }
    uint64_t h = moe_hash64(path, strlen(path) + 1) ^ moe_hash64(value, strlen(value));
    if (c->ref != NULL && c->path[0] == '\0' && c->ref[c->n] != h) {
        snprintf(c->path, sizeof(c->path), "%s", path);
        snprintf(c->value, sizeof(c->value), "%s", value);
    }
    c->h[c->n++] = h;
}

/* Every rank resolved the same config: the YAML is rank 0's on every rank (the handshake
 * compares its hash), but each rank reads a checkpoint's config.json (and an input's
 * header) itself, and nodes holding different versions of a model would run with
 * different sizes and fail mid-run with an MPI error. Rank 0's hashes go to all; a rank
 * that differs names the first key; all end with its message (exit 4). */
static int agree_resolved_config(const moe_config_t *cfg, int rank, bool *skip_finalize)
{
    cfg_hashes_t mine = {0}, zero = {0}; /* on the stack: every rank reaches the bcast */
    moe_error_t err;
    moe_error_clear(&err);
    moe_cfg_each_value(cfg, hash_value, &zero);
    moe_status_t st = moe_wait_bcast(zero.h, AGREE_KEYS_MAX * 8, MPI_BYTE, 0, MPI_COMM_WORLD,
                                     "the resolved config's hashes", &err);
    if (st == MOE_OK) {
        mine.ref = zero.h;
        moe_cfg_each_value(cfg, hash_value, &mine);
    }
    if (st == MOE_OK && mine.path[0] != '\0') {
        st = moe_error_set(&err, MOE_ERR_WEIGHTS, "rank %d resolved %s: %s, rank 0 another "
                           "value: each rank reads %s itself; give every node the same files",
                           rank, mine.path, mine.value,
                           strcmp(cfg->checkpoint, "none") != 0 ? "model.checkpoint's "
                           "config.json" : "the config's files");
    }
    st = moe_agree(MPI_COMM_WORLD, st, &err);
    if (st == MOE_ERR_TIMEOUT) {
        MOE_ERROR("%s", err.msg);
        MPI_Abort(MPI_COMM_WORLD, EXIT_WATCHDOG);
    }
    if (st == MOE_ERR_INTERRUPTED) { /* a stop during the waits: as at any start-up step */
        stopped_at_startup(rank, skip_finalize);
        return EXIT_SIGNAL;
    }
    if (st != MOE_OK && rank == 0) {
        MOE_ERROR("%s", err.msg);
    }
    return exit_code_for(st);
}

static int agree_input_tokens(const char *text, size_t len, const char *path, int world,
                              moe_config_t *cfg, int rank)
{
    if (strcmp(cfg->input, "random") == 0) {
        return EXIT_OK;
    }
    moe_error_t err;
    moe_error_clear(&err);
    int64_t t = cfg->tokens_per_step;
    moe_status_t st = moe_wait_bcast(&t, 1, MPI_INT64_T, 0, MPI_COMM_WORLD,
                                     "workload.tokens_per_step (the input's rows)", &err);
    if (st == MOE_OK && t != cfg->tokens_per_step) {
        g_rank0_rows = t;
        moe_cfg_set_input_reader(rank0_rows);
        st = moe_cfg_parse(text, len, path, world, cfg, &err); /* --steps applied again */
    }
    if (st != MOE_OK) { /* the others go on: end the job as one */
        MOE_ERROR("%s", err.msg);
        MPI_Abort(MPI_COMM_WORLD, st == MOE_ERR_TIMEOUT ? EXIT_WATCHDOG : EXIT_CONFIG);
    }
    return EXIT_OK;
}

static int run_main(int argc, char **argv, int rank, int world, bool *skip_finalize)
{
    options_t opt;
    char why[512];
    if (parse_args(argc, argv, &opt, why, sizeof(why)) != 0) {
        if (rank == 0) {
            fprintf(stderr, "moed: error: %s\n", why);
        }
        return EXIT_USAGE;
    }
    if (opt.help || opt.version || opt.help_config) {
        if (rank == 0 && opt.help) {
            print_usage(stdout);
        } else if (rank == 0 && opt.version) {
            printf("moed %s (build %s, BLAS %s, C11)\n", moe_version(), moe_build_id(),
                   moe_gemm_backend_name());
            moe_build_caps_t caps = moe_build_caps();
            moe_build_caps_print(&caps, stdout);
        } else if (rank == 0) {
            moe_cfg_print_reference(stdout);
        }
        return EXIT_OK;
    }
    moe_error_t err;
    moe_error_clear(&err);
    char *text = NULL;
    size_t len = 0;
    /* Only rank 0 reads the file: a node need not see it. */
    moe_status_t st = moe_startup_config_text(MPI_COMM_WORLD, opt.config, &text, &len, &err);
    if (st == MOE_OK) {
        st = moe_startup_handshake(MPI_COMM_WORLD, moe_hash64(text, len), &err);
    }
    moe_config_t *cfg = calloc(1, sizeof(*cfg));
    if (st == MOE_OK && cfg == NULL) {
        MOE_ERROR("cannot allocate the config");
        MPI_Abort(MPI_COMM_WORLD, EXIT_RUNTIME);
    }
    int check_world = opt.check_config && opt.ranks > 0 ? opt.ranks : world;
    moe_cfg_set_checkpoint_reader(moe_ckpt_read_info); /* model.checkpoint's config.json */
    moe_cfg_set_input_reader(moe_input_rows); /* workload.tokens_per_step: the input's rows */
    moe_cfg_set_steps_override(opt.steps); /* before the checks: they see the run's steps */
    if (st == MOE_OK) {
        st = moe_cfg_parse(text, len, opt.config, check_world, cfg, &err);
        /* every rank reads a checkpoint's config.json itself: a rank that cannot (a node
         * without the model) fails here while the others go on; all end with its reason,
         * which says whose it is */
        if (st != MOE_OK && rank != 0) {
            name_failing_rank(&err, rank);
        }
        st = moe_agree(MPI_COMM_WORLD, st, &err);
    }
    if (st == MOE_OK && opt.profiler_ab > 0 && !cfg->prof_enabled &&
        strcmp(cfg->prof_listen, "off") == 0) {
        if (rank == 0) {
            fprintf(stderr, "moed: error: --profiler-ab switches the profiler's hooks on and "
                            "off, but this config has none (set profiler.enabled: true or "
                            "profiler.listen)\n");
        }
        free(text);
        free(cfg);
        return EXIT_USAGE;
    }
    int code = EXIT_OK;
    if (st == MOE_ERR_TIMEOUT) {
        /* the config broadcast, the handshake or the parse's agreement: a rank does not
         * answer (message once) */
        MOE_ERROR("%s", err.msg);
        MPI_Abort(MPI_COMM_WORLD, EXIT_WATCHDOG);
    }
    if (st == MOE_ERR_INTERRUPTED) {
        stopped_at_startup(rank, skip_finalize);
        code = EXIT_SIGNAL;
    } else if (st != MOE_OK) {
        if (rank == 0) {
            MOE_ERROR("%s", err.msg);
        }
        code = st == MOE_ERR_IO ? EXIT_CONFIG : exit_code_for(st);
    } else {
        /* --check-config under mpirun too: what each rank read must agree, or the run
         * would fail where the check passed */
        code = preflight(&opt, cfg, rank, skip_finalize);
        if (code == EXIT_OK) {
            code = agree_input_tokens(text, len, opt.config, check_world, cfg, rank);
        }
        if (code == EXIT_OK) {
            code = agree_resolved_config(cfg, rank, skip_finalize);
        }
    }
    if (code == EXIT_OK && opt.check_config) {
        if (rank == 0) {
            printf("%s: valid for %d rank%s\n", opt.config, check_world, check_world == 1 ? "" : "s");
            print_checkpoint_facts(cfg);
            moe_cfg_print_placement(cfg, stdout);
        }
    } else if (code == EXIT_OK) {
        code = run_job(&opt, cfg, text, len, rank, skip_finalize);
    }
    free(text);
    free(cfg);
    return code;
}

int main(int argc, char **argv)
{
    /* A fixed threshold keeps every allocation past 128 KiB (the loader's tensor buffers) in
     * its own mapping, returned at free. glibc's default raises the threshold to the size of
     * the largest mapped block freed so far, so one early 1 MiB scratch (a config printer's)
     * moved the loader's buffers onto the heap, whose freed pages stay: an expert rank
     * widening MXFP4 to BF16 peaked 58 MiB higher (models.dtype_memory_mxfp4). */
    (void)mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    if (argc > 1 && strcmp(argv[1], "top") == 0) {
        /* A terminal view of a live endpoint; needs no MPI. */
        return moe_live_top_main(argc - 2, argv + 2, stdout);
    }
    if (argc > 1 && strcmp(argv[1], "plan") == 0) {
        /* Reads a report folder, writes a config; needs no MPI. Exit codes: 0, 1, 2. The
         * report's config may name a model.checkpoint: its config.json is read again. */
        moe_cfg_set_checkpoint_reader(moe_ckpt_read_info);
        moe_cfg_set_input_reader(moe_input_rows);
        return moe_prof_plan_main(argc - 2, argv + 2, stdout);
    }
    if (argc > 1 && strcmp(argv[1], "compare") == 0) {
        /* Reads two report folders; needs no MPI. Exit codes: 0, 2 (= EXIT_USAGE), 5. */
        return moe_prof_compare_main(argc - 2, argv + 2, stdout);
    }
    int provided = 0, rank = 0, world = 1;
    /* MPI_Init takes most of a small job's first second, and a Ctrl-C then left it waiting
     * until mpirun's SIGKILL: no output at all. Now the rank leaves at once and says so. */
    moe_stop_mpi_init_begin();
    if (MOE_MPI(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided), NULL) != MOE_OK) {
        return EXIT_RUNTIME;
    }
    moe_stop_mpi_init_end();
    /* Errors come back as codes (and become moe_status_t) instead of aborting in MPI. */
    if (MOE_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), NULL) != MOE_OK ||
        MOE_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank), NULL) != MOE_OK ||
        MOE_MPI(MPI_Comm_size(MPI_COMM_WORLD, &world), NULL) != MOE_OK) {
        MPI_Abort(MPI_COMM_WORLD, EXIT_RUNTIME); /* a rank without its place cannot go on */
    }
    moe_log_init(rank, world);
    moe_wait_configure(MOE_WATCHDOG_STARTUP_S, rank, world, NULL);
    moe_error_t werr;
    moe_error_clear(&werr);
    moe_status_t wst = moe_watchdog_init(MPI_COMM_WORLD, MOE_WATCHDOG_STARTUP_S, &werr);
    if (wst == MOE_ERR_INTERRUPTED) {
        if (rank == 0) {
            MOE_ERROR("stopped by %s during start-up, before any step",
                      moe_stop_signal_name(moe_stop_signal()));
        }
        fflush(stderr);
        _exit(EXIT_SIGNAL); /* MPI_Finalize could wait for a rank that is gone */
    }
    if (wst != MOE_OK) {
        MOE_ERROR("%s", werr.msg);
        MPI_Abort(MPI_COMM_WORLD, exit_code_for(wst));
    }
    bool skip_finalize = false;
    int code = run_main(argc, argv, rank, world, &skip_finalize);
    fflush(stdout);
    fflush(stderr);
    if (skip_finalize) {
        /* After a stop, MPI_Finalize could wait forever for a rank that is gone. */
        moe_wake_exit_mark();
        _exit(code);
    }
    MPI_Finalize(); /* bounded by the end guard run_finish armed (finalize_guard) */
    moe_watchdog_end_disarm();
    moe_poll_set_hook(NULL); /* the watchdog's channel is MPI: no poll may serve it now */
    exit_guard(g_exit_timeout_s, rank);
    return code;
}
