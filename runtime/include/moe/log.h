/* Logging: one macro family with levels. Informational lines come from rank 0 only;
 * warnings and errors from any rank carry a "[moed rank N]" prefix. The level is set by
 * MOED_LOG_LEVEL=error|warn|info|debug (default info). */
#ifndef MOE_LOG_H
#define MOE_LOG_H

typedef enum {
    MOE_LOG_LEVEL_ERROR = 0,
    MOE_LOG_LEVEL_WARN = 1,
    MOE_LOG_LEVEL_INFO = 2,
    MOE_LOG_LEVEL_DEBUG = 3,
} moe_log_level_t;

void moe_log_init(int rank, int world_size);
void moe_log_write(moe_log_level_t level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define MOE_ERROR(...) moe_log_write(MOE_LOG_LEVEL_ERROR, __FILE__, __LINE__, __VA_ARGS__)
#define MOE_WARN(...) moe_log_write(MOE_LOG_LEVEL_WARN, __FILE__, __LINE__, __VA_ARGS__)
/* Printed by rank 0 only. */
#define MOE_INFO(...) moe_log_write(MOE_LOG_LEVEL_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define MOE_DEBUG(...) moe_log_write(MOE_LOG_LEVEL_DEBUG, __FILE__, __LINE__, __VA_ARGS__)

#endif /* MOE_LOG_H */
