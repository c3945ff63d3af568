#include "app/engine.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "app/bind.h"
#include "app/profiler_ab.h"
#include "moe/clock.h"
#include "expert/expert.h"
#include "expert/expert_small.h"
#include "expert/gemm.h"
#include "moe/log.h"
#include "moe/mpi_check.h"
#include "moe/poll.h"
#include "moe/stop.h"
#include "moe/testctl.h"
#include "moe/watchdog.h"
#include "expert/nvtx.h"
#include "expert/onednn.h"
#include "transport/wait.h"
#include "transport/wake.h"

/* MOE_TESTCTL_MPI_FAIL (moe/testctl.h): the Nth agreement of this process hands MPI_Allreduce
 * an invalid count, so the call fails for real, on every rank at once (ranks agree in the same
 * order): the test of the path below. Otherwise the count is 1. */
static int agree_count(void)
{
    static int64_t calls;
    calls++;
    return moe_testctl_agree_fails(calls) ? -1 : 1;
}

/* This rank's place and the lowest failing rank (*first == *world when none). Returns the
 * status of the MPI calls, their message in mpi_err. */
static moe_status_t agree_first(MPI_Comm comm, bool failed, int *rank, int *world, int *first,
                                moe_error_t *mpi_err)
{
    moe_status_t st = MOE_MPI(MPI_Comm_rank(comm, rank), mpi_err);
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Comm_size(comm, world), mpi_err);
    }
    if (st == MOE_OK) {
        /* non-blocking and polled: a rank stopped or hung here trips the watchdog */
        int mine = failed ? *rank : *world;
        MPI_Request req;
        st = MOE_MPI(MPI_Iallreduce(&mine, first, agree_count(), MPI_INT, MPI_MIN, comm, &req),
                     mpi_err);
        if (st == MOE_OK) {
            st = moe_wait_request(&req, "the agreement (every rank's verdict)", mpi_err);
        }
    }
    return st;
}

/* A failed MPI call here is this rank's verdict, in err; a rank that had already failed
 * keeps its own cause and the MPI failure is logged. */
moe_status_t moe_agree(MPI_Comm comm, moe_status_t st, moe_error_t *err)
{
    if (st == MOE_ERR_TIMEOUT || st == MOE_ERR_INTERRUPTED) {
        return st; /* the job ends: the other ranks learn it from the watchdog or the stop */
    }
    moe_error_t *mpi_err = st == MOE_OK ? err : NULL;
    int rank = 0, world = 0, first = 0;
    moe_status_t mst = agree_first(comm, st != MOE_OK, &rank, &world, &first, mpi_err);
    if (mst != MOE_OK) {
        return st != MOE_OK ? st : mst;
    }
    if (first == world) {
        return MOE_OK;
    }
    moe_error_t shared;
    if (rank == first) {
        shared.code = st;
        snprintf(shared.msg, sizeof(shared.msg), "%s", err != NULL ? err->msg : "");
        if (shared.msg[0] == '\0') {
            snprintf(shared.msg, sizeof(shared.msg), "%s", moe_status_string(st));
        }
    }
    mst = moe_wait_bcast(&shared, (int)sizeof(shared), MPI_BYTE, first, comm,
                         "the agreement (the failing rank's message)", mpi_err);
    if (mst != MOE_OK) {
        return st != MOE_OK ? st : mst;
    }
    if (err != NULL) {
        *err = shared;
    }
    return shared.code;
}

static moe_status_t engine_load_inputs(moe_engine_t *eng, moe_error_t *err)
{
    const moe_config_t *cfg = eng->cfg;
    int64_t H = cfg->hidden_dim, n = eng->token_count;
    bool random = strcmp(cfg->input, "random") == 0;
    /* A few distinct random batches, so routing varies from step to step, generated once:
     * the timed loop only copies. A file input is one batch. */
    eng->num_batches = random ? (int)(cfg->steps > 0 && cfg->steps < 4 ? cfg->steps : 4) : 1;
    size_t floats = (size_t)(n * H);
    eng->x = calloc(floats > 0 ? floats : 1, sizeof(float));
    eng->batches = calloc(floats > 0 ? floats * (size_t)eng->num_batches : 1, sizeof(float));
    if (eng->x == NULL || eng->batches == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate %lld input tokens",
                             (long long)n);
    }
    for (int b = 0; b < eng->num_batches && n > 0; b++) {
        moe_status_t st =
            moe_input_load(cfg, b, eng->token_first, n, eng->batches + (size_t)b * floats, err);
        if (st != MOE_OK) {
            return st;
        }
    }
    return MOE_OK;
}

/* Whether this node's ranks share cores (app/bind.h), from every rank's affinity mask
 * before runtime.bind pins it: a wait then yields the core while bytes flow. Collective. */
static moe_status_t engine_cores_shared(moe_engine_t *eng, bool *shared, moe_error_t *err)
{
    moe_cpu_mask_t mine, *all = calloc((size_t)eng->world_size, sizeof(*all));
    if (all == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the CPU masks");
    }
    moe_bind_own_mask(&mine);
    MPI_Request req;
    int words = MOE_BIND_MASK_WORDS;
    moe_status_t st = MOE_MPI(MPI_Iallgather(mine.w, words, MPI_UINT64_T, all, words,
                                             MPI_UINT64_T, eng->comm, &req),
                              err);
    st = st == MOE_OK ? moe_wait_request(&req, "the CPU masks exchange", err) : st;
    *shared = moe_bind_node_shares_cores(eng->cfg, eng->rank, eng->world_size,
                                         (const char (*)[64])eng->hosts,
                                         st == MOE_OK ? all : NULL);
    free(all);
    return st;
}

/* Every rank's host name, for messages; configures the waits' watchdog. */
static moe_status_t engine_hosts(moe_engine_t *eng, moe_error_t *err)
{
    eng->hosts = calloc((size_t)eng->world_size, sizeof(*eng->hosts));
    if (eng->hosts == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the hosts table");
    }
    char me[64] = {0};
    if (gethostname(me, sizeof(me) - 1) != 0) {
        snprintf(me, sizeof(me), "unknown");
    }
    MPI_Request req;
    moe_status_t st = MOE_MPI(MPI_Iallgather(me, 64, MPI_CHAR, eng->hosts, 64, MPI_CHAR,
                                             eng->comm, &req),
                              err);
    if (st == MOE_OK) {
        st = moe_wait_request(&req, "the hosts exchange", err);
    }
    if (st != MOE_OK) {
        return st;
    }
    moe_wait_configure(eng->cfg->step_timeout_s, eng->rank, eng->world_size,
                       (const char (*)[64])eng->hosts);
    st = moe_wake_setup(eng->comm, eng->rank, eng->world_size, (const char (*)[64])eng->hosts,
                        err);
    if (st != MOE_OK) {
        return st;
    }
    /* Fault injection for the watchdog test (MOE_TESTCTL_STALL): this rank stalls at a step. */
    eng->stall_step = moe_testctl_stall_step(eng->rank);
    eng->stall_rank = eng->stall_step >= 0 ? eng->rank : -1;
    /* MOE_TESTCTL_HOOK_DELAY_US: rank 0's profiler step hook takes N us more, asleep (a
     * cost of known size for the --profiler-ab test: on one rank, so it adds to the step
     * rather than overlapping another rank's; a sleep, so on a loaded machine it costs the
     * time asked for and no CPU that other processes would then claim back) */
    eng->test_hook_delay_ns = moe_testctl_hook_delay_ns(eng->rank);
    return MOE_OK;
}

