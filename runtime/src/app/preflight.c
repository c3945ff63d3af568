/* Checks before the run (preflight.h): the build against the config, the files the run will
 * read, the folders it will write, and warnings about a run that would measure little.
 *
 * Each check is a function that returns MOE_PREFLIGHT_OK or the kind of its failure with
 * err filled; moe_preflight_run stops at the first failure, as the config loader does. */
#include "app/preflight.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/engine.h"
#include "app/replay.h"
#include "expert/backend.h"
#include "expert/onednn.h"
#include "expert/plugin.h"
#include "moe/limits.h"
#include "moe/log.h"
#include "moe_prof/prof.h"
#include "moe_model/safetensors.h"
#include "moe/file.h"
#include "model/weights.h"

moe_build_caps_t moe_build_caps(void)
{
    moe_build_caps_t c = {false, false, false};
#ifdef MOE_HAVE_UCX
    c.ucx = true;
#endif
#ifdef MOED_HAVE_PLUGIN
    /* CUDA and NCCL live in the plug-in (expert/plugin.h), which is not loaded here: the
     * build has it, and CMake says whether it was built with NCCL. */
    c.cuda = true;
#endif
#ifdef MOED_PLUGIN_NCCL
    c.nccl = true;
#endif
    return c;
}

void moe_build_caps_print(const moe_build_caps_t *caps, FILE *out)
{
    fprintf(out, "transports: mpi%s%s; devices: cpu%s%s\n", caps->ucx ? " ucx" : "",
            caps->nccl ? " nccl" : "", caps->cuda ? " cuda" : "",
            caps->cuda || caps->nccl ? " (cuda and nccl: the plug-in " MOE_PLUGIN_FILE ")" : "");
}

/* ------------------------------------------------------------------------------------ */
/* The build against the config                                                          */
/* ------------------------------------------------------------------------------------ */

/* A request this build cannot serve is a config error (exit 3): the config asks for the
 * impossible here, no file is wrong. */
