/* A short scheduler slice (moe/sched.h). */
#define _GNU_SOURCE
#include "moe/sched.h"

#include <sched.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The kernel's struct sched_attr, first version (48 bytes; glibc 2.36 has no wrapper). */
typedef struct sched_attr_v0 {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime, deadline, period;
} sched_attr_v0_t;

bool moe_sched_short_slice(void)
{
#ifdef SYS_sched_setattr
    sched_attr_v0_t a = {.size = sizeof(a), .policy = SCHED_OTHER,
                         .runtime = MOE_SCHED_WAIT_SLICE_NS};
    return syscall(SYS_sched_setattr, 0, &a, 0) == 0;
#else
    return false;
#endif
}

long long moe_sched_slice_ns(void)
{
#ifdef SYS_sched_getattr
    sched_attr_v0_t a = {.size = sizeof(a)};
    if (syscall(SYS_sched_getattr, 0, &a, (unsigned)sizeof(a), 0U) == 0) {
        return (long long)a.runtime;
    }
#endif
    return -1;
}
