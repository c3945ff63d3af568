/* The routing message (moe_proto/routing_msg.h) and rank 0's gather of them
 * (gather/routing_gather.h) on one rank: a whole set assembles in token order; a message
 * whose tokens do not fit the step, including one whose first token is so large that the
 * sum of its first token and its count passes INT64_MAX, is dropped with the reason and
 * the set is incomplete (no write out of bounds: the ASan build runs this too). */
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gather/routing_gather.h"
#include "moe/clock.h"
#include "moe_proto/routing_msg.h"
#include "test_util.h"

/* A message of one step, one layer, top-1: token t (global first + t) chose expert
 * 10 * (first + t) with weight first + t. */
static unsigned char *message(int64_t first, int64_t tokens, size_t *len)
{
    *len = moe_routing_msg_size(1, tokens, 1, 1);
    unsigned char *m = calloc(1, *len);
    if (m == NULL) {
        return NULL;
    }
    moe_routing_msg_header(m, 1, first, tokens, 1, 1);
    int32_t *ids = (int32_t *)(m + MOE_ROUTING_MSG_HEADER);
    float *w = (float *)(ids + tokens);
    for (int64_t t = 0; t < tokens && first <= INT32_MAX / 10 - tokens; t++) {
        ids[t] = (int32_t)(10 * (first + t));
        w[t] = (float)(first + t);
    }
    return m;
}

static void test_decode(void)
{
    size_t len;
    moe_routing_msg_t m;
    moe_error_t err;
    unsigned char *ok = message(2, 3, &len);
    CHECK(ok != NULL);
    CHECK_INT_EQ(moe_routing_msg_decode(ok, len, &m, &err), MOE_OK);
    CHECK_INT_EQ(m.token_first, 2);
    CHECK_INT_EQ(m.tokens, 3);
    CHECK_INT_EQ(m.ids[2], 40);
    CHECK_NEAR(m.weights[0], 2.0, 0.0);
    /* one byte short, one too many */
    CHECK_INT_EQ(moe_routing_msg_decode(ok, len - 4, &m, &err), MOE_ERR_FORMAT);
    CHECK_STR_CONTAINS(err.msg, "do not hold");
    free(ok);
    /* first + tokens past INT64_MAX */
    unsigned char *big = message(INT64_MAX - 1, 4, &len);
    CHECK(big != NULL);
    CHECK_INT_EQ(moe_routing_msg_decode(big, len, &m, &err), MOE_ERR_FORMAT);
    free(big);
    unsigned char *neg = message(-1, 4, &len);
    CHECK_INT_EQ(moe_routing_msg_decode(neg, len, &m, &err), MOE_ERR_FORMAT);
    free(neg);
}

static void gather(const moe_config_t *cfg, int64_t first, int64_t tokens,
                   moe_routing_set_t *out)
{
    size_t len;
    unsigned char *m = message(first, tokens, &len);
    CHECK(m != NULL);
    /* no other rank: a set this message does not complete waits out the deadline */
    moe_gather_routing(cfg, MPI_COMM_SELF, m, len, moe_now_ns() + 50 * 1000000LL, out);
    free(m);
}

static void test_gather(void)
{
    static moe_config_t cfg; /* zeroed: the gather reads the layers, top-k and tokens */
    cfg.num_layers = 1;
    cfg.top_k = 1;
    cfg.tokens_per_step = 4;
    moe_routing_set_t s;
    gather(&cfg, 0, 4, &s);
    CHECK(s.complete);
    CHECK_INT_EQ(s.steps, 1);
    CHECK_INT_EQ(s.tokens, 4);
    for (int t = 0; s.complete && t < 4; t++) {
        CHECK_INT_EQ(s.ids[t], 10 * t);
        CHECK_NEAR(s.weights[t], (double)t, 0.0);
    }
    moe_routing_set_free(&s);
    /* tokens 2..5 of a 4-token step */
    gather(&cfg, 2, 4, &s);
    CHECK(!s.complete);
    CHECK_STR_CONTAINS(s.why, "rank 0's routing was dropped");
    CHECK_STR_CONTAINS(s.why, "does not fit");
    moe_routing_set_free(&s);
    /* a first token near INT64_MAX: first + tokens would wrap negative and pass */
    gather(&cfg, INT64_MAX - 1, 4, &s);
    CHECK(!s.complete);
    CHECK_STR_CONTAINS(s.why, "rank 0's routing was dropped");
    CHECK(s.ids == NULL);
    moe_routing_set_free(&s);
    /* within the decoder's bound but past the step: the gather's own check */
    gather(&cfg, INT64_MAX - 4, 4, &s);
    CHECK(!s.complete);
    CHECK_STR_CONTAINS(s.why, "does not fit");
    moe_routing_set_free(&s);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    test_decode();
    test_gather();
    MPI_Finalize();
    return moe_test_finish("test_routing_msg");
}