static moe_preflight_fail_t check_build(const moe_config_t *cfg, const moe_build_caps_t *caps,
                                        moe_error_t *err)
{
    if (cfg->device == MOE_DEVICE_CUDA && !caps->cuda) {
        moe_error_set(err, MOE_ERR_CONFIG,
                      "runtime.device: cuda is not available in this build (built without the CUDA "
                      "plug-in: MOED_WITH_CUDA); use cpu, or rebuild with CUDA");
        return MOE_PREFLIGHT_CONFIG;
    }
    if (cfg->transport == MOE_TRANSPORT_NCCL && cfg->device != MOE_DEVICE_CUDA) {
        moe_error_set(err, MOE_ERR_CONFIG,
                      "runtime.transport: nccl moves GPU memory; it needs runtime.device: cuda "
                      "(use mpi or ucx on the CPU)");
        return MOE_PREFLIGHT_CONFIG;
    }
    if (cfg->device != MOE_DEVICE_CUDA && cfg->compute_dtype == MOE_NUM_BF16 &&
        !moe_cpu_bf16_native()) {
        /* no emulation: oneDNN's BF16 without avx512_bf16 or AMX is slower than F32 */
        moe_error_set(err, MOE_ERR_CONFIG,
                      "runtime.compute_dtype: bf16, but %s; use auto (f32 here) or f32",
                      moe_cpu_bf16_why());
        return MOE_PREFLIGHT_CONFIG;
    }
    if ((cfg->transport == MOE_TRANSPORT_UCX && !caps->ucx) ||
        (cfg->transport == MOE_TRANSPORT_NCCL && !caps->nccl)) {
        bool ucx = cfg->transport == MOE_TRANSPORT_UCX;
        moe_error_set(err, MOE_ERR_CONFIG,
                      "runtime.transport: %s is not available in this build (%s); this build "
                      "has mpi%s%s",
                      ucx ? "ucx" : "nccl",
                      ucx ? "built without UCX: install libucx-dev and rebuild"
                          : "built without the CUDA plug-in: MOED_WITH_CUDA",
                      caps->ucx ? ", ucx" : "", caps->nccl ? ", nccl" : "");
        return MOE_PREFLIGHT_CONFIG;
    }
    return MOE_PREFLIGHT_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Paths                                                                                 */
/* ------------------------------------------------------------------------------------ */

/* The system's text for errno e (XSI strerror_r: thread-safe). */
static void errno_text(int e, char *buf, size_t n)
{
    if (strerror_r(e, buf, n) != 0) {
        snprintf(buf, n, "error %d", e);
    }
}

/* A file the run reads: it must open for reading and be a regular file. Its errors cite
 * the value's place in the config file (m), as the config's own errors do. */
static moe_preflight_fail_t check_input_file(const moe_config_t *cfg, moe_cfg_mark_t m,
                                             const char *key, const char *path,
                                             moe_error_t *err)
{
    char tried[MOE_PATH_MAX + 64], why[128];
    if (strcmp(path, "random") == 0) {
        return MOE_PREFLIGHT_OK;
    }
    char where[MOE_PATH_MAX + 32]; /* "cfg.yaml:12:12: " */
    moe_cfg_mark_where(cfg, m, where, sizeof(where));
    moe_path_tried(path, tried, sizeof(tried));
    const char *kind = NULL; /* a FIFO is refused, never waited on */
    int fd = moe_file_open_regular(path, &kind);
    if (fd < 0 && kind != NULL) {
        moe_error_set(err, MOE_ERR_IO, "%s%s: '%s'%s is %s, not a .safetensors file", where,
                      key, path, tried, kind);
        return MOE_PREFLIGHT_INPUT;
    }
    if (fd < 0) {
        errno_text(errno, why, sizeof(why));
        moe_error_set(err, MOE_ERR_IO, "%s%s: cannot read '%s'%s: %s", where, key, path, tried,
                      why);
        return MOE_PREFLIGHT_INPUT;
    }
    close(fd);
    return MOE_PREFLIGHT_OK;
}

/* workload.routing: the trace's header against the model (its rows are checked when rank 0
 * reads them at start, app/replay.c). */
static moe_preflight_fail_t check_routing_trace(const moe_config_t *cfg, moe_error_t *err)
{
    if (strcmp(cfg->routing_trace, "none") == 0) {
        return MOE_PREFLIGHT_OK;
    }
    moe_routing_trace_t tr;
    int li[MOE_MAX_LAYER_IDS];
    moe_status_t st = moe_routing_trace_open(cfg->routing_trace, false, &tr, err);
    if (st != MOE_OK) {
        moe_replay_open_failed(cfg, st, err);
        return MOE_PREFLIGHT_INPUT;
    }
    st = moe_replay_check(cfg, &tr, li, err);
    moe_routing_trace_free(&tr);
    return st == MOE_OK ? MOE_PREFLIGHT_OK : MOE_PREFLIGHT_INPUT;
}

/* Cut the last component off `dir` in place ("a/b" -> "a", "b" -> ".", "/a" -> "/"). */
static void path_parent(char *dir)
{
    char *slash = strrchr(dir, '/');
    if (slash == NULL) {
        snprintf(dir, 2, ".");
    } else if (slash == dir) {
        dir[1] = '\0';
    } else {
        *slash = '\0';
    }
}

/* The nearest existing folder at or above `dir` into `found`, and how many components were
 * cut off to reach it; 0, or an errno (ENOTDIR when what exists there is a file). A
 * symbolic link whose target does not exist stops the walk: ENOENT with `found` the link
 * (mkdir through it would fail, and mkdir on it says EEXIST). */
static int nearest_existing(const char *dir, char *found, size_t n, int *cut, bool *dangling)
{
    snprintf(found, n, "%s", dir[0] != '\0' ? dir : ".");
    for (size_t len = strlen(found); len > 1 && found[len - 1] == '/'; len--) {
        found[len - 1] = '\0'; /* "out/" is "out" */
    }
    struct stat sb;
    *cut = 0;
    *dangling = false;
    while (stat(found, &sb) != 0) {
        int e = errno;
        if (e == ENOENT && lstat(found, &sb) == 0 && S_ISLNK(sb.st_mode)) {
            *dangling = true;
            return ENOENT;
        }
        /* ENOTDIR: a file stands where a folder should; go up to it */
        if ((e != ENOENT && e != ENOTDIR) || strcmp(found, ".") == 0 ||
            strcmp(found, "/") == 0) {
            return e;
        }
        path_parent(found);
        (*cut)++;
    }
    return S_ISDIR(sb.st_mode) ? 0 : ENOTDIR;
}

/* Whether a file can be made in the folder `dir`: make one, remove it. 0 or an errno. */
static int probe_write(const char *dir)
{
    char tmpl[MOE_PATH_MAX + 32];
    int n = moe_path_join(tmpl, sizeof(tmpl), dir, ".moed-write-test-XXXXXX");
    if (n < 0 || (size_t)n >= sizeof(tmpl)) {
        return ENAMETOOLONG;
    }
    int fd = mkstemp(tmpl);
    if (fd < 0) {
        return errno;
    }
    /* a block of data, flushed: a full disk still makes an empty file, so a name alone
     * passed a disk with no byte free (the run then ended with an empty folder) */
    static const char block[4096];
    int e = 0;
    errno = 0; /* a short write sets none */
    if (write(fd, block, sizeof(block)) != (ssize_t)sizeof(block)) {
        e = errno != 0 ? errno : ENOSPC;
    } else if (fsync(fd) != 0) {
        e = errno;
    }
    close(fd);
    unlink(tmpl);
    return e;
}

/* A folder the run writes into (made by the run when missing: judged by the nearest folder
 * that exists, so nothing is created here). `what` names the key or option. */
static moe_preflight_fail_t check_output_dir(const char *what, const char *dir, bool must_exist,
                                             moe_error_t *err)
{
    char found[MOE_PATH_MAX], tried[MOE_PATH_MAX + 64], why[128], where[MOE_PATH_MAX + 64];
    int cut = 0;
    bool dangling = false;
    int e = nearest_existing(dir, found, sizeof(found), &cut, &dangling);
    if (dangling) {
        char target[MOE_PATH_MAX];
        ssize_t k = readlink(found, target, sizeof(target) - 1);
        target[k > 0 ? k : 0] = '\0';
        moe_path_tried(dir, tried, sizeof(tried));
        moe_error_set(err, MOE_ERR_IO, "%s: cannot write in '%s'%s: '%s' is a symbolic link to "
                      "'%s', which does not exist; make the folder it points to, or name "
                      "another", what, dir, tried, found, target);
        return MOE_PREFLIGHT_OUTPUT;
    }
    if (e == 0 && must_exist && cut > 0) {
        e = ENOENT;
    }
    if (e == 0) {
        e = probe_write(found);
    }
    if (e == 0) {
        return MOE_PREFLIGHT_OK;
    }
    errno_text(e, why, sizeof(why));
    where[0] = '\0';
    if (e == ENOTDIR) {
        snprintf(where, sizeof(where), "; '%s' is a file", found);
    } else if (cut > 0 && !must_exist) {
        snprintf(where, sizeof(where), "; it would be made in '%s'", found);
    }
    moe_path_tried(dir, tried, sizeof(tried));
    moe_error_set(err, MOE_ERR_IO, "%s: cannot write in '%s'%s%s: %s", what, dir, tried, where,
                  why);
    return MOE_PREFLIGHT_OUTPUT;
}

/* A path that a line of output quotes (the report's headline, the error lines) holds no
 * control character: a newline would split the line, and no folder needs one. */
static moe_preflight_fail_t check_path_text(const char *key, const char *path, moe_error_t *err)
{
    for (size_t i = 0; path[i] != '\0'; i++) {
        unsigned char c = (unsigned char)path[i];
        if (c < 0x20 || c == 0x7f) {
            moe_error_set(err, MOE_ERR_CONFIG, "%s: the path holds a control character (byte "
                          "0x%02x at offset %zu%s); name a folder without one", key, c, i,
                          c == '\n' ? ": a newline" : c == '\t' ? ": a tab" : "");
            return MOE_PREFLIGHT_CONFIG;
        }
    }
    return MOE_PREFLIGHT_OK;
}

/* profiler.output_dir leaves room for a run folder's name and its files' (limits.h). */
static moe_preflight_fail_t check_run_dir_room(const char *dir, moe_error_t *err)
{
    size_t n = strlen(dir);
    if (n + MOE_RUN_DIR_ROOM < MOE_PATH_MAX) {
        return MOE_PREFLIGHT_OK;
    }
    moe_error_set(err, MOE_ERR_CONFIG, "profiler.output_dir: %zu bytes; a run folder and its "
                  "files' names go under it, so it must be shorter than %d bytes: name a "
                  "shorter folder", n, MOE_PATH_MAX - MOE_RUN_DIR_ROOM);
    return MOE_PREFLIGHT_CONFIG;
}

/* --dump-output FILE: the file is written (through a temporary beside it, FILE.tmp.PID)
 * into its folder, which must exist; FILE itself must not be a folder, and its name must
 * leave the temporary's suffix room within the file system's NAME_MAX. */
static moe_preflight_fail_t check_dump_output(const char *path, moe_error_t *err)
{
    char dir[MOE_PATH_MAX], tried[MOE_PATH_MAX + 64];
    struct stat sb;
    const char *base = strrchr(path, '/') != NULL ? strrchr(path, '/') + 1 : path;
    enum { TMP_SUFFIX = 16 }; /* ".tmp." and a pid */
    if (strlen(base) + TMP_SUFFIX > NAME_MAX) {
        moe_error_set(err, MOE_ERR_IO, "--dump-output: the file name is %zu bytes; with its "
                      "temporary's suffix it must fit the file system's %d: name a shorter "
                      "file", strlen(base), NAME_MAX);
        return MOE_PREFLIGHT_OUTPUT;
    }
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        moe_path_tried(path, tried, sizeof(tried));
        moe_error_set(err, MOE_ERR_IO, "--dump-output: '%s'%s is a folder; name a file in it "
                      "(e.g. %s/output.safetensors)", path, tried, path);
        return MOE_PREFLIGHT_OUTPUT;
    }
    snprintf(dir, sizeof(dir), "%s", path);
    path_parent(dir);
    return check_output_dir("--dump-output", dir, true, err);
}

