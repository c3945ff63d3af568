#include "moe_proto/prof_record.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "moe/hash.h"
#include "moe/limits.h"

/* The record stores one slot per phase, in moe/phase.h order: a change there changes bytes
 * on the wire, so it must come with a new record version. */
static_assert(MOE_PHASE_COUNT == 6 && MOE_PHASE_GATE == 0 && MOE_PHASE_MERGE == 4 &&
                  MOE_PHASE_STEP == 5,
              "the profile record carries 6 phase slots: gate dispatch expert combine merge step");

enum {
    SEC_IDENT = 1,
    SEC_STATIC = 2,
    SEC_PHASES = 3,
    SEC_EXPERTS = 4,
    SEC_ROUTING = 5,
    SEC_COMM = 6,
    SEC_STEPS = 7,
    SEC_EXCHANGES = 8,
    SEC_METRICS = 9,
    SEC_EVENTS = 10,
    SEC_MEMORY = 11,
    SEC_OVERLAP = 12, /* version 2 */
    SEC_SHARED = 13,  /* version 2, added later: written before OVERLAP */
    SEC_CPU = 14,     /* version 2, added later: written before OVERLAP */
    SEC_SLOTS = 15,   /* version 2, added later: written before OVERLAP */
    SEC_LAYERS = 16,  /* version 2, added later: written before OVERLAP */
    SEC_ROWS = 17,    /* version 2, added later: written before OVERLAP */
    SEC_LAST = SEC_ROWS,
};

/* Bounds a decoder accepts, beyond which a record is rejected as corrupt. */
#define MAX_LAYERS 4096
#define MAX_CHUNKS 4096

moe_status_t moe_prof_record_alloc(moe_prof_record_t *rec, int world_size, int num_layers,
                                   int num_experts, int num_local)
{
    memset(rec, 0, sizeof(*rec));
    rec->version = MOE_PROF_VERSION;
    rec->world_size = world_size;
    rec->num_layers = num_layers;
    rec->num_experts = num_experts;
    rec->num_local = num_local;
    size_t le = (size_t)num_layers * (size_t)num_experts;
    size_t ll = (size_t)num_layers * (size_t)num_local;
    size_t W = (size_t)world_size;
    rec->local_ids = calloc(num_local > 0 ? (size_t)num_local : 1, sizeof(int32_t));
    rec->experts = calloc(ll > 0 ? ll : 1, sizeof(moe_rec_expert_t));
    rec->slot_ids = malloc((ll > 0 ? ll : 1) * sizeof(int32_t));
    for (size_t i = 0; rec->slot_ids != NULL && i < ll; i++) {
        rec->slot_ids[i] = -1;
    }
    rec->demand = calloc(le > 0 ? le : 1, sizeof(uint64_t));
    rec->kept = calloc(le > 0 ? le : 1, sizeof(uint64_t));
    rec->dropped = calloc(le > 0 ? le : 1, sizeof(uint64_t));
    rec->bytes_sent = calloc(W, sizeof(uint64_t));
    rec->bytes_recv = calloc(W, sizeof(uint64_t));
    rec->msgs_sent = calloc(W, sizeof(uint64_t));
    rec->msgs_recv = calloc(W, sizeof(uint64_t));
    rec->wait_ns = calloc(W, sizeof(double));
    rec->rows_sent = calloc(W, sizeof(uint64_t));
    rec->rows_recv = calloc(W, sizeof(uint64_t));
    rec->pairs_sent = calloc(W, sizeof(uint64_t));
    rec->pairs_recv = calloc(W, sizeof(uint64_t));
    size_t nl = num_layers > 0 ? (size_t)num_layers : 1;
    rec->shared_rows = calloc(nl, sizeof(int64_t));
    rec->shared_ns = calloc(nl, sizeof(int64_t));
    if (!rec->shared_rows || !rec->shared_ns || !rec->local_ids || !rec->experts ||
        !rec->slot_ids || !rec->demand || !rec->kept || !rec->dropped ||
        !rec->bytes_sent || !rec->bytes_recv || !rec->msgs_sent || !rec->msgs_recv ||
        !rec->wait_ns || !rec->rows_sent || !rec->rows_recv || !rec->pairs_sent ||
        !rec->pairs_recv) {
        moe_prof_record_free(rec);
        return MOE_ERR_NO_MEMORY;
    }
    return MOE_OK;
}

void moe_prof_record_free(moe_prof_record_t *rec)
{
    if (rec == NULL) {
        return;
    }
    void *arrays[] = {rec->local_ids, rec->experts,   rec->demand,    rec->kept,
                      rec->dropped,   rec->bytes_sent, rec->bytes_recv, rec->msgs_sent,
                      rec->msgs_recv, rec->wait_ns,   rec->steps,     rec->exchanges,
                      rec->metrics,   rec->events,    rec->mem,       rec->shared_rows,
                      rec->shared_ns, rec->slot_ids,  rec->layer_lat, rec->rows_sent,
                      rec->rows_recv, rec->pairs_sent, rec->pairs_recv};
    for (size_t i = 0; i < sizeof(arrays) / sizeof(arrays[0]); i++) {
        free(arrays[i]);
    }
    memset(rec, 0, sizeof(*rec));
}

