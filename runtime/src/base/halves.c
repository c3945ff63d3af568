/* Two halves of a row loop on two threads (moe/halves.h). */
#define _GNU_SOURCE
#include "moe/halves.h"

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>

#include "moe/sched.h"

struct moe_halves {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t go, done; /* a job posted; the helper finished it */
    uint64_t posted, finished; /* job counters */
    bool quit, short_slice;
    cpu_set_t allowed;  /* the process's CPUs when the helper started */
    int away_from;      /* the CPU the helper is kept off (the caller's last), -1: none */
    moe_halves_fn fn;
    void *arg;
    int64_t lo, hi;
};

static void *helper_main(void *p)
{
    moe_halves_t *h = p;
    if (h->short_slice) {
        (void)moe_sched_short_slice();
    }
    uint64_t seen = 0;
    pthread_mutex_lock(&h->lock);
    for (;;) {
        while (h->posted == seen && !h->quit) {
            pthread_cond_wait(&h->go, &h->lock);
        }
        if (h->quit) {
            break;
        }
        seen = h->posted;
        moe_halves_fn fn = h->fn;
        void *arg = h->arg;
        int64_t lo = h->lo, hi = h->hi;
        pthread_mutex_unlock(&h->lock);
        fn(arg, lo, hi);
        pthread_mutex_lock(&h->lock);
        h->finished = seen;
        pthread_cond_signal(&h->done);
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

moe_status_t moe_halves_create(bool short_slice, moe_halves_t **out, moe_error_t *err)
{
    moe_halves_t *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot allocate the row helper");
    }
    h->short_slice = short_slice;
    h->away_from = -1;
    if (sched_getaffinity(0, sizeof(h->allowed), &h->allowed) != 0) {
        CPU_ZERO(&h->allowed);
    }
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->go, NULL);
    pthread_cond_init(&h->done, NULL);
    if (pthread_create(&h->thread, NULL, helper_main, h) != 0) {
        pthread_cond_destroy(&h->done);
        pthread_cond_destroy(&h->go);
        pthread_mutex_destroy(&h->lock);
        free(h);
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "cannot start the row helper thread");
    }
    *out = h;
    return MOE_OK;
}

/* Keep the helper off the caller's CPU, so the halves run on two cores (left to itself
 * the scheduler woke it now and then on the caller's). One syscall when the caller has
 * moved; nothing where the process has one CPU or the caller's is unknown. */
static void keep_apart(moe_halves_t *h)
{
    int cpu = sched_getcpu();
    if (cpu < 0 || cpu == h->away_from || CPU_COUNT(&h->allowed) < 2 ||
        !CPU_ISSET(cpu, &h->allowed)) {
        return;
    }
    cpu_set_t set = h->allowed;
    CPU_CLR(cpu, &set);
    if (pthread_setaffinity_np(h->thread, sizeof(set), &set) == 0) {
        h->away_from = cpu;
    }
}

void moe_halves_run(moe_halves_t *h, moe_halves_fn fn, void *arg, int64_t n, int64_t min_split)
{
    if (h == NULL || n < min_split || n < 2) {
        fn(arg, 0, n);
        return;
    }
    keep_apart(h);
    int64_t mid = n / 2;
    pthread_mutex_lock(&h->lock);
    h->fn = fn;
    h->arg = arg;
    h->lo = mid;
    h->hi = n;
    uint64_t job = ++h->posted;
    pthread_cond_signal(&h->go);
    pthread_mutex_unlock(&h->lock);
    fn(arg, 0, mid);
    pthread_mutex_lock(&h->lock);
    while (h->finished != job) {
        pthread_cond_wait(&h->done, &h->lock);
    }
    pthread_mutex_unlock(&h->lock);
}

void moe_halves_destroy(moe_halves_t *h)
{
    if (h == NULL) {
        return;
    }
    pthread_mutex_lock(&h->lock);
    h->quit = true;
    pthread_cond_signal(&h->go);
    pthread_mutex_unlock(&h->lock);
    pthread_join(h->thread, NULL);
    pthread_cond_destroy(&h->done);
    pthread_cond_destroy(&h->go);
    pthread_mutex_destroy(&h->lock);
    free(h);
}