/* profiler.listen: rank 0's endpoint must be able to start (an address of this host, a
 * port free now), checked before anything is made: a config error, as the run's own
 * failure to start it is. */
static moe_preflight_fail_t check_listen(const moe_config_t *cfg, moe_error_t *err)
{
    char why[256];
    const char *listen = cfg->prof_listen, *token = NULL;
    if (strcmp(listen, "off") == 0) {
        return MOE_PREFLIGHT_OK;
    }
    if (moe_live_listen_check(listen, why, sizeof(why)) != 0) {
        moe_error_set(err, MOE_ERR_CONFIG, "profiler.listen: %s: %s", listen, why);
        return MOE_PREFLIGHT_CONFIG;
    }
    /* the endpoint's control token as it will take it (MOED_CONTROL_TOKEN's length) */
    return moe_live_control_token(cfg, &token, err) == MOE_OK ? MOE_PREFLIGHT_OK
                                                              : MOE_PREFLIGHT_CONFIG;
}

/* ------------------------------------------------------------------------------------ */
/* Memory                                                                                */
/* ------------------------------------------------------------------------------------ */

#define GIB (1024.0 * 1024.0 * 1024.0)

/* A cgroup's memory limit in bytes (v2 memory.max, v1 memory.limit_in_bytes), or 0. */
static double cgroup_limit(void)
{
    static const char *const files[] = {"/sys/fs/cgroup/memory.max",
                                        "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        FILE *f = fopen(files[i], "r");
        unsigned long long v = 0;
        int got = f != NULL ? fscanf(f, "%llu", &v) : 0; /* "max": no number, no limit */
        if (f != NULL) {
            fclose(f);
        }
        if (got == 1 && v > 0) {
            return (double)v;
        }
    }
    return 0.0;
}