/* runtime.threads above the CPUs a rank may use (its affinity mask, after runtime.bind) makes
 * its threads share them. Not an error (the run is right, only slower): rank 0 says so once,
 * naming the rank with the fewest CPUs and how many ranks have fewer than runtime.threads. */
static moe_status_t engine_threads_check(moe_engine_t *eng, moe_error_t *err)
{
    int cpus = moe_bind_cpus_allowed();
    bool few = cpus > 0 && cpus < eng->cfg->threads;
    struct {
        int cpus, rank;
    } mine = {few ? cpus : 1 << 30, eng->rank}, least = {0, 0};
    int n = few, nfew = 0;
    MPI_Request req[2];
    moe_status_t st = MOE_MPI(MPI_Iallreduce(&mine, &least, 1, MPI_2INT, MPI_MINLOC, eng->comm,
                                             &req[0]),
                              err);
    if (st == MOE_OK) {
        st = moe_wait_request(&req[0], "the CPU count check", err);
    }
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Iallreduce(&n, &nfew, 1, MPI_INT, MPI_SUM, eng->comm, &req[1]), err);
    }
    if (st == MOE_OK) {
        st = moe_wait_request(&req[1], "the CPU count check", err);
    }
    long long t = (long long)eng->cfg->threads;
    if (st == MOE_OK && eng->rank == 0 && nfew == 1) {
        MOE_WARN("runtime.threads: %lld, but rank %d (%s) may use %d CPU%s (its affinity mask): "
                 "its threads share %s; set runtime.threads to at most %d, or give the rank "
                 "more CPUs", t, least.rank, eng->hosts[least.rank], least.cpus,
                 least.cpus == 1 ? "" : "s", least.cpus == 1 ? "it" : "them", least.cpus);
    } else if (st == MOE_OK && eng->rank == 0 && nfew > 1) {
        MOE_WARN("runtime.threads: %lld, but %d of %d ranks may use fewer CPUs (their affinity "
                 "masks; the fewest: rank %d (%s), %d): their threads share them; set "
                 "runtime.threads to at most %d, or give the ranks more CPUs", t, nfew,
                 eng->world_size, least.rank, eng->hosts[least.rank], least.cpus, least.cpus);
    }
    return st;
}

/* "bf16", or "bf16+f32" when ranks differ: the types set in `bits` (1 << moe_dtype_t). */
static void engine_dtype_names(int bits, char *out, size_t len)
{
    static const char *const names[] = {"f32", "bf16", "f16", "auto", "fp8 e4m3", "mxfp4"};
    size_t pos = 0;
    out[0] = '\0';
    for (int d = 0; d < 6; d++) {
        if ((bits & (1 << d)) != 0 && pos < len) {
            int w = snprintf(out + pos, len - pos, "%s%s", pos > 0 ? "+" : "", names[d]);
            pos += w > 0 ? (size_t)w : 0;
        }
    }
}

/* src into dst[n], cut short when longer (a note for the report). */
static void engine_copy_text(char *dst, size_t n, const char *src)
{
    size_t len = strlen(src);
    len = len < n ? len : n - 1;
    memcpy(dst, src, len);
    dst[len] = '\0';
}

/* Key k of summary.json's config_resolved (moe_prof_resolved_t): its value as this run
 * resolved it, kept on rank 0 for the profiler. */
static void engine_resolved(moe_engine_t *eng, moe_prof_resolved_t k, const char *value)
{
    if (eng->rank == 0) {
        engine_copy_text(eng->resolved[k], sizeof(eng->resolved[k]), value);
    }
}

/* runtime.small_batch_rows as the expert ranks' kernels took it (kern: engine_dtypes' MIN
 * over the ranks of rows, ISA, -rows): "64", "32-64" where ranks differ, "0" where no rank
 * runs them (no kernels for the held type, or cuda); runtime.dedup,
 * profiler.expert_histograms and model.shared_ffn_dim with them, from the config alone. */
static void engine_resolved_rows(moe_engine_t *eng, const int kern[3])
{
    const moe_config_t *cfg = eng->cfg;
    char text[48];
    int lo = kern[0] == INT_MAX ? 0 : kern[0], hi = kern[0] == INT_MAX ? 0 : -kern[2];
    if (lo == hi) {
        snprintf(text, sizeof(text), "%d", lo);
    } else {
        snprintf(text, sizeof(text), "%d-%d", lo, hi);
    }
    engine_resolved(eng, MOE_PROF_RESOLVED_SMALL_BATCH_ROWS, text);
    engine_resolved(eng, MOE_PROF_RESOLVED_DEDUP, moe_cfg_dedup(cfg) ? "true" : "false");
    engine_resolved(eng, MOE_PROF_RESOLVED_EXPERT_HISTOGRAMS,
                    moe_cfg_expert_hist_per_expert(cfg) ? "expert" : "layer");
    snprintf(text, sizeof(text), "%lld", (long long)moe_weights_shared_ffn(cfg));
    engine_resolved(eng, MOE_PROF_RESOLVED_SHARED_FFN_DIM, text);
}

/* What follows "NAME compute" on the first line, from the expert ranks' kernels (kern:
 * fewest rows, weakest ISA, most rows; INT_MAX where no rank hosts experts). */
static void engine_compute_note(const moe_config_t *cfg, bool bf16, bool own,
                                const int kern[3], char *out, size_t len)
{
    char small[96] = "";
    int lo = kern[0], hi = -kern[2];
    if (cfg->device != MOE_DEVICE_CPU || kern[0] == INT_MAX) {
        out[0] = '\0';
        return;
    }
    if (hi > 0 && lo == hi) {
        snprintf(small, sizeof(small), "up to %d rows a call on moed's %s kernels", lo,
                 moe_sb_isa_name((moe_sb_isa_t)kern[1]));
    } else if (hi > 0) {
        snprintf(small, sizeof(small), "up to %d-%d rows a call on moed's %s kernels", lo, hi,
                 moe_sb_isa_name((moe_sb_isa_t)kern[1]));
    }
    if (bf16) {
        snprintf(out, len, " (oneDNN %s%s%s)", moe_onednn_isa_name(), small[0] ? "; " : "",
                 small);
    } else if (own) {
        snprintf(out, len, " (%s%sthe BLAS on dequantised panels)", small,
                 small[0] ? ", more: " : "");
    } else {
        out[0] = '\0';
    }
}

