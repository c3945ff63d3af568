/* libFuzzer target: the profile record decoder (proto/include/moe_proto/prof_record.h).
 *
 * Built as is, the input is decoded as received, so the header checks (magic, versions,
 * header size, payload length, FNV-1a checksum) are what gets fuzzed. Built with
 * FUZZ_PATCH_CHECKSUM (fuzz_prof_record_nosum.c), a copy of the input gets a payload
 * length and checksum that match its bytes before decoding, so the section parser behind
 * the checksum is fuzzed too.
 *
 * Properties:
 *  - a rejected record leaves *rec empty (every array NULL) and a NUL-terminated,
 *    one-line message;
 *  - an accepted record re-encodes, the re-encoding decodes, the two decodes agree (rank,
 *    world, window, dims, flags, host, list counts, arrays), and encoding the second
 *    decode gives the same bytes again (decode . encode is the identity). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "moe_config/config.h"
#include "moe_proto/prof_record.h"
#include "moe_proto/wire.h"

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

static bool rec_is_empty(const moe_prof_record_t *r)
{
    static const moe_prof_record_t zero;
    return memcmp(r, &zero, sizeof(zero)) == 0;
}

#define SAME_SCALAR(f)                                                                  \
    FUZZ_CHECK(a->f == b->f, "re-decode: " #f " %lld vs %lld", (long long)a->f,         \
               (long long)b->f)
#define SAME_ARRAY(f, n)                                                                \
    FUZZ_CHECK((n) == 0 || memcmp(a->f, b->f, sizeof(a->f[0]) * (size_t)(n)) == 0,      \
               "re-decode: " #f " differs")

static void check_same(const moe_prof_record_t *a, const moe_prof_record_t *b)
{
    SAME_SCALAR(version);
    SAME_SCALAR(flags);
    SAME_SCALAR(rank);
    SAME_SCALAR(world_size);
    SAME_SCALAR(window);
    SAME_SCALAR(num_layers);
    SAME_SCALAR(num_experts);
    SAME_SCALAR(num_local);
    SAME_SCALAR(steps_recorded);
    SAME_SCALAR(num_steps);
    SAME_SCALAR(num_exchanges);
    SAME_SCALAR(num_metrics);
    SAME_SCALAR(metrics_dropped);
    SAME_SCALAR(num_events);
    SAME_SCALAR(events_dropped);
    SAME_SCALAR(num_mem);
    SAME_SCALAR(exchange_ns);
    SAME_SCALAR(hidden_ns);
    SAME_SCALAR(chunks);
    FUZZ_CHECK(memcmp(a->device, b->device, sizeof(a->device)) == 0, "re-decode: device differs");
    FUZZ_CHECK(memcmp(a->host, b->host, sizeof(a->host)) == 0, "re-decode: host differs");
    FUZZ_CHECK(memchr(a->host, '\0', sizeof(a->host)) != NULL, "host not NUL-terminated");
    size_t ll = (size_t)a->num_layers * (size_t)a->num_local;
    size_t le = (size_t)a->num_layers * (size_t)a->num_experts;
    SAME_ARRAY(local_ids, a->num_local);
    SAME_ARRAY(slot_ids, ll);
    for (size_t i = 0; i < ll; i++) {
        /* field by field: the struct has no padding today, but memcmp must not rely on it */
        FUZZ_CHECK(a->experts[i].tokens == b->experts[i].tokens &&
                       a->experts[i].calls == b->experts[i].calls &&
                       a->experts[i].hist.count == b->experts[i].hist.count &&
                       a->experts[i].hist.min == b->experts[i].hist.min &&
                       a->experts[i].hist.max == b->experts[i].hist.max &&
                       memcmp(&a->experts[i].hist.sum, &b->experts[i].hist.sum,
                              sizeof(double)) == 0 &&
                       memcmp(a->experts[i].hist.buckets, b->experts[i].hist.buckets,
                              sizeof(a->experts[i].hist.buckets)) == 0,
                   "re-decode: expert %zu differs", i);
    }
    SAME_ARRAY(demand, le);
    SAME_ARRAY(kept, le);
    SAME_ARRAY(dropped, le);
    SAME_ARRAY(bytes_sent, a->world_size);
    SAME_ARRAY(msgs_recv, a->world_size);
    SAME_ARRAY(wait_ns, a->world_size);
    SAME_ARRAY(steps, a->num_steps);
    SAME_ARRAY(exchanges, a->num_exchanges); /* pad_ is zero: calloc'd, never decoded */
    SAME_ARRAY(metrics, a->num_metrics);
    SAME_ARRAY(events, a->num_events);
    SAME_ARRAY(mem, a->num_mem);
}