/* ---- encoding ---------------------------------------------------------------------- */

static size_t section_begin(moe_wbuf_t *w, uint16_t tag)
{
    moe_wbuf_u16(w, tag);
    moe_wbuf_u16(w, 0);
    size_t at = w->len;
    moe_wbuf_u64(w, 0);
    return at;
}

static void section_end(moe_wbuf_t *w, size_t at)
{
    moe_wbuf_patch_u64(w, at, (uint64_t)(w->len - at - 8));
}

static void encode_hist(const moe_hist_t *h, moe_wbuf_t *w)
{
    moe_wbuf_u64(w, h->count);
    moe_wbuf_f64(w, h->sum);
    moe_wbuf_i64(w, h->min);
    moe_wbuf_i64(w, h->max);
    uint32_t nnz = 0;
    for (int b = 0; b < MOE_HIST_BUCKETS; b++) {
        nnz += h->buckets[b] != 0;
    }
    moe_wbuf_u32(w, nnz); /* sparse: most of the 640 buckets are empty */
    for (int b = 0; b < MOE_HIST_BUCKETS; b++) {
        if (h->buckets[b] != 0) {
            moe_wbuf_u16(w, (uint16_t)b);
            moe_wbuf_u32(w, h->buckets[b]);
        }
    }
}

static void encode_ident(const moe_prof_record_t *rec, moe_wbuf_t *w)
{
    size_t at = section_begin(w, SEC_IDENT);
    moe_wbuf_u32(w, (uint32_t)rec->rank);
    moe_wbuf_u32(w, (uint32_t)rec->world_size);
    moe_wbuf_u32(w, (uint32_t)rec->window);
    moe_wbuf_bytes(w, rec->host, sizeof(rec->host));
    moe_wbuf_u32(w, (uint32_t)rec->num_layers);
    moe_wbuf_u32(w, (uint32_t)rec->num_experts);
    moe_wbuf_u32(w, (uint32_t)rec->num_local);
    for (int i = 0; i < rec->num_local; i++) {
        moe_wbuf_u32(w, (uint32_t)rec->local_ids[i]);
    }
    section_end(w, at);
}

static void encode_static(const moe_prof_record_t *rec, moe_wbuf_t *w)
{
    size_t at = section_begin(w, SEC_STATIC);
    moe_wbuf_u64(w, rec->expert_weight_bytes);
    moe_wbuf_u64(w, rec->exchange_buffer_bytes);
    moe_wbuf_f64(w, rec->clock_offset_ns);
    moe_wbuf_f64(w, rec->clock_uncertainty_ns);
    moe_wbuf_f64(w, rec->clock_offset_end_ns);
    moe_wbuf_u64(w, rec->rss_peak);
    moe_wbuf_u64(w, rec->dev_peak);
    section_end(w, at);
}

static void encode_stats(const moe_prof_record_t *rec, moe_wbuf_t *w)
{
    size_t at = section_begin(w, SEC_PHASES);
    moe_wbuf_i64(w, rec->steps_recorded);
    for (int p = 0; p < MOE_PHASE_COUNT; p++) {
        moe_wbuf_f64(w, rec->phase_sum[p]);
        moe_wbuf_f64(w, rec->phase_min[p]);
        moe_wbuf_f64(w, rec->phase_max[p]);
    }
    section_end(w, at);
    at = section_begin(w, SEC_EXPERTS);
    for (int i = 0; i < rec->num_layers * rec->num_local; i++) {
        moe_wbuf_u64(w, rec->experts[i].tokens);
        moe_wbuf_u64(w, rec->experts[i].calls);
        moe_wbuf_f64(w, rec->experts[i].flops);
        encode_hist(&rec->experts[i].hist, w);
    }
    section_end(w, at);
    at = section_begin(w, SEC_ROUTING);
    for (int i = 0; i < rec->num_layers * rec->num_experts; i++) {
        moe_wbuf_u64(w, rec->demand[i]);
        moe_wbuf_u64(w, rec->kept[i]);
        moe_wbuf_u64(w, rec->dropped[i]);
    }
    section_end(w, at);
    at = section_begin(w, SEC_COMM);
    for (int i = 0; i < rec->world_size; i++) {
        moe_wbuf_u64(w, rec->bytes_sent[i]);
        moe_wbuf_u64(w, rec->bytes_recv[i]);
        moe_wbuf_u64(w, rec->msgs_sent[i]);
        moe_wbuf_u64(w, rec->msgs_recv[i]);
        moe_wbuf_f64(w, rec->wait_ns[i]);
    }
    section_end(w, at);
}

