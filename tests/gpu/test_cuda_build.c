/* The CUDA build without a GPU: a machine with no device gets a clear "no CUDA device"
 * reason and a clean MOE_ERR_CUDA from moe_cuda_create (moed must start there and only fail
 * when the config asks for cuda); the scratch sizes the runtime reserves are the documented
 * layout; NVTX ranges compile and run in C with the project's warning flags. On a machine
 * with a GPU the same test checks the context instead. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "expert/cuda/backend_cuda.h"
#include "expert/cuda/moe_cuda.h"
#include "expert/nvtx.h"
#include "test_util.h"

#ifndef MOE_HAVE_CUDA
#error "MOE_HAVE_CUDA must reach the tests of a CUDA build (PUBLIC on the plug-in, moed_cuda)"
#endif

static void test_no_device(const char *why)
{
    moe_cuda_t *c = NULL;
    moe_error_t err;
    moe_error_clear(&err);
    CHECK_INT_EQ(moe_cuda_device_count(), 0);
    CHECK_STR_CONTAINS(why, "no CUDA device: cudaGetDeviceCount");
    CHECK(strlen(why) > strlen("no CUDA device: cudaGetDeviceCount: "));
    CHECK_INT_EQ(moe_cuda_create(0, &c, &err), MOE_ERR_CUDA);
    CHECK(c == NULL);
    CHECK_STR_CONTAINS(err.msg, "cudaSetDevice");
    CHECK_STR_CONTAINS(err.msg, "cuda_ctx.cu:");
    printf("no device: \"%s\"; moe_cuda_create: \"%s\"\n", why, err.msg);
}

static void test_device(const char *why)
{
    moe_cuda_t *c = NULL;
    moe_error_t err;
    moe_error_clear(&err);
    CHECK(moe_cuda_device_count() >= 1);
    CHECK_INT_EQ(why[0], '\0');
    CHECK_INT_EQ(moe_cuda_create(0, &c, &err), MOE_OK);
    CHECK(c != NULL && moe_cuda_device_name(c)[0] != '\0');
    CHECK(moe_cuda_stream(c, MOE_CUDA_STREAM_COMPUTE) != moe_cuda_stream(c, MOE_CUDA_STREAM_COMM));
    printf("device 0: %s\n", moe_cuda_device_name(c));
    moe_cuda_destroy(c);
}

static void test_available(void)
{
    char why[256] = "unset";
    bool avail = moe_cuda_available(why, sizeof why);
    if (avail) {
        test_device(why);
    } else {
        test_no_device(why);
    }
    CHECK(moe_cuda_available(NULL, 0) == avail);
    moe_cuda_destroy(NULL);
    moe_cuda_event_destroy(NULL);
    CHECK_STR_CONTAINS(moe_cuda_device_name(NULL), "");
}

/* Each part is rounded up to 256 bytes: input in dtype (none for F32), up projection F32,
 * activation in dtype. */
static void test_scratch_bytes(void)
{
    /* 100*1024*2 + 100*7168*4 + 100*3584*2, all multiples of 256 already. */
    CHECK_INT_EQ(moe_cuda_expert_scratch_bytes(MOE_ACT_SWIGLU, 1024, 3584, 100, MOE_DTYPE_BF16),
                 204800 + 2867200 + 716800);
    /* 402 -> 512, 540 -> 768, 270 -> 512 */
    CHECK_INT_EQ(moe_cuda_expert_scratch_bytes(MOE_ACT_GELU, 67, 45, 3, MOE_DTYPE_F16), 1792);
    /* F32 reads the input in place: 0 + (1080 -> 1280) + (540 -> 768) */
    CHECK_INT_EQ(moe_cuda_expert_scratch_bytes(MOE_ACT_SWIGLU, 67, 45, 3, MOE_DTYPE_F32), 2048);
    CHECK_INT_EQ(moe_cuda_expert_scratch_bytes(MOE_ACT_SWIGLU, 67, 45, 0, MOE_DTYPE_F32), 0);
    CHECK_INT_EQ(moe_cuda_expert_scratch_bytes(MOE_ACT_GELU, 67, 45, -1, MOE_DTYPE_BF16), 0);
    size_t prev = 0;
    for (int64_t rows = 1; rows < 300; rows += 7) { /* a bigger reservation fits fewer rows */
        size_t b = moe_cuda_expert_scratch_bytes(MOE_ACT_SWIGLU, 33, 17, rows, MOE_DTYPE_BF16);
        CHECK(b > prev && b % 256 == 0);
        prev = b;
    }
    CHECK_INT_EQ(moe_cuda_dtype_size(MOE_DTYPE_F32), 4);
    CHECK_INT_EQ(moe_cuda_dtype_size(MOE_DTYPE_BF16), 2);
    CHECK_INT_EQ(moe_cuda_dtype_size(MOE_DTYPE_F16), 2);
}

static void test_mem_usage_and_nvtx(void)
{
    uint64_t cur = 1, peak = 1;
    moe_cuda_mem_usage(&cur, &peak);
    CHECK_INT_EQ(cur, 0);
    CHECK_INT_EQ(peak, 0);
    moe_cuda_mem_usage(NULL, NULL);
    moe_nvtx_push("test_cuda_build"); /* no tool attached: a no-op that must not crash */
    moe_nvtx_pop();
}

/* The back-end's kernels and buffer sizes know swiglu and gelu: any other activation is
 * refused at attach, before any device work (the config refuses it for cuda already). */
static void test_attach_refuses_activation(void)
{
    moe_config_t cfg;
    moe_cfg_defaults(&cfg);
    cfg.activation = MOE_ACT_SWIGLU_OAI;
    moe_expert_io_t io = {.cfg = &cfg};
    moe_expert_backend_t be = {0};
    moe_error_t err;
    moe_error_clear(&err);
    CHECK_INT_EQ(moe_expert_cuda_attach(&be, &io, NULL, &err), MOE_ERR_CONFIG);
    CHECK_STR_CONTAINS(err.msg, "not swiglu_oai");
    CHECK(be.impl == NULL);
    cfg.activation = MOE_ACT_GELU; /* allowed: the next refusal is the missing context */
    moe_error_clear(&err);
    CHECK_INT_EQ(moe_expert_cuda_attach(&be, &io, NULL, &err), MOE_ERR_INTERNAL);
}

int main(void)
{
    test_available();
    test_scratch_bytes();
    test_mem_usage_and_nvtx();
    test_attach_refuses_activation();
    return moe_test_finish("test_cuda_build");
}
