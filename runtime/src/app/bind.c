#define _GNU_SOURCE
#include "app/bind.h"

#include <dirent.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "moe/limits.h"
#include "moe/sched.h"

int moe_bind_slot(moe_bind_t mode, const bool *expert, int nlocal, int me, int ncpu, int threads,
                  bool full)
{
    int slots = threads > 0 ? ncpu / threads : 0;
    int nexpert = 0, order = -1;
    for (int i = 0; i < nlocal; i++) {
        nexpert += expert[i];
    }
    if (mode == MOE_BIND_NONE || slots < 1 || me < 0 || me >= nlocal) {
        return -1;
    }
    if (mode == MOE_BIND_AUTO &&
        (!full || (int64_t)nlocal * threads <= ncpu || nexpert > slots)) {
        return -1; /* not oversubscribed, someone else pinned, or pinning would not be fair */
    }
    if (mode == MOE_BIND_AUTO && !expert[me]) {
        return -1; /* a rank without experts may use every core: its row helper runs on a
                    * core whose expert rank waits for it (moe/halves.h) */
    }
    /* expert ranks first, then the others, each group in rank order */
    int k = 0;
    for (int pass = 0; pass < 2 && order < 0; pass++) {
        for (int i = 0; i < nlocal; i++) {
            if (expert[i] == (pass == 0)) {
                order = i == me ? k : order;
                k++;
            }
        }
    }
    return order % slots;
}

const char *moe_bind_node_name(moe_bind_t mode, const bool *expert, int nlocal, int ncpu,
                               int threads, bool full)
{
    int pinned = 0;
    for (int i = 0; i < nlocal; i++) {
        pinned += moe_bind_slot(mode, expert, nlocal, i, ncpu, threads, full) >= 0;
    }
    return pinned == 0 ? "none" : pinned == nlocal ? "core" : "experts";
}

int moe_bind_cpus_allowed(void)
{
    cpu_set_t allowed;
    return sched_getaffinity(0, sizeof(allowed), &allowed) == 0 ? CPU_COUNT(&allowed) : -1;
}

/* Move every thread of this process onto `set` (threads created later inherit it from the
 * main thread). False if the main thread could not be moved. */