static void encode_lists(const moe_prof_record_t *rec, moe_wbuf_t *w)
{
    size_t at = section_begin(w, SEC_STEPS);
    moe_wbuf_u64(w, (uint64_t)rec->num_steps);
    for (int64_t i = 0; i < rec->num_steps; i++) {
        const moe_rec_step_t *s = &rec->steps[i];
        moe_wbuf_i64(w, s->step);
        moe_wbuf_i64(w, s->begin_ns);
        for (int p = 0; p < MOE_PHASE_COUNT; p++) {
            moe_wbuf_i64(w, s->phase_ns[p]);
        }
    }
    section_end(w, at);
    at = section_begin(w, SEC_EXCHANGES);
    moe_wbuf_u64(w, (uint64_t)rec->num_exchanges);
    for (int64_t i = 0; i < rec->num_exchanges; i++) {
        const moe_rec_exchange_t *x = &rec->exchanges[i];
        moe_wbuf_i64(w, x->step);
        moe_wbuf_u32(w, (uint32_t)x->layer);
        moe_wbuf_i64(w, x->dispatch_begin_ns);
        moe_wbuf_i64(w, x->dispatch_end_ns);
        moe_wbuf_i64(w, x->combine_begin_ns);
        moe_wbuf_i64(w, x->combine_end_ns);
    }
    section_end(w, at);
    at = section_begin(w, SEC_METRICS);
    moe_wbuf_i64(w, rec->metrics_dropped);
    moe_wbuf_u64(w, (uint64_t)rec->num_metrics);
    for (int64_t i = 0; i < rec->num_metrics; i++) {
        const moe_rec_metric_t *m = &rec->metrics[i];
        moe_wbuf_i64(w, m->step);
        moe_wbuf_u32(w, (uint32_t)m->layer);
        moe_wbuf_u32(w, (uint32_t)m->local);
        moe_wbuf_i64(w, m->tokens);
        moe_wbuf_i64(w, m->ns);
    }
    section_end(w, at);
    at = section_begin(w, SEC_EVENTS);
    moe_wbuf_i64(w, rec->events_dropped);
    moe_wbuf_u64(w, (uint64_t)rec->num_events);
    for (int64_t i = 0; i < rec->num_events; i++) {
        const moe_rec_event_t *e = &rec->events[i];
        moe_wbuf_i64(w, e->ts_ns);
        moe_wbuf_i64(w, e->dur_ns);
        moe_wbuf_u32(w, (uint32_t)e->kind);
        moe_wbuf_u32(w, (uint32_t)e->layer);
        moe_wbuf_u32(w, (uint32_t)e->id);
        moe_wbuf_u32(w, (uint32_t)e->lane);
        moe_wbuf_i64(w, e->step);
        moe_wbuf_i64(w, e->arg);
    }
    section_end(w, at);
    at = section_begin(w, SEC_MEMORY);
    moe_wbuf_u64(w, (uint64_t)rec->num_mem);
    for (int64_t i = 0; i < rec->num_mem; i++) {
        moe_wbuf_i64(w, rec->mem[i].t_ns);
        moe_wbuf_u64(w, rec->mem[i].rss_bytes);
        moe_wbuf_u64(w, rec->mem[i].dev_bytes);
    }
    section_end(w, at);
}

static void encode_overlap(const moe_prof_record_t *rec, moe_wbuf_t *w)
{
    size_t at = section_begin(w, SEC_OVERLAP);
    moe_wbuf_i64(w, rec->exchange_ns);
    moe_wbuf_i64(w, rec->hidden_ns);
    moe_wbuf_u32(w, (uint32_t)rec->chunks);
    moe_wbuf_bytes(w, rec->device, sizeof(rec->device));
    section_end(w, at);
}

static void encode_shared(const moe_prof_record_t *rec, moe_wbuf_t *w)
{
    size_t at = section_begin(w, SEC_SHARED);
    moe_wbuf_u32(w, (uint32_t)rec->num_layers);
    for (int l = 0; l < rec->num_layers; l++) {
        moe_wbuf_i64(w, rec->shared_rows[l]);
        moe_wbuf_i64(w, rec->shared_ns[l]);
    }
    section_end(w, at);
}

static void encode_cpu(const moe_prof_record_t *rec, moe_wbuf_t *w)
{
    size_t at = section_begin(w, SEC_CPU);
    moe_wbuf_i64(w, rec->cpu_steps_ns);
    moe_wbuf_i64(w, rec->wall_steps_ns);
    moe_wbuf_i64(w, rec->cpu_run_ns);
    moe_wbuf_i64(w, rec->wall_run_ns);
    section_end(w, at);
}

static void encode_slots(const moe_prof_record_t *rec, moe_wbuf_t *w)
{
    size_t at = section_begin(w, SEC_SLOTS);
    uint32_t n = (uint32_t)rec->num_layers * (uint32_t)rec->num_local;
    moe_wbuf_u32(w, n);
    for (uint32_t i = 0; i < n; i++) {
        moe_wbuf_u32(w, (uint32_t)rec->slot_ids[i]);
    }
    section_end(w, at);
}

static void encode_layers(const moe_prof_record_t *rec, moe_wbuf_t *w)
{
    size_t at = section_begin(w, SEC_LAYERS);
    moe_wbuf_u64(w, (uint64_t)rec->num_layer_lat);
    for (int64_t i = 0; i < rec->num_layer_lat; i++) {
        moe_wbuf_i64(w, rec->layer_lat[i].step);
        moe_wbuf_u32(w, (uint32_t)rec->layer_lat[i].layer);
        moe_wbuf_i64(w, rec->layer_lat[i].ns);
    }
    section_end(w, at);
}