/* The experts' element as the run will hold them (engine_load_weights): FP8 and MXFP4 as
 * stored, BF16 when this CPU computes in BF16 or runs BF16 values on moed's F32 kernels
 * (moe_expert_held_dtype), else F32. The value type of a checkpoint is
 * read from the rank's first expert; when that fails (the load will say why) the smaller
 * BF16 is assumed, so the check never refuses a model that could fit. */
static moe_dtype_t held_dtype(const moe_config_t *cfg, int rank)
{
    moe_error_t ignored;
    moe_dtype_t value = MOE_DTYPE_BF16;
    moe_num_dtype_t compute = MOE_NUM_F32;
    moe_error_clear(&ignored);
    if (moe_weights_value_dtype(cfg, rank, &value, &ignored) != MOE_OK) {
        return MOE_DTYPE_BF16;
    }
    if (value == MOE_DTYPE_FP8 || value == MOE_DTYPE_MXFP4) {
        return value;
    }
    if (moe_expert_compute_dtype(cfg, value, &compute, &ignored) != MOE_OK) {
        return MOE_DTYPE_F32;
    }
    return cfg->device == MOE_DEVICE_CUDA ? (compute == MOE_NUM_BF16 ? MOE_DTYPE_BF16
                                                                     : MOE_DTYPE_F32)
                                          : moe_expert_held_dtype(cfg, compute, value);
}

