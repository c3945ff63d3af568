#include "moe_proto/handshake.h"

#include <string.h>

#include "moe_proto/wire.h"

void moe_hello_encode(const moe_hello_t *h, uint8_t out[MOE_HELLO_SIZE])
{
    moe_wbuf_t w;
    moe_wbuf_init(&w);
    moe_wbuf_bytes(&w, "MOEH", 4);
    moe_wbuf_u16(&w, h->protocol_version);
    moe_wbuf_u16(&w, 0);
    char build[48] = {0}, host[64] = {0};
    memcpy(build, h->build_id, strnlen(h->build_id, sizeof(build) - 1));
    memcpy(host, h->host, strnlen(h->host, sizeof(host) - 1));
    moe_wbuf_bytes(&w, build, sizeof(build));
    moe_wbuf_u64(&w, h->config_hash);
    moe_wbuf_bytes(&w, host, sizeof(host));
    moe_wbuf_u32(&w, (uint32_t)h->rank);
    moe_wbuf_u32(&w, (uint32_t)h->world_size);
    memset(out, 0, MOE_HELLO_SIZE);
    if (w.ok && w.len == MOE_HELLO_SIZE) {
        memcpy(out, w.data, MOE_HELLO_SIZE);
    }
    moe_wbuf_free(&w);
}

moe_status_t moe_hello_decode(const uint8_t *in, size_t len, moe_hello_t *out, moe_error_t *err)
{
    if (len < MOE_HELLO_SIZE) {
        return moe_error_set(err, MOE_ERR_TRUNCATED, "start-up hello of %zu bytes, expected %d",
                             len, MOE_HELLO_SIZE);
    }
    moe_rbuf_t r;
    moe_rbuf_init(&r, in, len);
    char magic[4];
    moe_rbuf_bytes(&r, magic, 4);
    if (memcmp(magic, "MOEH", 4) != 0) {
        return moe_error_set(err, MOE_ERR_FORMAT,
                             "start-up hello has a bad magic: the peer is not moed");
    }
    memset(out, 0, sizeof(*out));
    out->protocol_version = moe_rbuf_u16(&r);
    moe_rbuf_u16(&r);
    moe_rbuf_bytes(&r, out->build_id, sizeof(out->build_id));
    out->build_id[sizeof(out->build_id) - 1] = '\0';
    out->config_hash = moe_rbuf_u64(&r);
    moe_rbuf_bytes(&r, out->host, sizeof(out->host));
    out->host[sizeof(out->host) - 1] = '\0';
    out->rank = (int32_t)moe_rbuf_u32(&r);
    out->world_size = (int32_t)moe_rbuf_u32(&r);
    return r.ok ? MOE_OK : moe_error_set(err, MOE_ERR_TRUNCATED, "start-up hello cut short");
}

moe_status_t moe_hello_check(const moe_hello_t *ref, const moe_hello_t *other, moe_error_t *err)
{
    if (other->protocol_version != ref->protocol_version) {
        return moe_error_set(err, MOE_ERR_PEER,
                             "rank %d (host %s) speaks moed protocol %u but rank 0 (host %s) "
                             "speaks %u: install the same moed build on every node",
                             other->rank, other->host, other->protocol_version, ref->host,
                             ref->protocol_version);
    }
    if (strcmp(other->build_id, ref->build_id) != 0) {
        return moe_error_set(err, MOE_ERR_PEER,
                             "rank %d (host %s) runs moed build %s but rank 0 (host %s) runs "
                             "build %s: install the same moed build on every node",
                             other->rank, other->host, other->build_id, ref->host,
                             ref->build_id);
    }
    if (other->config_hash != ref->config_hash) {
        return moe_error_set(err, MOE_ERR_PEER,
                             "rank %d (host %s) received a config with hash %016llx but rank 0 "
                             "(host %s) sent %016llx: the config broadcast was corrupted",
                             other->rank, other->host, (unsigned long long)other->config_hash,
                             ref->host, (unsigned long long)ref->config_hash);
    }
    if (other->world_size != ref->world_size) {
        return moe_error_set(err, MOE_ERR_PEER,
                             "rank %d (host %s) sees %d ranks but rank 0 sees %d: the ranks "
                             "were not started as one MPI job",
                             other->rank, other->host, other->world_size, ref->world_size);
    }
    return MOE_OK;
}