static void check_decoded(const moe_prof_record_t *rec)
{
    FUZZ_CHECK(rec->world_size >= 1 && rec->world_size <= MOE_MAX_RANKS, "world %d",
               rec->world_size);
    FUZZ_CHECK(rec->rank >= 0 && rec->rank < rec->world_size, "rank %d of %d", rec->rank,
               rec->world_size);
    FUZZ_CHECK(rec->num_local >= 0 && rec->num_local <= rec->num_experts, "num_local %d of %d",
               rec->num_local, rec->num_experts);
    for (int i = 0; i < rec->num_local; i++) {
        FUZZ_CHECK(rec->local_ids[i] >= 0 && rec->local_ids[i] < rec->num_experts,
                   "local id %d", rec->local_ids[i]);
    }
    for (int i = 0; i < rec->num_layers * rec->num_local; i++) {
        FUZZ_CHECK(rec->slot_ids[i] >= -1 && rec->slot_ids[i] < rec->num_experts, "slot id %d",
                   rec->slot_ids[i]);
    }
    for (int64_t i = 0; i < rec->num_metrics; i++) {
        FUZZ_CHECK(rec->metrics[i].layer >= 0 && rec->metrics[i].layer < rec->num_layers &&
                       rec->metrics[i].local >= 0 && rec->metrics[i].local < rec->num_local,
                   "metric %lld names layer %d local %d", (long long)i, rec->metrics[i].layer,
                   rec->metrics[i].local);
    }
    FUZZ_CHECK(rec->num_steps >= 0 && rec->num_exchanges >= 0 && rec->num_metrics >= 0 &&
                   rec->num_events >= 0 && rec->num_mem >= 0,
               "negative list count");
}

static void encode(const moe_prof_record_t *rec, moe_wbuf_t *w)
{
    moe_wbuf_init(w);
    moe_prof_record_encode(rec, w);
    FUZZ_CHECK(w->ok, "encode ran out of memory");
    FUZZ_CHECK(w->len >= MOE_PROF_HEADER_SIZE, "encoding of %zu bytes", w->len);
}

static void one_input(const uint8_t *data, size_t size)
{
    moe_prof_record_t rec, rec2;
    moe_error_t err;
    memset(&err, 0x5a, sizeof(err));
    moe_status_t st = moe_prof_record_decode(data, size, &rec, &err);
    if (st != MOE_OK) {
        FUZZ_CHECK(rec_is_empty(&rec), "rejected record (status %d) left data in *rec",
                   (int)st);
        fuzz_check_error(&err, st, "", 1);
        return;
    }
    check_decoded(&rec);

    moe_wbuf_t w1, w2;
    encode(&rec, &w1);
    memset(&err, 0x5a, sizeof(err));
    st = moe_prof_record_decode(w1.data, w1.len, &rec2, &err);
    FUZZ_CHECK(st == MOE_OK, "a decoded record re-encodes to %zu bytes that do not decode: %s",
               w1.len, err.msg);
    check_same(&rec, &rec2);
    encode(&rec2, &w2);
    FUZZ_CHECK(w1.len == w2.len && memcmp(w1.data, w2.data, w1.len) == 0,
               "encode(decode(encode(rec))) differs from encode(rec) (%zu vs %zu bytes)",
               w1.len, w2.len);
    moe_wbuf_free(&w1);
    moe_wbuf_free(&w2);
    moe_prof_record_free(&rec2);
    moe_prof_record_free(&rec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
#ifdef FUZZ_PATCH_CHECKSUM
    /* bytes 16..23: payload length, 24..31: FNV-1a-64 of bytes 32..end */
    if (size >= MOE_PROF_HEADER_SIZE) {
        uint8_t *copy = malloc(size);
        FUZZ_CHECK(copy != NULL, "out of memory");
        memcpy(copy, data, size);
        put_le64(copy + 16, (uint64_t)(size - MOE_PROF_HEADER_SIZE));
        put_le64(copy + 24,
                 moe_hash64(copy + MOE_PROF_HEADER_SIZE, size - MOE_PROF_HEADER_SIZE));
        one_input(copy, size);
        free(copy);
        return 0;
    }
#else
    (void)put_le64;
#endif
    one_input(data, size);
    return 0;
}