static void encode_rows(const moe_prof_record_t *rec, moe_wbuf_t *w)
{
    size_t at = section_begin(w, SEC_ROWS);
    moe_wbuf_u32(w, (uint32_t)rec->world_size);
    for (int j = 0; j < rec->world_size; j++) {
        moe_wbuf_u64(w, rec->rows_sent[j]);
        moe_wbuf_u64(w, rec->rows_recv[j]);
        moe_wbuf_u64(w, rec->pairs_sent[j]);
        moe_wbuf_u64(w, rec->pairs_recv[j]);
    }
    section_end(w, at);
}

void moe_prof_record_encode(const moe_prof_record_t *rec, moe_wbuf_t *w)
{
    size_t start = w->len;
    moe_wbuf_bytes(w, MOE_PROF_MAGIC, 4);
    moe_wbuf_u16(w, MOE_PROF_VERSION);
    moe_wbuf_u16(w, MOE_PROF_MIN_VERSION);
    moe_wbuf_u32(w, MOE_PROF_HEADER_SIZE);
    moe_wbuf_u32(w, rec->flags);
    moe_wbuf_u64(w, 0); /* payload length, patched */
    moe_wbuf_u64(w, 0); /* checksum, patched */
    size_t payload = w->len;
    encode_ident(rec, w);
    encode_static(rec, w);
    encode_stats(rec, w);
    encode_lists(rec, w);
    encode_shared(rec, w);
    encode_cpu(rec, w);
    encode_slots(rec, w);
    encode_layers(rec, w);
    encode_rows(rec, w);
    encode_overlap(rec, w);
    if (w->ok) {
        moe_wbuf_patch_u64(w, start + 16, (uint64_t)(w->len - payload));
        moe_wbuf_patch_u64(w, start + 24, moe_hash64(w->data + payload, w->len - payload));
    }
}

/* ---- decoding ---------------------------------------------------------------------- */

typedef struct dec {
    moe_prof_record_t *rec;
    moe_error_t *err;
    size_t payload_len; /* the whole payload: bounds what the identity may declare */
    size_t base;   /* offset of the current section body in the record, for messages */
    bool have_ident;
} dec_t;

static moe_status_t dec_fail(dec_t *d, const moe_rbuf_t *r, moe_status_t code, const char *what)
{
    return moe_error_set(d->err, code, "profile record from rank %d: %s (at byte %zu)",
                         d->have_ident ? d->rec->rank : -1, what, d->base + r->pos);
}

static bool decode_hist(moe_rbuf_t *r, moe_hist_t *h)
{
    memset(h, 0, sizeof(*h));
    h->count = moe_rbuf_u64(r);
    h->sum = moe_rbuf_f64(r);
    h->min = moe_rbuf_i64(r);
    h->max = moe_rbuf_i64(r);
    uint32_t nnz = moe_rbuf_u32(r);
    if (nnz > MOE_HIST_BUCKETS || !moe_rbuf_can(r, nnz, 6)) {
        return false;
    }
    uint64_t total = 0;
    int prev = -1;
    for (uint32_t i = 0; i < nnz; i++) {
        uint16_t b = moe_rbuf_u16(r);
        uint32_t c = moe_rbuf_u32(r);
        if (b >= MOE_HIST_BUCKETS || (int)b <= prev) { /* ascending, as encode_hist writes */
            return false;
        }
        prev = b;
        h->buckets[b] = c;
        total += c;
    }
    return r->ok && total == h->count; /* a histogram that lies about its count is corrupt */
}

static moe_status_t decode_ident(dec_t *d, moe_rbuf_t *r)
{
    moe_prof_record_t *rec = d->rec;
    int32_t rank = (int32_t)moe_rbuf_u32(r), world = (int32_t)moe_rbuf_u32(r);
    int32_t window = (int32_t)moe_rbuf_u32(r);
    char host[64];
    moe_rbuf_bytes(r, host, sizeof(host));
    int32_t L = (int32_t)moe_rbuf_u32(r), E = (int32_t)moe_rbuf_u32(r), nl = (int32_t)moe_rbuf_u32(r);
    if (!r->ok) {
        return dec_fail(d, r, MOE_ERR_TRUNCATED, "identity section cut short");
    }
    if (world < 1 || world > MOE_MAX_RANKS || rank < 0 || rank >= world || L < 1 ||
        L > MAX_LAYERS || E < 1 || E > MOE_MAX_EXPERTS || nl < 0 || nl > E || window < 0) {
        return dec_fail(d, r, MOE_ERR_FORMAT, "identity out of range (rank, world, layers, experts)");
    }
    /* The per-expert, routing and comm sections every record carries need at least this
     * many bytes; a shape the payload cannot hold is a lie, rejected before allocating
     * (so what a record makes us allocate grows with the bytes actually received). */
    uint64_t need = (uint64_t)L * (uint64_t)nl * 52u + (uint64_t)L * (uint64_t)E * 24u +
                    (uint64_t)world * 40u;
    if (need > d->payload_len) {
        return dec_fail(d, r, MOE_ERR_FORMAT,
                        "identity declares a shape larger than the record can hold");
    }
    uint32_t version = rec->version, flags = rec->flags;
    if (moe_prof_record_alloc(rec, world, L, E, nl) != MOE_OK) {
        return moe_error_set(d->err, MOE_ERR_NO_MEMORY, "cannot allocate a profile record");
    }
    rec->version = version;
    rec->flags = flags;
    rec->rank = rank;
    rec->window = window;
    memcpy(rec->host, host, sizeof(host));
    rec->host[sizeof(rec->host) - 1] = '\0';
    for (int i = 0; i < nl; i++) {
        rec->local_ids[i] = (int32_t)moe_rbuf_u32(r);
        if (rec->local_ids[i] < 0 || rec->local_ids[i] >= E) {
            return dec_fail(d, r, MOE_ERR_FORMAT, "local expert id out of range");
        }
    }
    d->have_ident = true;
    return r->ok ? MOE_OK : dec_fail(d, r, MOE_ERR_TRUNCATED, "expert ids cut short");
}