/* model.dtype, runtime.compute_dtype and runtime.wire_dtype as this run resolves them. The
 * wire type is the job's: bf16 when asked, or (auto) when every rank hosting experts
 * computes in bf16. Sets eng->value and eng->weights.compute / .wire (the load that follows
 * keeps them). Rank 0's line names the types of the ranks hosting experts (the master of
 * master routing hosts none: its own value type is f32), FP8 and MXFP4 held as stored with
 * their scales, and the small-batch kernels' switch point (expert/expert_small.h). */
static moe_status_t engine_dtypes(moe_engine_t *eng, moe_error_t *err)
{
    const moe_config_t *cfg = eng->cfg;
    moe_num_dtype_t compute = MOE_NUM_F32;
    moe_status_t st = moe_weights_value_dtype(cfg, eng->rank, &eng->value, err);
    if (st == MOE_OK) {
        st = moe_expert_compute_dtype(cfg, eng->value, &compute, err);
    }
    st = moe_agree(eng->comm, st, err);
    bool hosts = moe_cfg_experts_of_rank(cfg, eng->rank, NULL) > 0;
    int vote[2] = {hosts ? compute == MOE_NUM_BF16 : 1, 0}, all[2] = {0, 0};
    /* auto: the compute type; F16 on cuda keeps F32 rows (BF16 rows would drop 3 of the
     * 11 bits its GEMM inputs hold) */
    bool f16_gpu = hosts && cfg->device == MOE_DEVICE_CUDA && eng->value == MOE_DTYPE_F16;
    vote[1] = cfg->wire_dtype == MOE_NUM_AUTO ? vote[0] && !f16_gpu
                                              : cfg->wire_dtype == MOE_NUM_BF16;
    /* the value and held types of the experts here, as bit sets (engine_load_weights) */
    bool bf16 = cfg->device != MOE_DEVICE_CUDA && compute == MOE_NUM_BF16;
    bool quant = eng->value == MOE_DTYPE_FP8 || eng->value == MOE_DTYPE_MXFP4;
    moe_dtype_t value = bf16 && !quant ? MOE_DTYPE_BF16 : eng->value;
    moe_dtype_t held = moe_expert_held_dtype(cfg, compute, value);
    int kinds[2] = {hosts ? 1 << value : 0, hosts ? 1 << held : 0}, kinds_all[2] = {0, 0};
    /* the small-batch kernels here: rows, ISA, -rows (a MIN gives fewest, weakest, most) */
    int kern[3] = {INT_MAX, INT_MAX, INT_MAX}, kern_all[3] = {INT_MAX, INT_MAX, INT_MAX};
    if (hosts && cfg->device == MOE_DEVICE_CPU && st == MOE_OK) {
        moe_sb_isa_t isa = MOE_SB_NONE;
        int64_t rows = 0;
        moe_expert_small_plan(cfg, held, compute, &isa, &rows);
        kern[0] = (int)rows, kern[1] = (int)isa, kern[2] = -(int)rows;
    }
    MPI_Request req[3];
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Iallreduce(vote, all, 2, MPI_INT, MPI_MIN, eng->comm, &req[0]), err);
    }
    if (st == MOE_OK) {
        st = moe_wait_request(&req[0], "the dtype agreement", err);
    }
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Iallreduce(kinds, kinds_all, 2, MPI_INT, MPI_BOR, eng->comm, &req[1]),
                     err);
    }
    if (st == MOE_OK) {
        st = moe_wait_request(&req[1], "the dtype agreement", err);
    }
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Iallreduce(kern, kern_all, 3, MPI_INT, MPI_MIN, eng->comm, &req[2]),
                     err);
    }
    if (st == MOE_OK) {
        st = moe_wait_request(&req[2], "the dtype agreement", err);
    }
    if (st != MOE_OK) {
        return st;
    }
    eng->weights.compute = compute;
    eng->weights.wire = all[1] ? MOE_NUM_BF16 : MOE_NUM_F32;
    /* the largest of the held types the ranks reported (the host holds F32 for a GPU) */
    int hb = cfg->device == MOE_DEVICE_CUDA ? 0 : kinds_all[1];
    eng->experts_held = hb & 1 << MOE_DTYPE_F32     ? MOE_DTYPE_F32
                        : hb & 1 << MOE_DTYPE_BF16  ? MOE_DTYPE_BF16
                        : hb & 1 << MOE_DTYPE_FP8   ? MOE_DTYPE_FP8
                        : hb & 1 << MOE_DTYPE_MXFP4 ? MOE_DTYPE_MXFP4
                                                    : MOE_DTYPE_F32;
    if (eng->rank == 0) {
        char vals[48], helds[48], as[96] = "", note[160];
        int held_bits = kinds_all[1] != 0 ? kinds_all[1] : 1 << value;
        engine_dtype_names(kinds_all[0] != 0 ? kinds_all[0] : 1 << value, vals, sizeof(vals));
        engine_dtype_names(held_bits, helds, sizeof(helds));
        bool q = (held_bits & (1 << MOE_DTYPE_FP8 | 1 << MOE_DTYPE_MXFP4)) != 0;
        if (q) { /* FP8 / MXFP4 held as the checkpoint stores them, with their scales */
            char scales[64];
            moe_weights_quant_note(cfg, held_bits & (1 << MOE_DTYPE_FP8) ? MOE_DTYPE_FP8
                                                                         : MOE_DTYPE_MXFP4,
                                   scales, sizeof(scales));
            snprintf(as, sizeof(as), " held as stored (%s)", scales);
        } else if (strcmp(vals, helds) != 0) {
            /* F32: compute_dtype f32 on a CPU with native BF16, or no kernels for BF16 */
            snprintf(as, sizeof(as), " (held as %s)", helds);
        }
        /* F32 compute of weights in moed's blocked layout: FP8, MXFP4, or BF16 without
         * native BF16 (moe_expert_held_dtype) */
        bool own = q || (!all[0] && (held_bits & 1 << MOE_DTYPE_BF16) != 0);
        engine_compute_note(cfg, all[0] != 0, own, kern_all, note, sizeof(note));
        char split[96] = ""; /* placement.copies: columns, balance */
        if (cfg->column_shares > 1) {
            snprintf(split, sizeof(split), "; every expert in %d column shares of %lld of its "
                     "%lld ffn columns", (int)cfg->column_shares,
                     (long long)moe_cfg_expert_ffn(cfg), (long long)cfg->ffn_dim);
        } else if (cfg->copies == MOE_COPIES_BALANCE && cfg->placement_replicas) {
            snprintf(split, sizeof(split), "; each step an expert's tokens on its copy with "
                     "the fewest experts to read");
        }
        /* on cuda the GEMMs take the held type: F16 weights compute in F16 */
        const char *cname = !all[0] ? "f32"
                            : cfg->device == MOE_DEVICE_CUDA && held_bits == 1 << MOE_DTYPE_F16
                                ? "f16"
                                : "bf16";
        const char *wname = all[1] ? "bf16" : "f32";
        MOE_INFO("experts: %s weights%s, %s compute%s, %s rows on the wire%s", vals, as, cname,
                 note, wname, split);
        engine_resolved(eng, MOE_PROF_RESOLVED_DTYPE, vals);
        engine_resolved(eng, MOE_PROF_RESOLVED_COMPUTE_DTYPE, cname);
        engine_resolved(eng, MOE_PROF_RESOLVED_WIRE_DTYPE, wname);
        engine_resolved_rows(eng, kern_all);
        char desc[320];
        snprintf(desc, sizeof(desc), "%s weights%s, %s compute%s", vals,
                 q ? " held as stored" : as, cname, split);
        engine_copy_text(eng->experts_desc, sizeof(eng->experts_desc), desc);
    }
    return MOE_OK;
}

