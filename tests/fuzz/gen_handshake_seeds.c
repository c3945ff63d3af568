/* Writes the seed corpus of the handshake fuzz target: hellos made by moe_hello_encode, so
 * the seeds follow the layout of this build, and the ways a hello goes wrong. Rerun it
 * when the hello layout changes (README.md):
 *
 *   cc -std=c11 -D_POSIX_C_SOURCE=200809L -Iruntime/include -Iproto/include -Itests/fuzz \
 *      tests/fuzz/gen_handshake_seeds.c runtime/src/base/status.c proto/src/handshake.c \
 *      proto/src/wire.c -o /tmp/gen_handshake_seeds
 *   /tmp/gen_handshake_seeds tests/fuzz/corpus/handshake
 *
 * Not built by CMake or run_fuzz.sh. Files named regress_* in the corpus are fuzzer finds,
 * not written here. */
#include <stdio.h>
#include <string.h>

#include "moe_proto/handshake.h"

#include "seed_file.h"

static moe_hello_t hello(int rank, const char *build, const char *host)
{
    moe_hello_t h;
    memset(&h, 0, sizeof(h));
    h.protocol_version = MOE_PROTOCOL_VERSION;
    snprintf(h.build_id, sizeof(h.build_id), "%s", build);
    h.config_hash = 0x9e3779b97f4a7c15ULL;
    snprintf(h.host, sizeof(h.host), "%s", host);
    h.rank = rank;
    h.world_size = 3;
    return h;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : ".";
    uint8_t b[2 * MOE_HELLO_SIZE];
    int bad = 0;

    moe_hello_t h0 = hello(0, "0.3.0-1a2b3c4d", "node0");
    moe_hello_t h1 = hello(1, "0.3.0-1a2b3c4d", "node1.cluster.example");
    moe_hello_encode(&h1, b);
    bad |= write_file(dir, "valid_rank1", b, MOE_HELLO_SIZE);
    /* the longest strings the fields hold (47 and 63 characters) */
    moe_hello_t full = hello(2, "0.3.0-0123456789abcdef0123456789abcdef012345678",
                             "a-very-long-host-name-that-fills-the-whole-field-0123456789abcde");
    moe_hello_encode(&full, b);
    bad |= write_file(dir, "valid_full_strings", b, MOE_HELLO_SIZE);
    /* two hellos back to back: the target checks the second against the first */
    moe_hello_encode(&h0, b);
    moe_hello_encode(&h1, b + MOE_HELLO_SIZE);
    bad |= write_file(dir, "valid_pair", b, 2 * MOE_HELLO_SIZE);
    moe_hello_t other = hello(1, "0.2.9-ffffffff", "node1");
    moe_hello_encode(&other, b + MOE_HELLO_SIZE);
    bad |= write_file(dir, "pair_other_build", b, 2 * MOE_HELLO_SIZE);

    moe_hello_encode(&h1, b);
    bad |= write_file(dir, "bad_truncated_135", b, MOE_HELLO_SIZE - 1);
    bad |= write_file(dir, "bad_truncated_magic", b, 6);
    memcpy(b, "MOEX", 4);
    bad |= write_file(dir, "bad_magic", b, MOE_HELLO_SIZE);
    moe_hello_t v2 = h1;
    v2.protocol_version = MOE_PROTOCOL_VERSION + 1;
    moe_hello_encode(&h0, b);
    moe_hello_encode(&v2, b + MOE_HELLO_SIZE);
    bad |= write_file(dir, "pair_wrong_version", b, 2 * MOE_HELLO_SIZE);
    return bad;
}