/* The rank that will hold the most weight bytes (its expert-layers counted in one pass over
 * the placement; a routing rank adds the gates), in the type it will hold them in. */
typedef struct rank_size {
    int rank;
    int64_t expert_layers;
    double bytes, per_expert;
    moe_dtype_t store, shared_store;
} rank_size_t;

/* A routing rank's shared experts as the run will hold them (moe_expert_shared_types);
 * when their type cannot be read (the load will say why) BF16 is assumed, as above. */
static moe_dtype_t shared_held_dtype(const moe_config_t *cfg)
{
    moe_error_t ignored;
    moe_dtype_t held = MOE_DTYPE_F32;
    moe_num_dtype_t compute = MOE_NUM_F32;
    moe_error_clear(&ignored);
    if (moe_expert_shared_types(cfg, true, &held, &compute, &ignored) != MOE_OK) {
        return MOE_DTYPE_BF16;
    }
    return held;
}

static bool largest_rank(const moe_config_t *cfg, rank_size_t *out)
{
    int W = cfg->world_size > 0 ? cfg->world_size : 1;
    int64_t *layers = calloc((size_t)W, sizeof(*layers));
    if (layers == NULL) {
        return false; /* the load will say it, with the bytes */
    }
    for (int l = 0; l < (int)cfg->num_layers; l++) {
        int n = 0;
        const moe_cfg_replica_t *e = moe_cfg_layer_entries(cfg, l, &n);
        for (int i = 0; e != NULL && i < n; i++) {
            if (e[i].rank >= 0 && e[i].rank < W) {
                layers[e[i].rank]++;
            }
        }
    }
    double routing = 0.0;
    *out = (rank_size_t){.rank = 0, .store = MOE_DTYPE_F32,
                         .shared_store = shared_held_dtype(cfg)};
    for (int pass = 0; pass < 2; pass++) { /* F32, then the largest rank's own type */
        moe_weights_bytes(cfg, out->store, out->shared_store, &out->per_expert, &routing);
        out->bytes = -1.0;
        for (int r = 0; r < W; r++) {
            int64_t first = 0, count = 0;
            moe_cfg_tokens_of_rank(cfg, W, r, &first, &count);
            double b = out->per_expert * (double)layers[r] + (count > 0 ? routing : 0.0);
            if (b > out->bytes) {
                out->rank = r, out->bytes = b;
            }
        }
        out->store = pass == 0 ? held_dtype(cfg, out->rank) : out->store;
    }
    out->expert_layers = layers[out->rank];
    free(layers);
    return true;
}

/* What one process may hold on this node: its memory (or its cgroup's limit, if lower) and
 * the address-space limit (ulimit -v); the one `bytes` passes into *what, or 0. */