/* The weights as the resolved types say (moe_expert_held_dtype): held in BF16 when this CPU
 * rank computes in BF16 (values rounded to BF16 then) and packed for oneDNN, or in BF16 for
 * moed's F32 kernels where the CPU lacks native BF16 (packed in their blocked layout); FP8
 * and MXFP4 as stored; else F32 on the host; the shared experts as moe_expert_shared_types
 * says. */
static moe_status_t engine_load_weights(moe_engine_t *eng, moe_error_t *err)
{
    const moe_config_t *cfg = eng->cfg;
    moe_num_dtype_t compute = eng->weights.compute, wire = eng->weights.wire;
    bool bf16 = cfg->device != MOE_DEVICE_CUDA && compute == MOE_NUM_BF16;
    bool quant = eng->value == MOE_DTYPE_FP8 || eng->value == MOE_DTYPE_MXFP4;
    /* bf16 compute holds bf16, FP8 and MXFP4 stay as stored; the GPU's plug-in takes F32 */
    moe_dtype_t value = bf16 && !quant ? MOE_DTYPE_BF16 : eng->value;
    moe_dtype_t held = cfg->device == MOE_DEVICE_CUDA ? MOE_DTYPE_F32
                                                      : moe_expert_held_dtype(cfg, compute, value);
    moe_dtype_t shared_held = MOE_DTYPE_F32;
    moe_num_dtype_t shared_compute = MOE_NUM_F32;
    moe_status_t st = moe_expert_shared_types(cfg, eng->routes, &shared_held, &shared_compute,
                                              err);
    if (st == MOE_OK) {
        st = moe_weights_load(cfg, eng->rank, eng->routes, value, held, eng->experts_held,
                              shared_held,
                              &eng->weights, err);
    }
    eng->weights.compute = compute;
    eng->weights.wire = wire;
    eng->weights.shared_compute = shared_compute;
    if (st == MOE_OK) { /* the report's (rank 0's): where from, and held how */
        char desc[384], shared[96] = "";
        if (eng->weights.shared_ffn > 0 && eng->routes) {
            moe_dtype_t sh = eng->weights.shared_store;
            snprintf(shared, sizeof(shared), "; shared experts: %s weights%s, %s compute",
                     sh == MOE_DTYPE_FP8 ? "fp8 e4m3" : sh == MOE_DTYPE_BF16 ? "bf16" : "f32",
                     sh == MOE_DTYPE_FP8 ? " held as stored" : "",
                     shared_compute == MOE_NUM_BF16 ? "bf16" : "f32");
            if (eng->rank == 0) { /* after the experts' line: how the routing ranks run them */
                MOE_INFO("%s", shared + 2);
            }
        }
        snprintf(desc, sizeof(desc), "%s%s%s%s", eng->weights.naming,
                 eng->experts_desc[0] ? "; experts: " : "", eng->experts_desc, shared);
        engine_copy_text(eng->weights_desc, sizeof(eng->weights_desc), desc);
    }
    if (st == MOE_OK && cfg->device != MOE_DEVICE_CUDA &&
        (held == MOE_DTYPE_BF16 || eng->weights.shared_store == MOE_DTYPE_BF16)) {
        st = moe_expert_cpu_pack(cfg, &eng->weights, err);
    }
    return st;
}

/* What the profiler (and the live path's window recorder) are told at create; ids:
 * MOE_MAX_EXPERTS entries that must last until the create. */
static moe_prof_static_t engine_prof_info(const moe_engine_t *eng, int32_t *ids)
{
    const moe_config_t *cfg = eng->cfg;
    int n = moe_cfg_experts_of_rank(cfg, eng->rank, ids);
    moe_prof_static_t info = {
        .num_local = n,
        .local_ids = ids,
        .expert_weight_bytes = eng->weights.expert_bytes,
        .exchange_buffer_bytes = moe_layer_ctx_buffer_bytes(&eng->layer),
        .total_steps = cfg->steps > 0 ? cfg->steps : INT64_MAX, /* 0: until a signal */
        .row_bytes = moe_wire_row_bytes(cfg->hidden_dim, eng->weights.wire),
        .flops_per_row = moe_cfg_ffn_flops(cfg->activation, cfg->hidden_dim,
                                           moe_cfg_expert_ffn(cfg), 1),
        .transport = moe_transport_name(eng->transport),
        .blas = moe_gemm_backend_name(),
        .weights = eng->weights_desc,
        .hosts = (const char (*)[64])eng->hosts,
        .device = eng->device_name,
        .chunks = (int)cfg->chunks,
        .device_memory = eng->cuda != NULL ? eng->plugin->mem_usage : NULL,
        .routing_source = moe_engine_routing_source(eng),
        .token_first = eng->token_first,
        .token_count = eng->token_count,
    };
    for (int k = 0; k < MOE_PROF_RESOLVED_COUNT; k++) {
        info.resolved[k] = eng->resolved[k];
    }
    return info;
}

/* A run without end's window folder written or not: /status lists it or says why not
 * (profiler.listen). */
static void engine_folder_written(void *live, int64_t window, const char *name, const char *dir,
                                  const char *error)
{
    moe_live_folder_written(live, window, name, dir, error);
}

static moe_status_t engine_create_profiler(moe_engine_t *eng, moe_error_t *err)
{
    int32_t ids[MOE_MAX_EXPERTS];
    moe_prof_static_t info = engine_prof_info(eng, ids);
    info.config_text = eng->config_text; /* a run without end's window folders (copied) */
    info.config_len = eng->config_len;
    info.folder_written = eng->live != NULL ? engine_folder_written : NULL;
    info.folder_arg = eng->live;
    return moe_prof_create(eng->cfg, eng->comm, &info, &eng->prof, err);
}

static moe_status_t engine_create_live(moe_engine_t *eng, moe_error_t *err)
{
    int32_t ids[MOE_MAX_EXPERTS];
    moe_prof_static_t info = engine_prof_info(eng, ids);
    info.config_text = eng->config_text;
    info.config_len = eng->config_len;
    return moe_live_create(eng->cfg, eng->comm, eng->routes, &info, &eng->live, err);
}