static moe_status_t decode_fixed(dec_t *d, uint16_t tag, moe_rbuf_t *r)
{
    moe_prof_record_t *rec = d->rec;
    switch (tag) {
    case SEC_STATIC:
        rec->expert_weight_bytes = moe_rbuf_u64(r);
        rec->exchange_buffer_bytes = moe_rbuf_u64(r);
        rec->clock_offset_ns = moe_rbuf_f64(r);
        rec->clock_uncertainty_ns = moe_rbuf_f64(r);
        rec->clock_offset_end_ns = moe_rbuf_f64(r);
        rec->rss_peak = moe_rbuf_u64(r);
        rec->dev_peak = moe_rbuf_u64(r);
        break;
    case SEC_PHASES:
        rec->steps_recorded = moe_rbuf_i64(r);
        for (int p = 0; p < MOE_PHASE_COUNT; p++) {
            rec->phase_sum[p] = moe_rbuf_f64(r);
            rec->phase_min[p] = moe_rbuf_f64(r);
            rec->phase_max[p] = moe_rbuf_f64(r);
        }
        break;
    case SEC_EXPERTS:
        for (int i = 0; i < rec->num_layers * rec->num_local; i++) {
            rec->experts[i].tokens = moe_rbuf_u64(r);
            rec->experts[i].calls = moe_rbuf_u64(r);
            rec->experts[i].flops = moe_rbuf_f64(r);
            if (!decode_hist(r, &rec->experts[i].hist)) {
                return dec_fail(d, r, MOE_ERR_FORMAT, "expert latency histogram is corrupt");
            }
        }
        break;
    case SEC_ROUTING:
        for (int i = 0; i < rec->num_layers * rec->num_experts; i++) {
            rec->demand[i] = moe_rbuf_u64(r);
            rec->kept[i] = moe_rbuf_u64(r);
            rec->dropped[i] = moe_rbuf_u64(r);
        }
        break;
    case SEC_COMM:
        for (int i = 0; i < rec->world_size; i++) {
            rec->bytes_sent[i] = moe_rbuf_u64(r);
            rec->bytes_recv[i] = moe_rbuf_u64(r);
            rec->msgs_sent[i] = moe_rbuf_u64(r);
            rec->msgs_recv[i] = moe_rbuf_u64(r);
            rec->wait_ns[i] = moe_rbuf_f64(r);
        }
        break;
    default:
        break;
    }
    return r->ok ? MOE_OK : dec_fail(d, r, MOE_ERR_TRUNCATED, "section shorter than its contents");
}

/* Read a list count and allocate it, after checking it fits in what is left. */
static void *dec_list(dec_t *d, moe_rbuf_t *r, int64_t *count, size_t wire_size, size_t mem_size)
{
    uint64_t n = moe_rbuf_u64(r);
    if (!moe_rbuf_can(r, n, wire_size)) {
        dec_fail(d, r, MOE_ERR_TRUNCATED, "list count larger than the bytes that follow");
        return NULL;
    }
    *count = (int64_t)n;
    void *p = calloc(n > 0 ? n : 1, mem_size);
    if (p == NULL) {
        moe_error_set(d->err, MOE_ERR_NO_MEMORY, "cannot allocate %llu list items",
                      (unsigned long long)n);
    }
    return p;
}

