/* Part base (runtime/src/base/): the base layer every part uses: status codes and
 * messages, logging, the monotonic clock, the FNV-1a hash, phase ids, limits, build id,
 * the stop flag and MOE_MPI (the one checked form of an MPI call). Public headers:
 * runtime/include/moe/. May include: no other part. One file of each part's folder opens
 * with such a comment; tests/lint/parts.sh holds every part to its list. */
#include "moe/status.h"

#include <stdio.h>
#include <string.h>

const char *moe_status_string(moe_status_t status)
{
    switch (status) {
#define MOE_STATUS_TEXT_(name, value, text) \
    case name:                              \
        return text;
        MOE_STATUS_MAP(MOE_STATUS_TEXT_)
#undef MOE_STATUS_TEXT_
    }
    return "unknown status";
}

const char *moe_status_name(moe_status_t status)
{
    switch (status) {
#define MOE_STATUS_NAME_(name, value, text) \
    case name:                              \
        return #name;
        MOE_STATUS_MAP(MOE_STATUS_NAME_)
#undef MOE_STATUS_NAME_
    }
    return "MOE_ERR_UNKNOWN";
}

moe_status_t moe_error_setv(moe_error_t *err, moe_status_t code, const char *fmt, va_list ap)
{
    if (err == NULL) {
        return code;
    }
    err->code = code;
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    /* One line whatever a file put in a name we quote: control characters become '?'. */
    for (char *c = err->msg; *c != '\0'; c++) {
        if ((unsigned char)*c < 0x20 || *c == 0x7f) {
            *c = '?';
        }
    }
    return code;
}

moe_status_t moe_error_set(moe_error_t *err, moe_status_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    moe_error_setv(err, code, fmt, ap);
    va_end(ap);
    return code;
}

void moe_error_clear(moe_error_t *err)
{
    if (err != NULL) {
        err->code = MOE_OK;
        err->msg[0] = '\0';
    }
}