static double memory_limit_passed(double bytes, const char **what)
{
    double node = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    double cg = cgroup_limit();
    const char *node_what = "this node's memory";
    if (cg > 0.0 && (node <= 0.0 || cg < node)) {
        node = cg;
        node_what = "the memory limit of this node's cgroup";
    }
    struct rlimit as;
    double as_lim = getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY
                        ? (double)as.rlim_cur : 0.0;
    if (as_lim > 0.0 && bytes > as_lim && (node <= 0.0 || as_lim <= node)) {
        *what = "the address-space limit, ulimit -v";
        return as_lim;
    }
    if (node > 0.0 && bytes > node) {
        *what = node_what;
        return node;
    }
    return 0.0;
}

/* placement.copies: columns with an FP8 checkpoint held as stored (CPU, model.dtype auto):
 * the shares must keep its scale blocks whole, as the load checks (exit 4 there too). */
static moe_preflight_fail_t check_fp8_shares(const moe_config_t *cfg, moe_error_t *err)
{
    int r = 0;
    while (r < cfg->world_size && moe_cfg_experts_of_rank(cfg, r, NULL) == 0) {
        r++;
    }
    if (cfg->column_shares <= 1 || strcmp(cfg->checkpoint, "none") == 0 ||
        cfg->device != MOE_DEVICE_CPU || r == cfg->world_size ||
        held_dtype(cfg, r) != MOE_DTYPE_FP8) {
        return MOE_PREFLIGHT_OK;
    }
    moe_ckpt_t *ck = NULL;
    moe_status_t st = moe_ckpt_open(cfg, &ck, err);
    if (st == MOE_OK) {
        st = moe_weights_check_fp8_shares(cfg, ck, err);
    }
    moe_ckpt_close(ck);
    return st == MOE_OK ? MOE_PREFLIGHT_OK : MOE_PREFLIGHT_INPUT;
}

/* Each rank's weights, as they will be held, against what one process can have on this
 * node. Rank 0 sees its own node only, and ranks sharing a node are not added up: a rank
 * that cannot fit alone is what is refused. The GPU back-end holds its copy on the device:
 * not here. */
static moe_preflight_fail_t check_memory(const moe_config_t *cfg, moe_error_t *err)
{
    rank_size_t big;
    const char *what = NULL;
    if (cfg->device == MOE_DEVICE_CUDA || !largest_rank(cfg, &big)) {
        return MOE_PREFLIGHT_OK;
    }
    double lim = memory_limit_passed(big.bytes, &what);
    if (lim <= 0.0) {
        return MOE_PREFLIGHT_OK;
    }
    const char *sh = moe_weights_held_name(big.shared_store),
               *st = moe_weights_held_name(big.store);
    bool routing = big.bytes > (double)big.expert_layers * big.per_expert;
    char what_held[160], gates[64];
    if (moe_weights_shared_ffn(cfg) > 0) {
        snprintf(gates, sizeof(gates), "the gates and shared experts (%s)", sh);
    } else {
        snprintf(gates, sizeof(gates), "the gates");
    }
    if (big.expert_layers == 0) { /* a routing rank without experts: the master */
        snprintf(what_held, sizeof(what_held), "%s", gates);
    } else {
        snprintf(what_held, sizeof(what_held), "%lld expert-layers of %.3g GiB each in %s%s%s",
                 (long long)big.expert_layers, big.per_expert / GIB, st,
                 routing ? ", and " : "", routing ? gates : "");
    }
    moe_error_set(err, MOE_ERR_CONFIG, "model: rank %d would hold %.1f GiB of weights (%s), "
                  "more than %s (%.1f GiB); %sspread the experts over more ranks (mpirun -np, "
                  "placement.experts), or run fewer layers or a smaller model", big.rank,
                  big.bytes / GIB, what_held, what, lim / GIB,
                  strstr(what, "ulimit") != NULL ? "raise ulimit -v, or " : "");
    return MOE_PREFLIGHT_CONFIG;
}

/* ------------------------------------------------------------------------------------ */
/* Warnings                                                                              */
/* ------------------------------------------------------------------------------------ */

/* A run whose steps are all profiler warm-up records nothing; it still runs (a short
 * smoke run with --steps 2 is legitimate), so a warning, in --check-config too. */