/* runtime.device: cuda: the CUDA plug-in (loaded here, never on a CPU run), the GPU of this
 * rank's local rank (ranks on one host, in rank order) modulo the host's GPUs, a context on
 * it, and the device copy of x. */
static moe_status_t engine_open_device(moe_engine_t *eng, moe_error_t *err)
{
    snprintf(eng->device_name, sizeof(eng->device_name), "cpu");
    if (eng->cfg->device != MOE_DEVICE_CUDA) {
        return MOE_OK;
    }
    char why[256];
    const moe_plugin_t *pl = NULL;
    moe_status_t st = moe_plugin_get("runtime.device: cuda", &pl, err);
    if (st == MOE_OK && !pl->available(why, sizeof(why))) {
        st = moe_error_set(err, MOE_ERR_CUDA, "runtime.device: cuda, but rank %d has no usable "
                           "GPU (%s)", eng->rank, why);
    }
    st = moe_agree(eng->comm, st, err); /* before the collective split */
    if (st != MOE_OK) {
        return st;
    }
    eng->plugin = pl;
    MPI_Comm local;
    int local_rank = 0, local_size = 1;
    st = MOE_MPI(MPI_Comm_split_type(eng->comm, MPI_COMM_TYPE_SHARED, eng->rank, MPI_INFO_NULL,
                                     &local),
                 err);
    if (st != MOE_OK) {
        return st;
    }
    st = MOE_MPI(MPI_Comm_rank(local, &local_rank), err);
    st = st == MOE_OK ? MOE_MPI(MPI_Comm_size(local, &local_size), err) : st;
    moe_status_t freed = MOE_MPI(MPI_Comm_free(&local), st == MOE_OK ? err : NULL);
    st = st != MOE_OK ? st : freed;
    /* NCCL takes one rank per GPU: two ranks on one GPU fail at its start-up or hang */
    if (st == MOE_OK && eng->cfg->transport == MOE_TRANSPORT_NCCL &&
        local_size > pl->device_count()) {
        st = moe_error_set(err, MOE_ERR_CUDA, "runtime.transport: nccl takes one rank per GPU, "
                           "but this node runs %d ranks on %d GPU(s): start at most %d ranks "
                           "a node, or use transport mpi or ucx", local_size,
                           pl->device_count(), pl->device_count());
    }
    st = moe_agree(eng->comm, st, err);
    if (st != MOE_OK) {
        return st;
    }
    void *cu = NULL;
    st = pl->open(local_rank % pl->device_count(), &cu, err);
    if (st != MOE_OK) {
        return st;
    }
    eng->cuda = cu;
    snprintf(eng->device_name, sizeof(eng->device_name), "%s", pl->device_name(cu));
    size_t bytes = sizeof(float) * (size_t)(eng->token_count * eng->cfg->hidden_dim);
    return pl->alloc(cu, bytes, (void **)&eng->x_dev, err);
}

/* Copy the hidden state between the host and the GPU (no-ops on the CPU). to_device: the
 * step's input in; else the result out. */
static moe_status_t engine_sync_x(moe_engine_t *eng, bool to_device, moe_error_t *err)
{
    if (eng->cuda != NULL && eng->token_count > 0) {
        size_t bytes = sizeof(float) * (size_t)(eng->token_count * eng->cfg->hidden_dim);
        return eng->plugin->copy_sync(eng->cuda, to_device ? (void *)eng->x_dev : eng->x,
                                      to_device ? (void *)eng->x : eng->x_dev, bytes,
                                      to_device, err);
    }
    return MOE_OK;
}

/* MOE_TESTCTL_PAUSE (fault injection for tests/mpi/faults.sh): that rank stops itself
 * (SIGSTOP) at that phase: "startup" (before the first agreement of the engine),
 * "end" (after the last step's barrier), "report" (before the profile's last records),
 * "teardown" (after the report and the last barrier, before the transports' teardown),
 * "finalize" (every rank at MPI_Finalize's door), "stepN" (at step N's begin, its step N-1
 * completed on this rank). */
static void test_pause(int rank, const char *phase)
{
    moe_testctl_pause_here(rank, phase);
}

/* MOE_TESTCTL_PAUSE's "stepN", asked only when the hook is armed (no formatting per step). */
static void test_pause_step(int rank, int64_t step)
{
    if (moe_testctl_armed(MOE_TESTCTL_PAUSE)) {
        char phase[32];
        snprintf(phase, sizeof(phase), "step%lld", (long long)step);
        test_pause(rank, phase);
    }
}

void moe_engine_test_pause(const moe_engine_t *eng, const char *phase)
{
    test_pause(eng->rank, phase);
}

void moe_engine_test_pause_rank(int rank, const char *phase)
{
    test_pause(rank, phase);
}

/* runtime.rebalance_every: the live copy of the config and the counts' window (one rank
 * has nothing to move between). */
static moe_status_t engine_rebalance_init(moe_engine_t *eng, moe_error_t *err)
{
    if (eng->cfg->rebalance_every == 0 || eng->world_size < 2) {
        return MOE_OK;
    }
    eng->live_cfg = malloc(sizeof(*eng->live_cfg));
    if (eng->live_cfg == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the live placement");
    }
    *eng->live_cfg = *eng->cfg;
    return moe_rebalance_init(&eng->rebalance, eng->cfg, eng->world_size, err);
}

/* After step s, every runtime.rebalance_every steps (not after the last): the new placement
 * for the steps from s + 1 on, its record in the profile, one line from rank 0. */
static moe_status_t engine_rebalance(moe_engine_t *eng, int64_t s, int64_t steps,
                                     moe_error_t *err)
{
    int64_t every = eng->cfg->rebalance_every;
    if (eng->live_cfg == NULL || (s + 1) % every != 0 || (steps > 0 && s + 1 >= steps)) {
        return MOE_OK;
    }
    moe_wait_set_where(s + 1, 0, "rebalance");
    moe_rebalance_result_t r;
    moe_status_t st = moe_rebalance_apply(&eng->rebalance, eng->live_cfg, &eng->weights,
                                          eng->comm, eng->rank, &r, err);
    if (st != MOE_OK) {
        return st;
    }
    eng->rebalances++;
    moe_prof_rebalance_t rec = {.step = s + 1, .moved = r.moved, .bytes = r.bytes,
                                .begin_ns = r.begin_ns, .end_ns = r.end_ns,
                                .critical_ns = r.critical_ns, .slowest_rank = r.slowest_rank,
                                .before = r.before, .after = r.after};
    if (eng->prof != NULL) {
        moe_prof_rebalance(eng->prof, &rec);
    }
    if (eng->rank == 0) {
        char how[96] = "predicted";
        if (r.estimated) { /* layer/rebalance.h, step 2 */
            snprintf(how, sizeof(how), "estimated (an expert has more than %d copies)",
                     MOE_REBALANCE_EXACT_COPIES);
        }
        MOE_INFO("rebalance before step %lld: %lld experts moved (%.1f MB) in %.1f ms (the "
                 "slowest rank's, rank %d), imbalance %.2f -> %.2f %s", (long long)(s + 1),
                 (long long)r.moved, (double)r.bytes / 1e6, (double)r.critical_ns * 1e-6,
                 r.slowest_rank, r.before, r.after, how);
    }
    return MOE_OK;
}

