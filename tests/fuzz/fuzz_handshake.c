/* libFuzzer target: the start-up hello (proto/include/moe_proto/handshake.h), decoded from
 * arbitrary bytes and checked against a well-formed hello, as rank 0 does with every rank's.
 *
 * Properties:
 *  - a rejected hello leaves *out untouched and fills err with one NUL-terminated line
 *    starting with "start-up hello";
 *  - an accepted hello has NUL-terminated build id and host; it re-encodes to 136 bytes
 *    that decode to the same hello (every field; strings compared up to their NUL, which
 *    is all moe_hello_check and the messages read), and encoding that gives the same
 *    bytes again;
 *  - moe_hello_check never crashes: a hello matches itself; against a well-formed
 *    reference (and as the reference) it either succeeds with equal version, build,
 *    config hash and world size, or fails with MOE_ERR_PEER and one line naming a rank.
 *
 * An input longer than one hello also checks its second 136 bytes against its first, so
 * two fuzzed hellos meet in moe_hello_check. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fuzz_common.h"
#include "moe_proto/handshake.h"

static void check_strings(const moe_hello_t *h)
{
    FUZZ_CHECK(memchr(h->build_id, '\0', sizeof(h->build_id)) != NULL,
               "build_id not NUL-terminated");
    FUZZ_CHECK(memchr(h->host, '\0', sizeof(h->host)) != NULL, "host not NUL-terminated");
}

static void check_same(const moe_hello_t *a, const moe_hello_t *b)
{
    FUZZ_CHECK(a->protocol_version == b->protocol_version, "re-decode: version %u vs %u",
               (unsigned)a->protocol_version, (unsigned)b->protocol_version);
    FUZZ_CHECK(strcmp(a->build_id, b->build_id) == 0, "re-decode: build_id '%s' vs '%s'",
               a->build_id, b->build_id);
    FUZZ_CHECK(a->config_hash == b->config_hash, "re-decode: config_hash differs");
    FUZZ_CHECK(strcmp(a->host, b->host) == 0, "re-decode: host '%s' vs '%s'", a->host, b->host);
    FUZZ_CHECK(a->rank == b->rank, "re-decode: rank %d vs %d", (int)a->rank, (int)b->rank);
    FUZZ_CHECK(a->world_size == b->world_size, "re-decode: world_size %d vs %d",
               (int)a->world_size, (int)b->world_size);
}

/* check(ref, other): either a match on every field it compares, or one line naming a rank. */
static void check_pair(const moe_hello_t *ref, const moe_hello_t *other)
{
    moe_error_t err;
    memset(&err, 0x5a, sizeof(err));
    moe_status_t st = moe_hello_check(ref, other, &err);
    if (st == MOE_OK) {
        FUZZ_CHECK(ref->protocol_version == other->protocol_version &&
                       strcmp(ref->build_id, other->build_id) == 0 &&
                       ref->config_hash == other->config_hash &&
                       ref->world_size == other->world_size,
                   "check accepted hellos that differ");
        return;
    }
    FUZZ_CHECK(st == MOE_ERR_PEER, "check failed with status %d, not MOE_ERR_PEER", (int)st);
    fuzz_check_error(&err, st, "rank ", 1);
}

static void decode_ok(const uint8_t *data, size_t size, moe_hello_t *out)
{
    moe_error_t err;
    memset(&err, 0x5a, sizeof(err));
    moe_status_t st = moe_hello_decode(data, size, out, &err);
    FUZZ_CHECK(st == MOE_OK, "an encoded hello does not decode: %s", err.msg);
}

/* Returns true when the bytes decode; *out is then the hello. */
static bool one_hello(const uint8_t *data, size_t size, moe_hello_t *out)
{
    moe_hello_t h;
    moe_error_t err;
    memset(&h, 0xa5, sizeof(h));
    memset(&err, 0x5a, sizeof(err));
    moe_status_t st = moe_hello_decode(data, size, &h, &err);
    if (st != MOE_OK) {
        const unsigned char *p = (const unsigned char *)&h;
        for (size_t i = 0; i < sizeof(h); i++) {
            FUZZ_CHECK(p[i] == 0xa5, "rejected hello (status %d) wrote to *out", (int)st);
        }
        FUZZ_CHECK(st == MOE_ERR_FORMAT || st == MOE_ERR_TRUNCATED, "decode status %d",
                   (int)st);
        fuzz_check_error(&err, st, "start-up hello", 1);
        return false;
    }
    check_strings(&h);

    uint8_t b1[MOE_HELLO_SIZE], b2[MOE_HELLO_SIZE];
    moe_hello_t h2;
    moe_hello_encode(&h, b1);
    decode_ok(b1, sizeof(b1), &h2);
    check_strings(&h2);
    check_same(&h, &h2);
    moe_hello_encode(&h2, b2);
    FUZZ_CHECK(memcmp(b1, b2, sizeof(b1)) == 0, "encode(decode(encode(h))) differs from encode(h)");

    moe_hello_t ref;
    memset(&ref, 0, sizeof(ref));
    ref.protocol_version = MOE_PROTOCOL_VERSION;
    memcpy(ref.build_id, "0.3.0-fuzz", sizeof("0.3.0-fuzz"));
    ref.config_hash = 0x0123456789abcdefULL;
    memcpy(ref.host, "node0", sizeof("node0"));
    ref.world_size = 3;
    check_pair(&h, &h);
    check_pair(&ref, &h);
    check_pair(&h, &ref);
    *out = h;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    moe_hello_t first, second;
    bool ok1 = one_hello(data, size, &first);
    if (size > MOE_HELLO_SIZE) {
        bool ok2 = one_hello(data + MOE_HELLO_SIZE, size - MOE_HELLO_SIZE, &second);
        if (ok1 && ok2) {
            check_pair(&first, &second);
        }
    }
    return 0;
}