static moe_status_t decode_lists(dec_t *d, uint16_t tag, moe_rbuf_t *r)
{
    moe_prof_record_t *rec = d->rec;
    const void *have = tag == SEC_STEPS       ? (const void *)rec->steps
                       : tag == SEC_EXCHANGES ? (const void *)rec->exchanges
                       : tag == SEC_METRICS   ? (const void *)rec->metrics
                       : tag == SEC_EVENTS    ? (const void *)rec->events
                                              : (const void *)rec->mem;
    if (have != NULL) { /* a second copy would replace (and leak) the first */
        return dec_fail(d, r, MOE_ERR_FORMAT, "list section appears twice");
    }
    if (tag == SEC_STEPS) {
        if ((rec->steps = dec_list(d, r, &rec->num_steps, 64, sizeof(moe_rec_step_t))) == NULL) {
            return d->err->code;
        }
        for (int64_t i = 0; i < rec->num_steps; i++) {
            rec->steps[i].step = moe_rbuf_i64(r);
            rec->steps[i].begin_ns = moe_rbuf_i64(r);
            for (int p = 0; p < MOE_PHASE_COUNT; p++) {
                rec->steps[i].phase_ns[p] = moe_rbuf_i64(r);
            }
        }
    } else if (tag == SEC_EXCHANGES) {
        if ((rec->exchanges = dec_list(d, r, &rec->num_exchanges, 44, sizeof(moe_rec_exchange_t))) == NULL) {
            return d->err->code;
        }
        for (int64_t i = 0; i < rec->num_exchanges; i++) {
            moe_rec_exchange_t *x = &rec->exchanges[i];
            x->step = moe_rbuf_i64(r);
            x->layer = (int32_t)moe_rbuf_u32(r);
            x->dispatch_begin_ns = moe_rbuf_i64(r);
            x->dispatch_end_ns = moe_rbuf_i64(r);
            x->combine_begin_ns = moe_rbuf_i64(r);
            x->combine_end_ns = moe_rbuf_i64(r);
        }
    } else if (tag == SEC_METRICS) {
        rec->metrics_dropped = moe_rbuf_i64(r);
        if ((rec->metrics = dec_list(d, r, &rec->num_metrics, 32, sizeof(moe_rec_metric_t))) == NULL) {
            return d->err->code;
        }
        for (int64_t i = 0; i < rec->num_metrics; i++) {
            moe_rec_metric_t *m = &rec->metrics[i];
            m->step = moe_rbuf_i64(r);
            m->layer = (int32_t)moe_rbuf_u32(r);
            m->local = (int32_t)moe_rbuf_u32(r);
            m->tokens = moe_rbuf_i64(r);
            m->ns = moe_rbuf_i64(r);
            if (m->layer < 0 || m->layer >= rec->num_layers || m->local < 0 ||
                m->local >= rec->num_local) {
                return dec_fail(d, r, MOE_ERR_FORMAT, "metric row names a layer or expert out of range");
            }
        }
    } else if (tag == SEC_EVENTS) {
        rec->events_dropped = moe_rbuf_i64(r);
        if ((rec->events = dec_list(d, r, &rec->num_events, 48, sizeof(moe_rec_event_t))) == NULL) {
            return d->err->code;
        }
        for (int64_t i = 0; i < rec->num_events; i++) {
            moe_rec_event_t *e = &rec->events[i];
            e->ts_ns = moe_rbuf_i64(r);
            e->dur_ns = moe_rbuf_i64(r);
            e->kind = (int32_t)moe_rbuf_u32(r);
            e->layer = (int32_t)moe_rbuf_u32(r);
            e->id = (int32_t)moe_rbuf_u32(r);
            e->lane = (int32_t)moe_rbuf_u32(r);
            e->step = moe_rbuf_i64(r);
            e->arg = moe_rbuf_i64(r);
        }
    } else if (tag == SEC_MEMORY) {
        if ((rec->mem = dec_list(d, r, &rec->num_mem, 24, sizeof(moe_rec_mem_t))) == NULL) {
            return d->err->code;
        }
        for (int64_t i = 0; i < rec->num_mem; i++) {
            rec->mem[i].t_ns = moe_rbuf_i64(r);
            rec->mem[i].rss_bytes = moe_rbuf_u64(r);
            rec->mem[i].dev_bytes = moe_rbuf_u64(r);
        }
    }
    return r->ok ? MOE_OK : dec_fail(d, r, MOE_ERR_TRUNCATED, "list cut short");
}

/* SHARED: one (rows, ns) pair per layer of the identity section. */
static moe_status_t decode_shared(dec_t *d, moe_rbuf_t *r)
{
    moe_prof_record_t *rec = d->rec;
    uint32_t n = moe_rbuf_u32(r);
    if (r->ok && n != (uint32_t)rec->num_layers) {
        return dec_fail(d, r, MOE_ERR_FORMAT, "shared section for another layer count");
    }
    if (!r->ok || moe_rbuf_left(r) < (size_t)n * 16) {
        return dec_fail(d, r, MOE_ERR_TRUNCATED, "shared section cut short");
    }
    for (uint32_t l = 0; l < n; l++) {
        rec->shared_rows[l] = moe_rbuf_i64(r);
        rec->shared_ns[l] = moe_rbuf_i64(r);
        if (rec->shared_rows[l] < 0 || rec->shared_ns[l] < 0) {
            return dec_fail(d, r, MOE_ERR_FORMAT, "shared rows or time negative");
        }
    }
    return MOE_OK;
}

/* CPU: process CPU time against wall time, over the recorded steps and the whole run. A
 * later writer may append fields to the body; they are ignored. */