moe_status_t moe_engine_create(const moe_config_t *cfg, const char *config_text,
                               size_t config_len, MPI_Comm comm, moe_engine_t **out,
                               moe_error_t *err)
{
    /* What this build supports was checked before (app/preflight.c). */
    moe_status_t st = MOE_OK;
    moe_engine_t *eng = calloc(1, sizeof(*eng));
    if (eng == NULL) {
        st = moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the engine");
    } else {
        eng->cfg = cfg;
        eng->config_text = config_text;
        eng->config_len = config_len;
        eng->comm = comm;
        st = MOE_MPI(MPI_Comm_rank(comm, &eng->rank), err);
    }
    if (st == MOE_OK) {
        st = MOE_MPI(MPI_Comm_size(comm, &eng->world_size), err);
    }
    if (st == MOE_OK) {
        /* the config's bound from here on (the hosts for the messages come below) */
        moe_wait_configure(cfg->step_timeout_s, eng->rank, eng->world_size, NULL);
        test_pause(eng->rank, "startup");
        moe_cfg_tokens_of_rank(cfg, eng->world_size, eng->rank, &eng->token_first,
                               &eng->token_count);
        eng->routes = eng->token_count > 0;
        moe_gemm_set_threads((int)cfg->threads);
        st = engine_open_device(eng, err);
    }
    /* Every rank agrees before the collectives below; the hosts (and the watchdog) come
     * first so a transport's start-up is already guarded. */
    st = moe_agree(comm, st, err);
    if (st == MOE_OK) {
        st = engine_hosts(eng, err);
    }
    if (strcmp(cfg->routing_trace, "none") != 0) { /* every rank: the same config */
        st = moe_agree(comm, st, err);
        if (st == MOE_OK && eng->rank == 0) {
            st = moe_replay_read(cfg, &eng->replay, err);
        }
        st = moe_agree(comm, st, err);
        if (st == MOE_OK) {
            st = moe_agree(comm, moe_replay_share(cfg, comm, eng->routes, &eng->replay, err),
                           err);
        }
        eng->replaying = st == MOE_OK;
    }
    if (st == MOE_OK) { /* before the weights are made: that work runs pinned too */
        bool shared = true;
        st = engine_cores_shared(eng, &shared, err);
        const char *bind = moe_bind_apply(cfg, eng->rank, eng->world_size,
                                          (const char (*)[64])eng->hosts, &eng->pinned_cpu,
                                          eng->bind_desc, sizeof(eng->bind_desc));
        engine_resolved(eng, MOE_PROF_RESOLVED_BIND, bind);
        moe_poll_set_yield(shared);
    }
    if (st == MOE_OK) {
        st = engine_threads_check(eng, err);
    }
    if (st == MOE_OK) {
        st = engine_dtypes(eng, err);
    }
    if (st == MOE_OK) {
        moe_transport_device_t dev = {
            .cuda = eng->cuda, .nccl_create = eng->plugin != NULL ? eng->plugin->nccl_create : NULL,
            .ucx_peer_errors = cfg->ucx_peer_errors};
        /* the transports count rows of floats: a BF16 row is half as many */
        int64_t row_floats = moe_wire_row_bytes(cfg->hidden_dim, eng->weights.wire) / 4;
        st = moe_transport_create(cfg->transport, comm, row_floats, 2 * (int)cfg->chunks,
                                  &dev, &eng->transport, err);
    }
    if (st == MOE_OK) {
        st = engine_load_weights(eng, err);
    }
    if (st == MOE_OK && moe_stop_requested()) {
        st = moe_error_set(err, MOE_ERR_INTERRUPTED, "stopped during start-up");
    }
    if (st == MOE_OK) {
        st = engine_load_inputs(eng, err);
    }
    if (st == MOE_OK) {
        st = engine_rebalance_init(eng, err);
    }
    if (st == MOE_OK) {
        st = moe_layer_ctx_init(&eng->layer, eng->live_cfg != NULL ? eng->live_cfg : cfg, comm,
                                eng->transport, &eng->weights, eng->token_count, eng->plugin,
                                eng->cuda, err);
        moe_layer_set_token_first(&eng->layer, eng->token_first); /* the replica split */
        if (eng->replaying && eng->routes) {
            moe_layer_set_replay(&eng->layer, &eng->replay.tr, eng->replay.li);
        }
    }
    st = moe_agree(comm, st, err);
    if (st == MOE_OK) { /* every rank's layer is ready: agree how the rows are received */
        st = moe_agree(comm, moe_layer_agree_upto(&eng->layer, err), err);
    }
    /* the endpoint first: the profiler makes the run folder, which a failure to start the
     * endpoint (its port taken since the checks before the run) would leave behind */
    if (st == MOE_OK && strcmp(cfg->prof_listen, "off") != 0) {
        st = moe_agree(comm, engine_create_live(eng, err), err);
    }
    if (st == MOE_OK && cfg->prof_enabled) {
        st = moe_agree(comm, engine_create_profiler(eng, err), err);
    }
    if (eng != NULL) {
        eng->config_text = NULL; /* the caller's: not kept */
        eng->config_len = 0;
    }
    if (st != MOE_OK) {
        moe_engine_destroy(eng);
        return st;
    }
    *out = eng;
    return MOE_OK;
}

const char *moe_engine_routing_source(const moe_engine_t *eng)
{
    return eng->replaying ? eng->replay.source : "router";
}

void moe_engine_destroy(moe_engine_t *eng)
{
    if (eng == NULL) {
        return;
    }
    moe_prof_destroy(eng->prof);
    moe_live_destroy(eng->live);
    /* The transport first: it may still own exchanges into the layer's buffers (a stop
     * leaves them in flight), and NCCL's abort must end before those are freed. */
    moe_transport_destroy(eng->transport);
    moe_wake_teardown();
    moe_layer_ctx_destroy(&eng->layer);
    moe_weights_destroy(&eng->weights);
    moe_rebalance_destroy(&eng->rebalance);
    moe_replay_free(&eng->replay);
    free(eng->live_cfg);
    free(eng->ab_block_ns);
    if (eng->plugin != NULL) {
        eng->plugin->free(eng->cuda, eng->x_dev);
        eng->plugin->close(eng->cuda);
    }
    free(eng->hosts);
    free(eng->x);
    free(eng->batches);
    free(eng);
}

