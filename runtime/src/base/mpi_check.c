/* base: MPI results as moe statuses (moe/mpi_check.h). The only base file that knows MPI. */
#include "moe/mpi_check.h"

#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "moe/log.h"

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash != NULL ? slash + 1 : path;
}

moe_status_t moe_mpi_check(int rc, const char *call, const char *file, int line,
                           moe_error_t *err)
{
    if (rc == MPI_SUCCESS) {
        return MOE_OK;
    }
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS || len == 0) {
        snprintf(text, sizeof(text), "MPI error code %d", rc);
    }
    /* The function's name: the call's text up to its argument list. */
    int name_len = (int)strcspn(call, "( ");
    if (err == NULL) {
        MOE_ERROR("%.*s failed (%s:%d): %s", name_len, call, base_name(file), line, text);
        return MOE_ERR_MPI;
    }
    return moe_error_set(err, MOE_ERR_MPI, "%.*s failed (%s:%d): %s", name_len, call,
                         base_name(file), line, text);
}
