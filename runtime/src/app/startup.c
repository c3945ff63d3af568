#include "app/startup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/engine.h"
#include "moe_config/config.h"
#include "moe/build_info.h"
#include "moe_proto/handshake.h"
#include "moe/mpi_check.h"
#include "moe/testctl.h"
#include "transport/wait.h"

moe_status_t moe_startup_config_text(MPI_Comm comm, const char *path, char **text, size_t *len,
                                     moe_error_t *err)
{
    int rank = 0;
    moe_status_t st = MOE_MPI(MPI_Comm_rank(comm, &rank), err);
    if (st != MOE_OK) {
        return st;
    }
    long long n = -1;
    char *buf = NULL;
    if (rank == 0) {
        st = moe_cfg_read_file(path, &buf, len, err);
        n = st == MOE_OK ? (long long)*len : -1;
    }
    moe_status_t mst = moe_wait_bcast(&n, 1, MPI_LONG_LONG, 0, comm, "the config broadcast",
                                      st == MOE_OK ? err : NULL);
    if (mst != MOE_OK) {
        free(buf);
        return st != MOE_OK ? st : mst;
    }
    if (n < 0) {
        free(buf);
        return moe_agree(comm, rank == 0 ? st : MOE_OK, err);
    }
    if (rank != 0) {
        buf = malloc((size_t)n + 1);
        st = buf != NULL ? MOE_OK : moe_error_set(err, MOE_ERR_NO_MEMORY, "no memory for the config");
    }
    st = moe_agree(comm, st, err);
    if (st != MOE_OK) {
        free(buf);
        return st;
    }
    st = moe_wait_bcast(buf, (int)n, MPI_CHAR, 0, comm, "the config broadcast", err);
    if (st != MOE_OK) {
        free(buf);
        return st;
    }
    buf[n] = '\0';
    *text = buf;
    *len = (size_t)n;
    return MOE_OK;
}

static moe_status_t hello_of_this_rank(MPI_Comm comm, uint64_t config_hash, moe_hello_t *h,
                                       moe_error_t *err)
{
    memset(h, 0, sizeof(*h));
    h->protocol_version = MOE_PROTOCOL_VERSION;
    const char *fake = moe_testctl_build_id(); /* MOE_TESTCTL_BUILD_ID */
    snprintf(h->build_id, sizeof(h->build_id), "%s", fake != NULL ? fake : moe_build_id());
    h->config_hash = config_hash;
    if (gethostname(h->host, sizeof(h->host) - 1) != 0) {
        snprintf(h->host, sizeof(h->host), "unknown");
    }
    moe_status_t st = MOE_MPI(MPI_Comm_rank(comm, &h->rank), err);
    return st == MOE_OK ? MOE_MPI(MPI_Comm_size(comm, &h->world_size), err) : st;
}

moe_status_t moe_startup_handshake(MPI_Comm comm, uint64_t config_hash, moe_error_t *err)
{
    moe_hello_t mine, ref, other;
    moe_status_t st = hello_of_this_rank(comm, config_hash, &mine, err);
    if (st != MOE_OK) {
        return st; /* without its rank this rank cannot take part in the agreement */
    }
    uint8_t bytes[MOE_HELLO_SIZE];
    moe_hello_encode(&mine, bytes);
    uint8_t *all = NULL;
    if (mine.rank == 0) {
        all = malloc((size_t)mine.world_size * MOE_HELLO_SIZE);
        st = all != NULL ? MOE_OK : moe_error_set(err, MOE_ERR_NO_MEMORY, "no memory for the handshake");
    }
    st = moe_agree(comm, st, err);
    if (st != MOE_OK) {
        return st;
    }
    MPI_Request req;
    st = MOE_MPI(MPI_Igather(bytes, MOE_HELLO_SIZE, MPI_BYTE, all, MOE_HELLO_SIZE, MPI_BYTE, 0,
                             comm, &req),
                 err);
    if (st == MOE_OK) {
        st = moe_wait_request(&req, "the start-up handshake", err);
    }
    if (st == MOE_OK && mine.rank == 0) {
        st = moe_hello_decode(all, MOE_HELLO_SIZE, &ref, err);
        for (int r = 1; r < mine.world_size && st == MOE_OK; r++) {
            st = moe_hello_decode(all + (size_t)r * MOE_HELLO_SIZE, MOE_HELLO_SIZE, &other, err);
            if (st == MOE_OK) {
                st = moe_hello_check(&ref, &other, err);
            }
        }
    }
    free(all);
    /* rank 0 decided; everyone returns its verdict */
    return moe_agree(comm, st, err);
}