static void engine_account_layer(moe_engine_t *eng)
{
    const moe_layer_record_t *rec = moe_layer_record(&eng->layer);
    const moe_plan_t *plan = moe_layer_plan(&eng->layer);
    const moe_config_t *cfg = eng->cfg;
    for (int p = 0; p < MOE_PHASE_LAYER_COUNT; p++) {
        eng->phase_ns[p] += rec->phase_end_ns[p] - rec->phase_begin_ns[p];
    }
    for (int le = 0; le < eng->layer.num_local; le++) {
        int64_t rows = rec->expert_rows[le];
        if (rows == 0) {
            continue;
        }
        eng->expert_ns += rec->expert_ns[le];
        eng->expert_flops +=
            moe_cfg_ffn_flops(cfg->activation, cfg->hidden_dim, moe_cfg_expert_ffn(cfg), rows);
        eng->expert_rows += rows;
    }
    eng->expert_calls += rec->num_calls; /* one per expert per chunk with rows */
    eng->rows_sent += plan->num_send;
    eng->dropped += plan->num_dropped;
}

static void engine_profile_layer(moe_engine_t *eng, int layer)
{
    const moe_layer_ctx_t *ctx = &eng->layer; /* read-only: its public fields */
    const moe_layer_record_t *rec = moe_layer_record(ctx);
    const moe_plan_t *plan = moe_layer_plan(ctx);
    moe_prof_layer_sample_t s = {
        .layer = layer,
        .phase_begin_ns = rec->phase_begin_ns,
        .phase_end_ns = rec->phase_end_ns,
        .expert_rows = rec->expert_rows,
        .expert_ns = rec->expert_ns,
        .num_calls = rec->num_calls,
        .calls = rec->calls,
        .num_spans = rec->num_spans,
        .spans = rec->spans,
        .demand = plan->expert_demand,
        .kept = plan->expert_kept,
        .dropped = plan->expert_dropped,
        .slot_rows = plan->slot_kept,
        .send_rows = plan->send_rows,
        .recv_rows = ctx->recv_rows,
        .send_pairs = plan->send_pairs,
        .recv_pairs = ctx->recv_pairs,
        .peer_wait_ns = rec->peer_wait_ns,
        .shared_rows = rec->shared_rows,
        .shared_begin_ns = rec->shared_begin_ns,
        .shared_end_ns = rec->shared_end_ns,
        .topk_ids = eng->token_count > 0 ? moe_layer_topk_ids(ctx) : NULL,
        .topk_weights = eng->token_count > 0 ? moe_layer_topk_weights(ctx) : NULL,
    };
    int32_t local[MOE_MAX_EXPERTS];
    s.slots = moe_cfg_layer_entries(ctx->cfg, layer, &s.num_slots); /* live_cfg's, if any */
    s.num_local_experts = moe_cfg_experts_of_rank_layer(ctx->cfg, layer, eng->rank, local);
    s.local_experts = local;
    if (eng->prof != NULL) {
        moe_prof_layer(eng->prof, &s);
    }
    if (eng->live != NULL) {
        int64_t t = moe_now_ns();
        moe_live_layer(eng->live, &s);
        eng->live_ns += moe_now_ns() - t;
    }
}

static moe_status_t engine_step(moe_engine_t *eng, int64_t step, moe_error_t *err)
{
    const moe_config_t *cfg = eng->cfg;
    size_t floats = (size_t)(eng->token_count * cfg->hidden_dim);
    memcpy(eng->x, eng->batches + (size_t)(step % eng->num_batches) * floats,
           floats * sizeof(float));
    if (eng->rank == eng->stall_rank && step == eng->stall_step) {
        /* MOE_TESTCTL_STALL: stop making progress, as a hung rank would */
        while (!moe_stop_requested()) {
            struct timespec nap = {0, 100000000};
            nanosleep(&nap, NULL);
        }
    }
    float *x = eng->cuda != NULL ? eng->x_dev : eng->x;
    moe_status_t st = engine_sync_x(eng, true, err);
    for (int l = 0; l < (int)cfg->num_layers && st == MOE_OK; l++) {
        st = moe_layer_forward(&eng->layer, x, eng->token_count, step, l, err);
        if (st != MOE_OK) {
            return st;
        }
        engine_account_layer(eng);
        if (eng->live_cfg != NULL) {
            const moe_layer_ctx_t *lc = &eng->layer;
            moe_rebalance_account(&eng->rebalance, l, moe_layer_plan(lc), moe_layer_topk_ids(lc),
                                  eng->token_first, moe_layer_record(lc)->expert_rows,
                                  lc->layer_local, eng->rank);
        }
        if ((eng->prof != NULL || eng->live != NULL) && eng->hooks_on) {
            int64_t t = moe_now_ns();
            engine_profile_layer(eng, l);
            eng->prof_ns += moe_now_ns() - t;
        }
    }
    return st;
}

static void engine_progress(const moe_engine_t *eng, int64_t step, int64_t steps,
                            int64_t t0, int64_t *last_print, bool final)
{
    int64_t now = moe_now_ns();
    if (!final && now - *last_print < 500000000LL) {
        return;
    }
    *last_print = now;
    double secs = (double)(now - t0) * 1e-9;
    double tps = secs > 0 ? (double)(step + 1) * (double)eng->cfg->tokens_per_step / secs : 0;
    if (steps > 0) {
        printf("\rstep %lld/%lld  %.0f tokens/s   %s", (long long)(step + 1), (long long)steps,
               tps, final ? "\n" : "");
    } else { /* workload.steps: 0 has no total */
        printf("\rstep %lld (no end: SIGINT/SIGTERM stops)  %.0f tokens/s   %s",
               (long long)(step + 1), tps, final ? "\n" : "");
    }
    fflush(stdout);
}

/* A block of --profiler-ab ended after `ns` of wall time. */
static void engine_ab_block(moe_engine_t *eng, int64_t ns, bool on)
{
    if (eng->ab_blocks == eng->ab_cap) { /* a run without end grows it */
        int64_t cap = eng->ab_cap > 0 ? 2 * eng->ab_cap : 256;
        int64_t *b = realloc(eng->ab_block_ns, sizeof(int64_t) * (size_t)cap);
        if (b == NULL) {
            return; /* the figures stop here; the run goes on */
        }
        eng->ab_block_ns = b;
        eng->ab_cap = cap;
    }
    eng->ab_block_ns[eng->ab_blocks++] = ns;
    eng->hook_ns += on ? ns : 0;
}

void moe_engine_set_profiler_ab(moe_engine_t *eng, int64_t k)
{
    eng->ab_steps = k;
}

