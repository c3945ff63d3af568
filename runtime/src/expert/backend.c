/* The calls into an attached expert back-end (backend.h): every caller (the layer,
 * layer/moe_layer.c) goes through these, never through be->ops itself. Each is the slot
 * of the same name; the back-ends' own files fill the table. */
#include <string.h>

#include "expert/backend.h"

const char *moe_expert_backend_name(const moe_expert_backend_t *be)
{
    return be->ops->name;
}

moe_status_t moe_expert_backend_gate(moe_expert_backend_t *be, int layer, const float *x,
                                     int64_t tokens, moe_error_t *err)
{
    return be->ops->gate(be, layer, x, tokens, err);
}

moe_status_t moe_expert_backend_permute(moe_expert_backend_t *be, const float *x,
                                        const void **after, moe_error_t *err)
{
    return be->ops->permute(be, x, after, err);
}

moe_status_t moe_expert_backend_arrived(moe_expert_backend_t *be, int c, moe_error_t *err)
{
    return be->ops->arrived(be, c, err);
}

moe_status_t moe_expert_backend_expert(moe_expert_backend_t *be, int layer, int le, int call,
                                       const int64_t *from, const int64_t *n, int64_t total,
                                       moe_error_t *err)
{
    return be->ops->expert(be, layer, le, call, from, n, total, err);
}

bool moe_expert_backend_has_pairs(const moe_expert_backend_t *be)
{
    return be->ops->pairs != NULL;
}

moe_status_t moe_expert_backend_pairs(moe_expert_backend_t *be, int layer, int le, int call,
                                      const int32_t *rows, const float *w, int64_t n,
                                      moe_error_t *err)
{
    return be->ops->pairs(be, layer, le, call, rows, w, n, err);
}

moe_status_t moe_expert_backend_computed(moe_expert_backend_t *be, int c, const void **after,
                                         moe_error_t *err)
{
    return be->ops->computed(be, c, after, err);
}

bool moe_expert_backend_has_shared(const moe_expert_backend_t *be)
{
    return be->ops->shared != NULL;
}

moe_status_t moe_expert_backend_shared(moe_expert_backend_t *be, int layer, const float *x,
                                       int64_t tokens, moe_error_t *err)
{
    return be->ops->shared(be, layer, x, tokens, err);
}

moe_status_t moe_expert_backend_merge(moe_expert_backend_t *be, float *x, int64_t tokens,
                                      moe_error_t *err)
{
    return be->ops->merge(be, x, tokens, err);
}

moe_status_t moe_expert_backend_finish(moe_expert_backend_t *be, moe_prof_call_t *calls,
                                       int num_calls, int64_t *expert_ns, moe_error_t *err)
{
    return be->ops->finish(be, calls, num_calls, expert_ns, err);
}

void moe_expert_backend_destroy(moe_expert_backend_t *be)
{
    if (be == NULL) {
        return;
    }
    if (be->ops != NULL && be->ops->destroy != NULL) {
        be->ops->destroy(be);
    }
    memset(be, 0, sizeof(*be));
}
