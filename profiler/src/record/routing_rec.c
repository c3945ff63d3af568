/* profiler.record_routing on one rank (routing_rec.h). */
#include "record/routing_rec.h"

#include <stdlib.h>
#include <string.h>

#include "moe/clock.h"
#include "moe/mem.h"
#include "moe/mpi_check.h"
#include "moe/poll.h"
#include "moe_proto/routing_msg.h"

struct moe_routing_rec {
    const moe_config_t *cfg;
    int64_t token_first, tokens, layers, top_k;
    int64_t max_steps;       /* the schedule's recorded steps: the buffer's room */
    int64_t steps;           /* completed recorded steps held */
    bool in_step;            /* the current step is recorded */
    int64_t layers_seen;     /* of the current step */
    unsigned char *buf;      /* the message: header, ids [max_steps...], weights [...] */
    size_t len;              /* for max_steps */
    int32_t *ids;            /* [max_steps][layers][tokens][top_k] */
    float *weights;          /* [max_steps][layers][tokens][top_k] */
    MPI_Request req;
};

moe_status_t moe_routing_rec_create(const moe_config_t *cfg, int64_t token_first,
                                    int64_t token_count, moe_routing_rec_t **out,
                                    moe_error_t *err)
{
    *out = NULL;
    int64_t steps = moe_cfg_recorded_steps(cfg);
    if (!cfg->prof_record_routing || token_count <= 0 || steps <= 0) {
        return MOE_OK;
    }
    moe_routing_rec_t *rr = calloc(1, sizeof(*rr));
    size_t len = moe_routing_msg_size(steps, token_count, cfg->num_layers, cfg->top_k);
    if (rr == NULL || len == 0 || (rr->buf = moe_alloc_large(len)) == NULL) {
        free(rr);
        return moe_error_set(err, MOE_ERR_NO_MEMORY, "profiler.record_routing: cannot allocate "
                             "%zu bytes for %lld recorded steps of routing", len,
                             (long long)steps);
    }
    rr->cfg = cfg;
    rr->token_first = token_first;
    rr->tokens = token_count;
    rr->layers = cfg->num_layers;
    rr->top_k = cfg->top_k;
    rr->max_steps = steps;
    rr->len = len;
    rr->req = MPI_REQUEST_NULL;
    size_t n = (len - MOE_ROUTING_MSG_HEADER) / 8;
    rr->ids = (int32_t *)(rr->buf + MOE_ROUTING_MSG_HEADER);
    rr->weights = (float *)(rr->ids + n);
    *out = rr;
    return MOE_OK;
}

void moe_routing_rec_destroy(moe_routing_rec_t *rr)
{
    if (rr == NULL) {
        return;
    }
    if (rr->req != MPI_REQUEST_NULL) {
        /* rank 0 never took it (gone, or out of time): the buffer is kept, not freed under
         * a send MPI may still be making */
        (void)MOE_MPI(MPI_Request_free(&rr->req), NULL);
        free(rr);
        return;
    }
    free(rr->buf);
    free(rr);
}

void moe_routing_rec_step_begin(moe_routing_rec_t *rr, int64_t step)
{
    if (rr == NULL) {
        return;
    }
    bool recorded = false, closes = false;
    (void)moe_prof_schedule(rr->cfg, step, &recorded, &closes);
    rr->in_step = recorded && rr->steps < rr->max_steps;
    rr->layers_seen = 0;
}

void moe_routing_rec_layer(moe_routing_rec_t *rr, const moe_prof_layer_sample_t *s)
{
    if (rr == NULL || !rr->in_step || s->topk_ids == NULL || s->layer < 0 ||
        s->layer >= rr->layers) {
        return;
    }
    size_t per = (size_t)rr->tokens * (size_t)rr->top_k;
    size_t at = ((size_t)rr->steps * (size_t)rr->layers + (size_t)s->layer) * per;
    memcpy(rr->ids + at, s->topk_ids, per * sizeof(int32_t));
    memcpy(rr->weights + at, s->topk_weights, per * sizeof(float));
    rr->layers_seen++;
}

void moe_routing_rec_step_end(moe_routing_rec_t *rr)
{
    if (rr != NULL && rr->in_step && rr->layers_seen == rr->layers) {
        rr->steps++;
    }
    if (rr != NULL) {
        rr->in_step = false;
    }
}

void moe_routing_rec_message(moe_routing_rec_t *rr, const void **buf, size_t *len)
{
    /* the weights follow the ids of max_steps: a shorter recording moves them up */
    size_t n = (size_t)rr->steps * (size_t)rr->layers * (size_t)rr->tokens * (size_t)rr->top_k;
    if (rr->steps < rr->max_steps) {
        memmove(rr->ids + n, rr->weights, n * sizeof(float));
        rr->weights = (float *)(rr->ids + n);
        rr->max_steps = rr->steps; /* nothing more is recorded after this */
    }
    moe_routing_msg_header(rr->buf, rr->steps, rr->token_first, rr->tokens, rr->layers,
                           rr->top_k);
    *buf = rr->buf;
    *len = MOE_ROUTING_MSG_HEADER + n * 8;
}

moe_status_t moe_routing_rec_send(moe_routing_rec_t *rr, MPI_Comm comm, moe_error_t *err)
{
    const void *buf;
    size_t len;
    moe_routing_rec_message(rr, &buf, &len);
    return MOE_MPI(MPI_Isend(buf, (int)len, MPI_BYTE, 0, MOE_PROF_TAG_ROUTING, comm, &rr->req),
                   err);
}

void moe_routing_rec_send_done(moe_routing_rec_t *rr, int64_t deadline_ns)
{
    if (rr == NULL || rr->req == MPI_REQUEST_NULL) {
        return;
    }
    moe_poll_t poll;
    moe_poll_begin_at(&poll, deadline_ns, false);
    (void)moe_poll_request(&rr->req, &poll, NULL); /* on time out destroy releases it */
}