static moe_status_t decode_cpu(dec_t *d, moe_rbuf_t *r)
{
    moe_prof_record_t *rec = d->rec;
    int64_t v[4];
    for (int i = 0; i < 4; i++) {
        v[i] = moe_rbuf_i64(r);
    }
    if (!r->ok) {
        return dec_fail(d, r, MOE_ERR_TRUNCATED, "cpu section cut short");
    }
    if (v[0] < 0 || v[1] < 0 || v[2] < 0 || v[3] < 0) {
        return dec_fail(d, r, MOE_ERR_FORMAT, "cpu or wall time negative");
    }
    rec->cpu_steps_ns = v[0];
    rec->wall_steps_ns = v[1];
    rec->cpu_run_ns = v[2];
    rec->wall_run_ns = v[3];
    return MOE_OK;
}

/* SLOTS: the expert of each (layer, column), -1 or a valid id. */
static moe_status_t decode_slots(dec_t *d, moe_rbuf_t *r)
{
    moe_prof_record_t *rec = d->rec;
    uint32_t n = moe_rbuf_u32(r);
    if (r->ok && n != (uint32_t)rec->num_layers * (uint32_t)rec->num_local) {
        return dec_fail(d, r, MOE_ERR_FORMAT, "slots section for another shape");
    }
    if (!r->ok || moe_rbuf_left(r) < (size_t)n * 4) {
        return dec_fail(d, r, MOE_ERR_TRUNCATED, "slots section cut short");
    }
    for (uint32_t i = 0; i < n; i++) {
        int32_t id = (int32_t)moe_rbuf_u32(r);
        if (id < -1 || id >= rec->num_experts) {
            return dec_fail(d, r, MOE_ERR_FORMAT, "slot expert id out of range");
        }
        rec->slot_ids[i] = id;
    }
    return MOE_OK;
}

/* LAYERS: (step, layer, ns) per recorded layer; layers in range, times not negative. */
static moe_status_t decode_layers(dec_t *d, moe_rbuf_t *r)
{
    moe_prof_record_t *rec = d->rec;
    if (rec->layer_lat != NULL) {
        return dec_fail(d, r, MOE_ERR_FORMAT, "list section appears twice");
    }
    if ((rec->layer_lat = dec_list(d, r, &rec->num_layer_lat, 20, sizeof(moe_rec_lat_t))) ==
        NULL) {
        return d->err->code;
    }
    for (int64_t i = 0; i < rec->num_layer_lat; i++) {
        moe_rec_lat_t *x = &rec->layer_lat[i];
        x->step = moe_rbuf_i64(r);
        x->layer = (int32_t)moe_rbuf_u32(r);
        x->ns = moe_rbuf_i64(r);
        if (r->ok && (x->layer < 0 || x->layer >= rec->num_layers || x->ns < 0)) {
            return dec_fail(d, r, MOE_ERR_FORMAT, "layer latency out of range");
        }
    }
    return r->ok ? MOE_OK : dec_fail(d, r, MOE_ERR_TRUNCATED, "layer latencies cut short");
}

/* ROWS: per rank, rows sent and received and the pairs they carried; a row carries at
 * least one pair. */
static moe_status_t decode_rows(dec_t *d, moe_rbuf_t *r)
{
    moe_prof_record_t *rec = d->rec;
    uint32_t n = moe_rbuf_u32(r);
    if (r->ok && n != (uint32_t)rec->world_size) {
        return dec_fail(d, r, MOE_ERR_FORMAT, "rows section for another world size");
    }
    if (!r->ok || moe_rbuf_left(r) < (size_t)n * 32) {
        return dec_fail(d, r, MOE_ERR_TRUNCATED, "rows section cut short");
    }
    for (uint32_t j = 0; j < n; j++) {
        rec->rows_sent[j] = moe_rbuf_u64(r);
        rec->rows_recv[j] = moe_rbuf_u64(r);
        rec->pairs_sent[j] = moe_rbuf_u64(r);
        rec->pairs_recv[j] = moe_rbuf_u64(r);
        if (rec->pairs_sent[j] < rec->rows_sent[j] || rec->pairs_recv[j] < rec->rows_recv[j]) {
            return dec_fail(d, r, MOE_ERR_FORMAT, "fewer pairs than rows");
        }
    }
    return MOE_OK;
}

/* OVERLAP: a later writer may append fields to the body; they are ignored. */
static moe_status_t decode_overlap(dec_t *d, moe_rbuf_t *r)
{
    moe_prof_record_t *rec = d->rec;
    int64_t exchange = moe_rbuf_i64(r), hidden = moe_rbuf_i64(r);
    uint32_t chunks = moe_rbuf_u32(r);
    char device[sizeof(rec->device)];
    moe_rbuf_bytes(r, device, sizeof(device));
    if (!r->ok) {
        return dec_fail(d, r, MOE_ERR_TRUNCATED, "overlap section cut short");
    }
    if (exchange < 0 || hidden < 0 || hidden > exchange || chunks > MAX_CHUNKS) {
        return dec_fail(d, r, MOE_ERR_FORMAT,
                        "overlap out of range (hidden time above exchange time, or chunks)");
    }
    rec->exchange_ns = exchange;
    rec->hidden_ns = hidden;
    rec->chunks = (int32_t)chunks;
    memcpy(rec->device, device, sizeof(device));
    rec->device[sizeof(rec->device) - 1] = '\0';
    return MOE_OK;
}