static void warn_warmup(const moe_config_t *cfg)
{
    if (cfg->prof_enabled && cfg->steps > 0 && cfg->steps <= cfg->prof_warmup_steps) {
        MOE_WARN("profiler: %s %lld step%s warm-up (profiler.warmup_steps %lld): nothing "
                 "will be recorded; run more steps or lower the warm-up",
                 cfg->steps == 1 ? "the" : "all", (long long)cfg->steps,
                 cfg->steps == 1 ? " is" : "s are", (long long)cfg->prof_warmup_steps);
    }
}

/* profiled_ranks: [] profiles no rank: the report has no figures (the run's own lines
 * still print), legitimate but rarely meant, so a warning. */
static void warn_no_profiled_rank(const moe_config_t *cfg)
{
    if (cfg->prof_enabled && !cfg->prof_all_ranks && cfg->prof_num_ranks == 0) {
        MOE_WARN("profiler.profiled_ranks: [] profiles no rank: the report will hold no "
                 "figures; name the ranks to profile, or all");
    }
}

/* A rank that hosts no expert still takes part in every exchange: usually a placement
 * written for another -np. The master of master routing is meant to host none. */
static void warn_idle_ranks(const moe_config_t *cfg)
{
    char list[256];
    size_t pos = 0;
    int idle = 0;
    for (int r = 0; cfg->world_size > 1 && r < cfg->world_size; r++) {
        if ((cfg->routing == MOE_ROUTING_MASTER && r == cfg->master_rank) ||
            moe_cfg_experts_of_rank(cfg, r, NULL) > 0) {
            continue;
        }
        if (idle < 16 && pos < sizeof(list)) {
            int w = snprintf(list + pos, sizeof(list) - pos, "%s%d", idle == 0 ? "" : " ", r);
            pos += w > 0 ? (size_t)w : 0;
        }
        idle++;
    }
    if (idle > 0) {
        MOE_WARN("placement.experts: rank%s %s%s (of %d) host%s no experts%s; check the "
                 "placement against mpirun -np",
                 idle == 1 ? "" : "s", list, idle > 16 ? " ..." : "", cfg->world_size,
                 idle == 1 ? "s" : "", cfg->placement_auto ? " (more ranks than experts)" : "");
    }
}

/* ------------------------------------------------------------------------------------ */

moe_preflight_fail_t moe_preflight_run(const moe_config_t *cfg, const moe_preflight_opts_t *opt,
                                       moe_error_t *err)
{
    moe_preflight_fail_t f = check_build(cfg, &opt->caps, err);
    if (f == MOE_PREFLIGHT_OK) {
        f = check_input_file(cfg, cfg->weights_mark, "model.weights", cfg->weights, err);
    }
    if (f == MOE_PREFLIGHT_OK) {
        f = check_input_file(cfg, cfg->input_mark, "workload.input", cfg->input, err);
    }
    if (f == MOE_PREFLIGHT_OK && moe_input_check(cfg, err) != MOE_OK) {
        f = MOE_PREFLIGHT_INPUT; /* its shape against tokens_per_step and hidden_dim */
    }
    if (f == MOE_PREFLIGHT_OK) {
        f = check_routing_trace(cfg, err);
    }
    if (f == MOE_PREFLIGHT_OK) {
        f = check_fp8_shares(cfg, err);
    }
    if (f == MOE_PREFLIGHT_OK) {
        f = check_memory(cfg, err);
    }
    if (f == MOE_PREFLIGHT_OK) {
        f = check_listen(cfg, err);
    }
    if (f == MOE_PREFLIGHT_OK) {
        f = check_path_text("profiler.output_dir", cfg->prof_output_dir, err);
    }
    if (f == MOE_PREFLIGHT_OK && cfg->prof_enabled) {
        f = check_run_dir_room(cfg->prof_output_dir, err);
    }
    if (f == MOE_PREFLIGHT_OK && cfg->prof_enabled) {
        f = check_output_dir("profiler.output_dir", cfg->prof_output_dir, false, err);
    }
    if (f == MOE_PREFLIGHT_OK && opt->dump_output != NULL) {
        f = check_dump_output(opt->dump_output, err);
    }
    if (f == MOE_PREFLIGHT_OK) {
        warn_warmup(cfg);
        warn_no_profiled_rank(cfg);
        warn_idle_ranks(cfg);
    }
    return f;
}
