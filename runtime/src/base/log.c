#include "moe/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank = 0;
static int g_world = 1;
static moe_log_level_t g_level = MOE_LOG_LEVEL_INFO;

void moe_log_init(int rank, int world_size)
{
    g_rank = rank;
    g_world = world_size;
    const char *env = getenv("MOED_LOG_LEVEL");
    if (env == NULL) {
        return;
    }
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++) {
        if (strcmp(env, names[i]) == 0) {
            g_level = (moe_log_level_t)i;
        }
    }
}

void moe_log_write(moe_log_level_t level, const char *file, int line, const char *fmt, ...)
{
    if (level > g_level || (level == MOE_LOG_LEVEL_INFO && g_rank != 0)) {
        return;
    }
    /* One fprintf per line so lines from different ranks do not interleave mid-line. */
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    switch (level) {
    case MOE_LOG_LEVEL_ERROR:
        /* Rank 0 reports the errors of the job; other ranks only what they alone see. */
        if (g_world > 1 && g_rank != 0) {
            fprintf(stderr, "moed: error (rank %d): %s\n", g_rank, msg);
        } else {
            fprintf(stderr, "moed: error: %s\n", msg);
        }
        break;
    case MOE_LOG_LEVEL_WARN:
        fprintf(stderr, "moed: warning (rank %d): %s\n", g_rank, msg);
        break;
    case MOE_LOG_LEVEL_INFO:
        fprintf(stdout, "%s\n", msg);
        fflush(stdout);
        break;
    case MOE_LOG_LEVEL_DEBUG:
        fprintf(stderr, "moed: debug (rank %d) %s:%d: %s\n", g_rank, file, line, msg);
        break;
    }
}