moe_status_t moe_engine_run(moe_engine_t *eng, int64_t steps, bool progress, moe_error_t *err)
{
    bool show = progress && eng->rank == 0;
    eng->steps_planned = steps;
    moe_wait_set_where(0, 0, "start barrier");
    moe_status_t st = moe_wait_barrier(eng->comm, err);
    int64_t t0 = moe_now_ns(), last_print = t0, cpu0 = moe_cpu_ns(), block0 = t0;
    int64_t k = eng->ab_steps;
    for (int64_t s = 0; (steps == 0 || s < steps) && st == MOE_OK; s++) { /* 0: no end */
        moe_stop_alive(moe_now_ns());
        moe_watchdog_tick(); /* a stop passed on by another rank, a fault to report */
        if (moe_stop_requested()) {
            st = moe_error_set(err, MOE_ERR_INTERRUPTED, "stopped by %s",
                               moe_stop_signal_name(moe_stop_signal()));
            break;
        }
        test_pause_step(eng->rank, s);
        if (k > 0 && s % k == 0) {
            block0 = moe_now_ns();
        }
        eng->hooks_on = k == 0 || moe_ab_step_on(k, s);
        int64_t hs = k > 0 ? eng->hook_steps : s; /* the step as the hooks number it */
        if (eng->prof != NULL && eng->hooks_on) {
            int64_t t = moe_now_ns();
            moe_prof_step_begin(eng->prof, hs);
            eng->prof_ns += moe_now_ns() - t;
        }
        if (eng->live != NULL && eng->hooks_on) {
            int64_t t = moe_now_ns();
            moe_live_step_begin(eng->live, hs);
            t = moe_now_ns() - t;
            eng->prof_ns += t;
            eng->live_ns += t;
        }
        int64_t b = moe_now_ns();
        moe_nvtx_push("step");
        st = engine_step(eng, s, err);
        moe_nvtx_pop();
        int64_t e = moe_now_ns();
        if (st != MOE_OK) {
            break;
        }
        eng->steps_done = s + 1;
        eng->steps_ns = e - t0; /* a stop's tokens/s: the completed steps only */
        eng->hook_steps += eng->hooks_on ? 1 : 0;
        if (eng->prof != NULL && eng->hooks_on) {
            if (eng->test_hook_delay_ns > 0) {
                struct timespec ts = {(time_t)(eng->test_hook_delay_ns / 1000000000LL),
                                      (long)(eng->test_hook_delay_ns % 1000000000LL)};
                nanosleep(&ts, NULL);
            }
            st = moe_prof_step_end(eng->prof, hs, b, e, err);
            eng->prof_ns += moe_now_ns() - e;
            if (st != MOE_OK) {
                break;
            }
        }
        if (eng->live != NULL && eng->hooks_on) {
            int64_t t = moe_now_ns();
            moe_live_step_end(eng->live, hs, b, e);
            t = moe_now_ns() - t;
            eng->prof_ns += t;
            eng->live_ns += t;
        }
        st = engine_rebalance(eng, s, steps, err);
        if (st != MOE_OK) {
            break;
        }
        if (k > 0 && (s + 1) % k == 0) {
            engine_ab_block(eng, moe_now_ns() - block0, eng->hooks_on);
        }
        if (show) {
            engine_progress(eng, s, steps, t0, &last_print, false);
        }
    }
    if (st == MOE_OK) {
        moe_wait_set_where(eng->steps_done, 0, "end barrier");
        st = moe_wait_barrier(eng->comm, err);
        test_pause(eng->rank, "end");
    }
    eng->run_ns = moe_now_ns() - t0;
    eng->run_cpu_ns = moe_cpu_ns() - cpu0;
    if (k == 0) {
        eng->hook_ns = eng->run_ns;
    }
    if (show && eng->steps_done > 0) {
        engine_progress(eng, eng->steps_done - 1, steps, t0, &last_print, true);
    }
    return st;
}

moe_status_t moe_engine_finish_profile(moe_engine_t *eng, const char *config_text,
                                       size_t config_len, bool interrupted, double deadline_s,
                                       const char *missing_why, char *run_dir,
                                       size_t run_dir_len, moe_error_t *err)
{
    if (eng->prof == NULL) {
        return MOE_OK;
    }
    moe_prof_run_t run = { /* with --profiler-ab: the on blocks, the steps it saw */
        .steps_run = eng->hook_steps,
        .steps_planned = eng->ab_steps > 0 ? eng->hook_steps : eng->steps_planned,
        .run_s = (double)eng->hook_ns * 1e-9,
        .config_text = config_text,
        .config_len = config_len,
        .interrupted = interrupted,
        .deadline_s = deadline_s,
        .missing_why = missing_why,
        .job_steps = true,
    };
    return moe_prof_finish(eng->prof, &run, run_dir, run_dir_len, err);
}

/* Every rank's rows of x into `all` on rank 0 (counts and displs in rows, rank 0 only). */
static moe_status_t engine_gather_rows(moe_engine_t *eng, float *all, const int *counts,
                                       const int *displs, moe_error_t *err)
{
    MPI_Datatype row = MPI_DATATYPE_NULL;
    moe_status_t st = MOE_MPI(MPI_Type_contiguous((int)eng->cfg->hidden_dim, MPI_FLOAT, &row),
                              err);
    if (st != MOE_OK) {
        return st;
    }
    st = MOE_MPI(MPI_Type_commit(&row), err);
    if (st == MOE_OK) {
        MPI_Request req;
        st = MOE_MPI(MPI_Igatherv(eng->x, (int)eng->token_count, row, all, counts, displs, row,
                                  0, eng->comm, &req),
                     err);
        if (st == MOE_OK) {
            st = moe_wait_request(&req, "the output gather", err);
        }
    }
    moe_status_t freed = MOE_MPI(MPI_Type_free(&row), st == MOE_OK ? err : NULL);
    return st != MOE_OK ? st : freed;
}

moe_status_t moe_engine_gather_output(moe_engine_t *eng, float **out, moe_error_t *err)
{
    int W = eng->world_size;
    int64_t H = eng->cfg->hidden_dim, T = eng->cfg->tokens_per_step;
    int *counts = NULL, *displs = NULL;
    float *all = NULL;
    *out = NULL;
    moe_status_t st = moe_agree(eng->comm, engine_sync_x(eng, false, err), err);
    if (st != MOE_OK) {
        return st;
    }
    if (eng->rank == 0) {
        counts = calloc((size_t)W, sizeof(int));
        displs = calloc((size_t)W, sizeof(int));
        all = malloc((size_t)(T * H) * sizeof(float));
        if (counts == NULL || displs == NULL || all == NULL) {
            st = moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the output");
        }
        for (int r = 0; r < W && st == MOE_OK; r++) {
            int64_t first, count;
            moe_cfg_tokens_of_rank(eng->cfg, W, r, &first, &count);
            counts[r] = (int)count; /* in rows of H floats */
            displs[r] = (int)first;
        }
    }
    st = moe_agree(eng->comm, st, err);
    if (st == MOE_OK) {
        st = engine_gather_rows(eng, all, counts, displs, err);
    }
    free(counts);
    free(displs);
    if (st != MOE_OK) {
        free(all);
        return st;
    }
    *out = all;
    return MOE_OK;
}