static moe_status_t decode_header(const uint8_t *p, size_t len, uint32_t *flags,
                                  uint64_t *payload_len, moe_error_t *err)
{
    if (len < MOE_PROF_HEADER_SIZE) {
        return moe_error_set(err, MOE_ERR_TRUNCATED,
                             "profile record of %zu bytes is shorter than its %d-byte header",
                             len, MOE_PROF_HEADER_SIZE);
    }
    moe_rbuf_t r;
    moe_rbuf_init(&r, p, len);
    char magic[4];
    moe_rbuf_bytes(&r, magic, 4);
    uint16_t version = moe_rbuf_u16(&r), min_version = moe_rbuf_u16(&r);
    uint32_t header_size = moe_rbuf_u32(&r);
    *flags = moe_rbuf_u32(&r);
    *payload_len = moe_rbuf_u64(&r);
    uint64_t sum = moe_rbuf_u64(&r);
    if (memcmp(magic, MOE_PROF_MAGIC, 4) != 0) {
        return moe_error_set(err, MOE_ERR_FORMAT, "not a profile record (bad magic)");
    }
    if (min_version > MOE_PROF_VERSION || version < MOE_PROF_MIN_VERSION) {
        return moe_error_set(err, MOE_ERR_UNSUPPORTED,
                             "profile record version %u (needs reader >= %u); this build reads "
                             "%d..%d: run the same moed build on every rank",
                             version, min_version, MOE_PROF_MIN_VERSION, MOE_PROF_VERSION);
    }
    if (header_size != MOE_PROF_HEADER_SIZE || *payload_len != len - header_size) {
        return moe_error_set(err, len - header_size < *payload_len ? MOE_ERR_TRUNCATED : MOE_ERR_FORMAT,
                             "profile record says %llu payload bytes but %zu follow the header",
                             (unsigned long long)*payload_len, len - MOE_PROF_HEADER_SIZE);
    }
    if (moe_hash64(p + header_size, (size_t)*payload_len) != sum) {
        return moe_error_set(err, MOE_ERR_FORMAT, "profile record checksum mismatch (corrupted)");
    }
    return MOE_OK;
}

moe_status_t moe_prof_record_decode(const void *data, size_t len, moe_prof_record_t *rec,
                                    moe_error_t *err)
{
    memset(rec, 0, sizeof(*rec));
    moe_error_t local_err;
    if (err == NULL) {
        err = &local_err; /* the list decoders read the code back */
    }
    uint32_t flags = 0;
    uint64_t payload_len = 0;
    moe_status_t st = decode_header(data, len, &flags, &payload_len, err);
    if (st != MOE_OK) {
        return st;
    }
    rec->version = MOE_PROF_VERSION;
    rec->flags = flags;
    dec_t d = {.rec = rec, .err = err, .payload_len = (size_t)payload_len};
    moe_rbuf_t r;
    moe_rbuf_init(&r, (const uint8_t *)data + MOE_PROF_HEADER_SIZE, (size_t)payload_len);
    while (st == MOE_OK && moe_rbuf_left(&r) > 0) {
        d.base = MOE_PROF_HEADER_SIZE;
        uint16_t tag = moe_rbuf_u16(&r);
        moe_rbuf_u16(&r);
        uint64_t slen = moe_rbuf_u64(&r);
        if (!r.ok || slen > moe_rbuf_left(&r)) {
            st = dec_fail(&d, &r, MOE_ERR_TRUNCATED, "section length beyond the record");
            break;
        }
        moe_rbuf_t sec;
        moe_rbuf_init(&sec, r.data + r.pos, (size_t)slen);
        d.base = MOE_PROF_HEADER_SIZE + r.pos;
        r.pos += (size_t)slen;
        if (tag == SEC_IDENT) {
            st = d.have_ident ? dec_fail(&d, &sec, MOE_ERR_FORMAT, "identity section twice")
                              : decode_ident(&d, &sec);
        } else if (!d.have_ident && tag <= SEC_LAST) {
            st = dec_fail(&d, &sec, MOE_ERR_FORMAT, "a section before the identity section");
        } else if (tag <= SEC_COMM) {
            st = decode_fixed(&d, tag, &sec);
        } else if (tag <= SEC_MEMORY) {
            st = decode_lists(&d, tag, &sec);
        } else if (tag == SEC_OVERLAP) {
            st = decode_overlap(&d, &sec);
        } else if (tag == SEC_SHARED) {
            st = decode_shared(&d, &sec);
        } else if (tag == SEC_CPU) {
            st = decode_cpu(&d, &sec);
        } else if (tag == SEC_SLOTS) {
            st = decode_slots(&d, &sec);
        } else if (tag == SEC_LAYERS) {
            st = decode_layers(&d, &sec);
        } else if (tag == SEC_ROWS) {
            st = decode_rows(&d, &sec);
        } /* else: a section from a newer writer; skipped */
    }
    if (st == MOE_OK && !d.have_ident) {
        st = moe_error_set(err, MOE_ERR_FORMAT, "profile record has no identity section");
    }
    if (st != MOE_OK) {
        moe_prof_record_free(rec);
    }
    return st;
}