static bool pin_all_threads(const cpu_set_t *set)
{
    if (sched_setaffinity(0, sizeof(*set), set) != 0) {
        return false;
    }
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        pid_t tid = (pid_t)strtol(e->d_name, NULL, 10);
        if (tid > 0) {
            (void)sched_setaffinity(tid, sizeof(*set), set); /* a thread just gone: fine */
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    return true;
}

/* The node's ranks (same host as this one) and whether each hosts experts. */
static int local_ranks(const moe_config_t *cfg, int rank, int world, const char (*hosts)[64],
                       bool *expert, int *me)
{
    int32_t *ids = malloc(sizeof(int32_t) * MOE_MAX_EXPERTS);
    int n = 0;
    for (int r = 0; r < world && ids != NULL; r++) {
        if (strncmp(hosts[r], hosts[rank], 64) == 0) {
            *me = r == rank ? n : *me;
            expert[n++] = moe_cfg_experts_of_rank(cfg, r, ids) > 0;
        }
    }
    free(ids);
    return n;
}

bool moe_bind_shares_cores(int nlocal, int threads, long online)
{
    return online <= 0 || (int64_t)nlocal * (int64_t)(threads > 0 ? threads : 1) > online;
}

void moe_bind_own_mask(moe_cpu_mask_t *m)
{
    cpu_set_t set;
    memset(m, 0, sizeof(*m));
    if (sched_getaffinity(0, sizeof(set), &set) != 0) {
        return;
    }
    for (int c = 0; c < CPU_SETSIZE && c < 64 * MOE_BIND_MASK_WORDS; c++) {
        m->w[c / 64] |= CPU_ISSET(c, &set) ? 1ULL << (c % 64) : 0;
    }
}

int moe_bind_node_cpus(const moe_cpu_mask_t *masks, const char (*hosts)[64], int rank,
                       int world)
{
    int n = 0;
    for (int i = 0; i < MOE_BIND_MASK_WORDS; i++) {
        uint64_t any = 0;
        for (int r = 0; r < world; r++) {
            any |= strncmp(hosts[r], hosts[rank], 64) == 0 ? masks[r].w[i] : 0;
        }
        n += __builtin_popcountll(any);
    }
    return n;
}

bool moe_bind_node_shares_cores(const moe_config_t *cfg, int rank, int world,
                                const char (*hosts)[64], const moe_cpu_mask_t *masks)
{
    bool *expert = hosts != NULL ? calloc((size_t)world, sizeof(bool)) : NULL;
    int me = -1, nlocal = expert != NULL ? local_ranks(cfg, rank, world, hosts, expert, &me) : 0;
    free(expert);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int mine = masks != NULL && hosts != NULL ? moe_bind_node_cpus(masks, hosts, rank, world) : 0;
    cpus = mine > 0 && (cpus <= 0 || mine < cpus) ? mine : cpus;
    /* not known: yield, as a shared core needs */
    return nlocal <= 0 || moe_bind_shares_cores(nlocal, (int)cfg->threads, cpus);
}

const char *moe_bind_apply(const moe_config_t *cfg, int rank, int world,
                           const char (*hosts)[64], int *pinned_cpu, char *desc,
                           size_t desc_len)
{
    *pinned_cpu = -1;
    desc[0] = '\0';
    cpu_set_t allowed;
    bool *expert = calloc((size_t)world, sizeof(bool));
    int me = -1, nlocal = 0;
    if (expert == NULL || hosts == NULL || cfg->bind == MOE_BIND_NONE ||
        sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
        free(expert);
        return "none";
    }
    nlocal = local_ranks(cfg, rank, world, hosts, expert, &me);
    int ncpu = CPU_COUNT(&allowed);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int slot = moe_bind_slot(cfg->bind, expert, nlocal, me, ncpu, (int)cfg->threads,
                             online > 0 && ncpu == online);
    int first_expert = -1; /* a local rank hosting experts */
    for (int i = 0; i < nlocal && first_expert < 0; i++) {
        first_expert = expert[i] ? i : -1;
    }
    const char *node = moe_bind_node_name(cfg->bind, expert, nlocal, ncpu, (int)cfg->threads,
                                          online > 0 && ncpu == online);
    bool waits = me >= 0 && !expert[me] && first_expert >= 0; /* the master of this node */
    if (waits) {
        (void)moe_sched_short_slice(); /* an older kernel or a refusal: it waits as before */
    }
    if (slot < 0 && waits &&
        moe_bind_slot(cfg->bind, expert, nlocal, first_expert, ncpu, (int)cfg->threads,
                      online > 0 && ncpu == online) >= 0) {
        snprintf(desc, desc_len, "%d ranks on %d CPUs here, the expert ranks pinned, this one "
                 "on all (runtime.bind auto)", nlocal, ncpu);
    }
    free(expert);
    if (slot < 0) {
        return node;
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    int first = -1, seen = 0;
    for (int c = 0; c < CPU_SETSIZE && seen < (slot + 1) * (int)cfg->threads; c++) {
        if (CPU_ISSET(c, &allowed)) {
            if (seen >= slot * (int)cfg->threads) {
                CPU_SET(c, &set);
                first = first < 0 ? c : first;
            }
            seen++;
        }
    }
    if (first >= 0 && pin_all_threads(&set)) {
        *pinned_cpu = first;
        snprintf(desc, desc_len, "%d ranks on %d CPUs here, pinned (runtime.bind %s)", nlocal,
                 ncpu, cfg->bind == MOE_BIND_CORE ? "core" : "auto");
        return node;
    }
    return "none"; /* the rule pinned this rank, the system refused: nothing was */
}
