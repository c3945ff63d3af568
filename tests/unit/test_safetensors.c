/* Tests for the safetensors reader and writer: conversions, round trips, a hand-written
 * header, lookups, and a long list of corrupt or lying files that must each be rejected
 * with the right code and a message naming the file and the problem. */
#include "moe_model/safetensors.h"
#include "moe/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/checkpoint.h"
#include "test_util.h"

static char g_dir[] = "/tmp/moe_test_st_XXXXXX";

static void path_in(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", g_dir, name);
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static int write_bytes(const char *path, const void *buf, size_t len)
{
    FILE *fp = fopen(path, "wb");
    if (fp == NULL) {
        return -1;
    }
    size_t w = fwrite(buf, 1, len, fp);
    return (fclose(fp) == 0 && w == len) ? 0 : -1;
}

/* 8-byte LE length + header bytes + data bytes (zeros when data is NULL). */
static unsigned char *make_st(const char *hdr, size_t hdr_len, const unsigned char *data,
                              size_t data_len, size_t *out_len)
{
    unsigned char *buf = calloc(1, 8 + hdr_len + data_len + 1);
    if (buf == NULL) {
        return NULL;
    }
    for (int i = 0; i < 8; i++) {
        buf[i] = (unsigned char)((uint64_t)hdr_len >> (8 * i));
    }
    memcpy(buf + 8, hdr, hdr_len);
    if (data != NULL) {
        memcpy(buf + 8 + hdr_len, data, data_len);
    }
    *out_len = 8 + hdr_len + data_len;
    return buf;
}

/* The bytes must be rejected with `code` and a message containing `needle`, both from
 * memory and from a file, and the out handle must stay untouched. */
static void expect_bad_bytes(const char *what, const void *bytes, size_t len,
                             moe_status_t code, const char *needle)
{
    moe_error_t err;
    moe_st_file_t *f = NULL;
    char path[256];

    moe_error_clear(&err);
    moe_status_t rc = moe_st_open_memory(bytes, len, what, &f, &err);
    CHECK_INT_EQ(rc, code);
    CHECK(f == NULL);
    CHECK_STR_CONTAINS(err.msg, what);
    CHECK_STR_CONTAINS(err.msg, needle);
    if (rc != code || strstr(err.msg, needle) == NULL) {
        fprintf(stderr, "  case %s (memory): %s\n", what, err.msg);
    }
    moe_st_close(f);

    path_in(path, sizeof(path), what);
    CHECK_INT_EQ(write_bytes(path, bytes, len), 0);
    moe_error_clear(&err);
    f = NULL;
    rc = moe_st_open(path, &f, &err);
    CHECK_INT_EQ(rc, code);
    CHECK(f == NULL);
    CHECK_STR_CONTAINS(err.msg, path);
    CHECK_STR_CONTAINS(err.msg, needle);
    if (rc != code || strstr(err.msg, needle) == NULL) {
        fprintf(stderr, "  case %s (file): %s\n", what, err.msg);
    }
    moe_st_close(f);
    unlink(path);
}

static void expect_bad(const char *what, const char *hdr, size_t data_len, moe_status_t code,
                       const char *needle)
{
    size_t len = 0;
    unsigned char *buf = make_st(hdr, strlen(hdr), NULL, data_len, &len);
    CHECK(buf != NULL);
    if (buf != NULL) {
        expect_bad_bytes(what, buf, len, code, needle);
    }
    free(buf);
}

/* The header must open from memory; returns the tensor count, or -1. */
static int open_ok(const char *hdr, size_t data_len)
{
    size_t len = 0;
    unsigned char *buf = make_st(hdr, strlen(hdr), NULL, data_len, &len);
    moe_st_file_t *f = NULL;
    moe_error_t err;
    int n = -1;
    moe_error_clear(&err);
    if (buf != NULL && moe_st_open_memory(buf, len, "ok", &f, &err) == MOE_OK) {
        n = moe_st_count(f);
    } else {
        fprintf(stderr, "  expected to open: %s\n  error: %s\n", hdr, err.msg);
    }
    moe_st_close(f);
    free(buf);
    return n;
}

/* ------------------------------------------------------------------------------------ */

static void test_bf16(void)
{
    CHECK_INT_EQ(moe_f32_to_bf16(1.0f), 0x3F80);
    CHECK_INT_EQ(moe_f32_to_bf16(-2.0f), 0xC000);
    CHECK_INT_EQ(moe_f32_to_bf16(0.0f), 0x0000);
    CHECK_INT_EQ(moe_f32_to_bf16(-0.0f), 0x8000);
    CHECK_INT_EQ(moe_f32_to_bf16(INFINITY), 0x7F80);
    CHECK_INT_EQ(moe_f32_to_bf16(-INFINITY), 0xFF80);
    CHECK(moe_bf16_to_f32(0x3F80) == 1.0f);
    CHECK(moe_bf16_to_f32(0xC000) == -2.0f);
    /* Ties go to even; above the tie rounds up. */
    CHECK_INT_EQ(moe_f32_to_bf16(bits_f32(0x3F808000u)), 0x3F80);
    CHECK_INT_EQ(moe_f32_to_bf16(bits_f32(0x3F818000u)), 0x3F82);
    CHECK_INT_EQ(moe_f32_to_bf16(bits_f32(0x3F808001u)), 0x3F81);
    CHECK_INT_EQ(moe_f32_to_bf16(bits_f32(0x3F807FFFu)), 0x3F80);
    /* FLT_MAX is past the largest bf16 by more than half an ulp. */
    CHECK_INT_EQ(moe_f32_to_bf16(bits_f32(0x7F7FFFFFu)), 0x7F80);
    /* NaN stays NaN, even one whose payload sits only in the dropped low bits. */
    uint16_t qnan = moe_f32_to_bf16(NAN);
    uint16_t snan = moe_f32_to_bf16(bits_f32(0x7F800001u));
    CHECK((qnan & 0x7F80) == 0x7F80 && (qnan & 0x007F) != 0);
    CHECK((snan & 0x7F80) == 0x7F80 && (snan & 0x007F) != 0);
    CHECK(isnan(moe_bf16_to_f32(0x7FC0)));

    int bad = 0;
    for (uint32_t h = 0; h <= 0xFFFF; h++) {
        float f = moe_bf16_to_f32((uint16_t)h);
        uint16_t back = moe_f32_to_bf16(f);
        if (isnan(f) ? !isnan(moe_bf16_to_f32(back)) : back != h) {
            bad++;
        }
    }
    CHECK_INT_EQ(bad, 0);
}

static void test_f16(void)
{
    CHECK_INT_EQ(moe_f32_to_f16(1.0f), 0x3C00);
    CHECK_INT_EQ(moe_f32_to_f16(-2.0f), 0xC000);
    CHECK_INT_EQ(moe_f32_to_f16(-0.0f), 0x8000);
    CHECK_INT_EQ(moe_f32_to_f16(65504.0f), 0x7BFF);
    CHECK_INT_EQ(moe_f32_to_f16(65519.0f), 0x7BFF);
    CHECK_INT_EQ(moe_f32_to_f16(65520.0f), 0x7C00);
    CHECK_INT_EQ(moe_f32_to_f16(1e10f), 0x7C00);
    CHECK_INT_EQ(moe_f32_to_f16(-1e10f), 0xFC00);
    CHECK_INT_EQ(moe_f32_to_f16(INFINITY), 0x7C00);
    CHECK_INT_EQ(moe_f32_to_f16(-INFINITY), 0xFC00);
    /* Subnormals: 2^-24 is the smallest; 2^-25 ties to even (0); 1.5 * 2^-24 -> 2. */
    CHECK_INT_EQ(moe_f32_to_f16(ldexpf(1.0f, -24)), 0x0001);
    CHECK_INT_EQ(moe_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);
    CHECK_INT_EQ(moe_f32_to_f16(ldexpf(1.0f, -25) * 1.0001f), 0x0001);
    CHECK_INT_EQ(moe_f32_to_f16(ldexpf(3.0f, -25)), 0x0002);
    CHECK_INT_EQ(moe_f32_to_f16(ldexpf(1.0f, -14)), 0x0400);
    CHECK_INT_EQ(moe_f32_to_f16(ldexpf(1023.0f, -24)), 0x03FF);
    CHECK_INT_EQ(moe_f32_to_f16(ldexpf(1.0f, -30)), 0x0000);
    CHECK(moe_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
    CHECK(moe_f16_to_f32(0x03FF) == ldexpf(1023.0f, -24));
    CHECK(moe_f16_to_f32(0x8001) == -ldexpf(1.0f, -24));
    CHECK(moe_f16_to_f32(0x7BFF) == 65504.0f);
    CHECK(moe_f16_to_f32(0x3C00) == 1.0f);
    CHECK(isinf(moe_f16_to_f32(0x7C00)) && moe_f16_to_f32(0x7C00) > 0);
    CHECK(isnan(moe_f16_to_f32(0x7E00)));
    CHECK(isnan(moe_f16_to_f32(0x7C01)));
    /* Ties to even in the normal range: 1 + 2^-11 -> 1.0, 1 + 3*2^-11 -> 1 + 2^-9. */
    CHECK_INT_EQ(moe_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3C00);
    CHECK_INT_EQ(moe_f32_to_f16(1.0f + ldexpf(3.0f, -11)), 0x3C02);
    CHECK_INT_EQ(moe_f32_to_f16(bits_f32(0x3F801001u)), 0x3C01);
    uint16_t n = moe_f32_to_f16(NAN);
    uint16_t sn = moe_f32_to_f16(bits_f32(0xFF800001u));
    CHECK((n & 0x7C00) == 0x7C00 && (n & 0x03FF) != 0);
    CHECK((sn & 0x7C00) == 0x7C00 && (sn & 0x03FF) != 0 && (sn & 0x8000));

    int bad = 0;
    for (uint32_t h = 0; h <= 0xFFFF; h++) {
        float f = moe_f16_to_f32((uint16_t)h);
        uint16_t back = moe_f32_to_f16(f);
        if (isnan(f) ? !isnan(moe_f16_to_f32(back)) : back != h) {
            bad++;
        }
    }
    CHECK_INT_EQ(bad, 0);
    /* Every value exactly between two neighbouring f16s rounds to the even one. */
    bad = 0;
    for (uint32_t h = 0; h < 0x7BFF; h++) {
        double lo = moe_f16_to_f32((uint16_t)h), hi = moe_f16_to_f32((uint16_t)(h + 1));
        float mid = (float)((lo + hi) / 2);
        uint16_t want = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        if (moe_f32_to_f16(mid) != want) {
            bad++;
        }
    }
    CHECK_INT_EQ(bad, 0);
}

/* ------------------------------------------------------------------------------------ */

static float g_a[6], g_b[24], g_c[4], g_s[1];

static void fill_inputs(void)
{
    for (int i = 0; i < 6; i++) {
        g_a[i] = (float)i * 1.25f - 3.0f;
    }
    g_a[3] = -0.0f;
    g_a[4] = ldexpf(1.0f, -140); /* an f32 subnormal */
    for (int i = 0; i < 24; i++) {
        g_b[i] = (float)i * 0.5f - 6.0f;
    }
    g_c[0] = 1.0f, g_c[1] = -2.0f, g_c[2] = 65504.0f, g_c[3] = ldexpf(1.0f, -24);
    g_s[0] = 3.14159f;
}

/* F32 [2,3], BF16 [2,3,4], F16 [4], F32 scalar, empty BF16 [0,5]. */
static int write_basic(const char *path, moe_error_t *err)
{
    moe_st_out_tensor_t t[5] = {
        {"layers.0.w1", MOE_ST_F32, 2, {2, 3}, g_a},
        {"layers.0.w2", MOE_ST_BF16, 3, {2, 3, 4}, g_b},
        {"layers.0.w3", MOE_ST_F16, 1, {4}, g_c},
        {"scale", MOE_ST_F32, 0, {0}, g_s},
        {"empty", MOE_ST_BF16, 2, {0, 5}, NULL},
    };
    return moe_st_write(path, t, 5, err);
}

static void test_round_trip(void)
{
    char path[256];
    moe_error_t err;
    moe_st_file_t *f = NULL;
    path_in(path, sizeof(path), "basic.safetensors");
    fill_inputs();
    CHECK_INT_EQ(write_basic(path, &err), MOE_OK);
    CHECK_INT_EQ(moe_st_open(path, &f, &err), MOE_OK);
    if (f == NULL) {
        fprintf(stderr, "  %s\n", err.msg);
        return;
    }
    CHECK_INT_EQ(moe_st_count(f), 5);
    const moe_st_tensor_info_t *t0 = moe_st_at(f, 0), *t1 = moe_st_at(f, 1);
    CHECK(strcmp(t0->name, "layers.0.w1") == 0 && t0->dtype == MOE_ST_F32);
    CHECK(strcmp(t1->dtype_name, "BF16") == 0 && t1->dtype == MOE_ST_BF16);
    CHECK_INT_EQ(t1->ndim, 3);
    CHECK(t1->shape[0] == 2 && t1->shape[1] == 3 && t1->shape[2] == 4);
    CHECK_INT_EQ(t0->data_begin, 0);
    CHECK_INT_EQ(t0->data_end, 24);
    CHECK_INT_EQ(t1->data_begin, 24);
    CHECK_INT_EQ(t1->data_end, 24 + 48);
    CHECK_INT_EQ(moe_st_at(f, 2)->dtype, MOE_ST_F16);
    CHECK_INT_EQ(moe_st_at(f, 3)->ndim, 0);
    CHECK(moe_st_at(f, 5) == NULL && moe_st_at(f, -1) == NULL);
    CHECK(moe_st_find(f, "scale") == moe_st_at(f, 3));
    CHECK(moe_st_find(f, "nope") == NULL);

    float a[6], b[24], c[4], s[1];
    CHECK_INT_EQ(moe_st_read_f32(f, "layers.0.w1", a, 6, &err), MOE_OK);
    int same = 1;
    for (int i = 0; i < 6; i++) {
        same &= f32_bits(a[i]) == f32_bits(g_a[i]);
    }
    CHECK(same);
    int64_t bshape[3] = {2, 3, 4};
    CHECK_INT_EQ(moe_st_read_f32_shaped(f, "layers.0.w2", 3, bshape, b, &err), MOE_OK);
    same = 1;
    for (int i = 0; i < 24; i++) {
        same &= b[i] == g_b[i]; /* all exactly representable in bf16 */
    }
    CHECK(same);
    CHECK_INT_EQ(moe_st_read_f32(f, "layers.0.w3", c, 4, &err), MOE_OK);
    CHECK(c[0] == 1.0f && c[1] == -2.0f && c[2] == 65504.0f && c[3] == ldexpf(1.0f, -24));
    CHECK_INT_EQ(moe_st_read_f32_shaped(f, "scale", 0, NULL, s, &err), MOE_OK);
    CHECK(s[0] == g_s[0]);
    int64_t eshape[2] = {0, 5};
    CHECK_INT_EQ(moe_st_read_f32_shaped(f, "empty", 2, eshape, NULL, &err), MOE_OK);
    CHECK_INT_EQ(moe_st_read_f32(f, "empty", NULL, 0, &err), MOE_OK);
    moe_st_close(f);

    /* The header is padded so the data starts 8-byte aligned. */
    unsigned char len8[8] = {0};
    FILE *fp = fopen(path, "rb");
    CHECK(fp != NULL && fread(len8, 1, 8, fp) == 8);
    if (fp != NULL) {
        fclose(fp);
    }
    CHECK_INT_EQ(len8[0] % 8, 0);
}

/* Arbitrary values through each dtype come back as the conversion functions say, across
 * more than one 64 KiB writer chunk; a NaN and an infinity are written, and refused when read. */
static void test_large_round_trip(void)
{
    enum { N = 100003 };
    static float src[N], dst[N];
    static const moe_st_dtype_t dts[3] = {MOE_ST_F32, MOE_ST_BF16, MOE_ST_F16};
    char path[256];
    moe_error_t err;
    uint32_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = (uint32_t)(((uint64_t)x * 1664525u + 1013904223u) & 0xFFFFFFFFu);
        src[i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 1000.0f;
    }
    src[7] = NAN, src[8] = INFINITY, src[9] = 1e6f, src[10] = -1e-7f;
    path_in(path, sizeof(path), "large.safetensors");
    for (int d = 0; d < 3; d++) {
        moe_st_out_tensor_t t = {"big", dts[d], 2, {N, 1}, src};
        moe_st_file_t *f = NULL;
        CHECK_INT_EQ(moe_st_write(path, &t, 1, &err), MOE_OK);
        CHECK_INT_EQ(moe_st_open(path, &f, &err), MOE_OK);
        /* the whole tensor is refused (elements 7 and 8 are not finite): read around them */
        CHECK_INT_EQ(moe_st_read_f32(f, "big", dst, N, &err), MOE_ERR_WEIGHTS);
        CHECK_STR_CONTAINS(err.msg, "holds NaN at element 7");
        CHECK_INT_EQ(moe_st_read_f32_range(f, "big", 0, 7, dst, &err), MOE_OK);
        int from = d == 2 ? 10 : 9; /* 1e6 is +inf in F16, so refused there too */
        if (d == 2) {
            CHECK_INT_EQ(moe_st_read_f32_range(f, "big", 9, N - 9, dst + 9, &err),
                         MOE_ERR_WEIGHTS);
            CHECK_STR_CONTAINS(err.msg, "(F16) holds +inf at element 9");
        }
        CHECK_INT_EQ(moe_st_read_f32_range(f, "big", (uint64_t)from, (size_t)(N - from),
                                           dst + from, &err), MOE_OK);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            if (i >= 7 && i < from) {
                continue;
            }
            float want = d == 0   ? src[i]
                         : d == 1 ? moe_bf16_to_f32(moe_f32_to_bf16(src[i]))
                                  : moe_f16_to_f32(moe_f32_to_f16(src[i]));
            if (isnan(want) ? !isnan(dst[i]) : f32_bits(dst[i]) != f32_bits(want)) {
                bad++;
            }
        }
        CHECK_INT_EQ(bad, 0);
        moe_st_close(f);
    }
}

static void test_lookup_errors(void)
{
    char path[256];
    moe_error_t err;
    moe_st_file_t *f = NULL;
    float buf[32];
    path_in(path, sizeof(path), "basic.safetensors");
    CHECK_INT_EQ(moe_st_open(path, &f, &err), MOE_OK);
    if (f == NULL) {
        return;
    }
    int64_t want[2] = {2, 4};
    CHECK_INT_EQ(moe_st_read_f32_shaped(f, "layers.0.w1", 2, want, buf, &err), MOE_ERR_WEIGHTS);
    CHECK_STR_CONTAINS(err.msg, path);
    CHECK_STR_CONTAINS(err.msg, "'layers.0.w1' has shape [2, 3] but [2, 4] was expected");
    int64_t want3[3] = {2, 3, 1};
    CHECK_INT_EQ(moe_st_read_f32_shaped(f, "layers.0.w1", 3, want3, buf, &err), MOE_ERR_WEIGHTS);
    CHECK_STR_CONTAINS(err.msg, "[2, 3, 1]");
    CHECK_INT_EQ(moe_st_read_f32(f, "layers.0.w1", buf, 7, &err), MOE_ERR_WEIGHTS);
    CHECK_STR_CONTAINS(err.msg, "has 6 elements (shape [2, 3]) but 7 were expected");

    CHECK_INT_EQ(moe_st_read_f32(f, "layers.0.w4", buf, 6, &err), MOE_ERR_WEIGHTS);
    CHECK_STR_CONTAINS(err.msg, path);
    CHECK_STR_CONTAINS(err.msg, "tensor 'layers.0.w4' not found");
    CHECK_STR_CONTAINS(err.msg, "similar: 'layers.0.w1', 'layers.0.w2', 'layers.0.w3'");
    CHECK_INT_EQ(moe_st_read_f32_shaped(f, "zzz", 1, want, buf, &err), MOE_ERR_WEIGHTS);
    CHECK_STR_CONTAINS(err.msg, "tensor 'zzz' not found (the file has 5 tensors)");
    CHECK(strstr(err.msg, "similar") == NULL);

    CHECK_INT_EQ(moe_st_read_f32(f, NULL, buf, 6, &err), MOE_ERR_INVALID_ARG);
    CHECK_INT_EQ(moe_st_read_f32_shaped(f, "scale", 9, want, buf, &err), MOE_ERR_INVALID_ARG);
    moe_st_close(f);

    moe_st_close(NULL);
    CHECK_INT_EQ(moe_st_count(NULL), 0);
    CHECK(moe_st_at(NULL, 0) == NULL);
    CHECK(moe_st_find(NULL, "x") == NULL);
}

/* A file that shrinks after it was opened: the read reports it, never returns garbage. */
static void test_shrunk_after_open(void)
{
    char path[256];
    moe_error_t err;
    moe_st_file_t *f = NULL;
    float buf[24];
    struct stat st;
    path_in(path, sizeof(path), "shrunk.safetensors");
    CHECK_INT_EQ(write_basic(path, &err), MOE_OK);
    CHECK_INT_EQ(moe_st_open(path, &f, &err), MOE_OK);
    CHECK(stat(path, &st) == 0);
    if (f == NULL) {
        return;
    }
    /* Data: w1 [0, 24), w2 [24, 72), w3 [72, 80), scale [80, 84): keep 30 bytes. */
    CHECK(truncate(path, st.st_size - 84 + 30) == 0);
    CHECK_INT_EQ(moe_st_read_f32(f, "layers.0.w1", buf, 6, &err), MOE_OK);
    CHECK_INT_EQ(moe_st_read_f32(f, "layers.0.w2", buf, 24, &err), MOE_ERR_TRUNCATED);
    CHECK_STR_CONTAINS(err.msg, path);
    CHECK_STR_CONTAINS(err.msg, "truncated after opening");
    CHECK_STR_CONTAINS(err.msg, "of tensor 'layers.0.w2'"); /* which tensor it was reading */
    moe_st_close(f);
    unlink(path);
}

/* A header written by hand: whitespace, escapes in names, __metadata__ holding every JSON
 * value type, an ignored unknown field, an I64 tensor, tensors out of offset order. */
static const char g_hand_header[] =
    "{ \"__metadata__\" : {\"format\": \"pt\", \"nested\": {\"a\": [1, -2.5e+3, 0.5E-2, true,"
    " false, null, \"x\\n\", {}, []]}, \"n\": 0},\n"
    "  \"w\\\"q\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]},\n"
    "\t\"tab\\tname\\u00e9\\ud83d\\ude00\\/\\\\\" :{\"data_offsets\":[0,4],\"shape\":[2],"
    "\"dtype\":\"BF16\",\"extra\":{\"ignored\":[1,2]}},\r\n"
    "  \"h\": {\"dtype\": \"F16\", \"shape\": [1, 2], \"data_offsets\": [4, 8]},"
    "  \"ids\": {\"dtype\": \"I64\", \"shape\": [1], \"data_offsets\": [16, 24]},"
    "  \"nothing\": {\"dtype\": \"F32\", \"shape\": [0, 3], \"data_offsets\": [16, 16]}"
    "}";

static const unsigned char g_hand_data[24] = {
    0x80, 0x3F, 0x00, 0xC0,                         /* BF16 1.0, -2.0 */
    0x00, 0x3C, 0xFF, 0x7B,                         /* F16 1.0, 65504 */
    0x00, 0x00, 0xC0, 0x3F, 0x00, 0x00, 0x80, 0xBE, /* F32 1.5, -0.25 */
    7, 0, 0, 0, 0, 0, 0, 0,                         /* I64 7 */
};

static void check_hand_file(moe_st_file_t *f, const char *name)
{
    static const char escaped[] = "tab\tname\xc3\xa9\xf0\x9f\x98\x80/\\";
    moe_error_t err;
    float v[2] = {0, 0};
    CHECK_INT_EQ(moe_st_count(f), 5);
    CHECK(strcmp(moe_st_at(f, 0)->name, "w\"q") == 0);
    CHECK(strcmp(moe_st_at(f, 1)->name, escaped) == 0);
    CHECK(moe_st_find(f, escaped) == moe_st_at(f, 1));
    CHECK_INT_EQ(moe_st_read_f32(f, "w\"q", v, 2, &err), MOE_OK);
    CHECK(v[0] == 1.5f && v[1] == -0.25f);
    CHECK_INT_EQ(moe_st_read_f32(f, escaped, v, 2, &err), MOE_OK);
    CHECK(v[0] == 1.0f && v[1] == -2.0f);
    int64_t hs[2] = {1, 2};
    CHECK_INT_EQ(moe_st_read_f32_shaped(f, "h", 2, hs, v, &err), MOE_OK);
    CHECK(v[0] == 1.0f && v[1] == 65504.0f);
    const moe_st_tensor_info_t *ids = moe_st_find(f, "ids");
    CHECK(ids != NULL && ids->dtype == MOE_ST_OTHER && strcmp(ids->dtype_name, "I64") == 0);
    CHECK_INT_EQ(moe_st_read_f32(f, "ids", v, 1, &err), MOE_ERR_UNSUPPORTED);
    CHECK_STR_CONTAINS(err.msg, name);
    CHECK_STR_CONTAINS(err.msg, "'ids' has dtype I64");
    CHECK_INT_EQ(moe_st_read_f32(f, "nothing", v, 0, &err), MOE_OK);
}

static void test_hand_written(void)
{
    char hdr[sizeof(g_hand_header) + 8];
    char path[256];
    size_t hlen = strlen(g_hand_header), len = 0;
    moe_error_t err;
    moe_st_file_t *f = NULL;

    memcpy(hdr, g_hand_header, hlen);
    while (hlen % 8 != 0) {
        hdr[hlen++] = ' '; /* the padding writers add */
    }
    unsigned char *buf = make_st(hdr, hlen, g_hand_data, sizeof(g_hand_data), &len);
    CHECK_INT_EQ(moe_st_open_memory(buf, len, "hand", &f, &err), MOE_OK);
    if (f != NULL) {
        check_hand_file(f, "hand");
    } else {
        fprintf(stderr, "  %s\n", err.msg);
    }
    moe_st_close(f);
    f = NULL;

    path_in(path, sizeof(path), "hand.safetensors");
    CHECK_INT_EQ(write_bytes(path, buf, len), 0);
    CHECK_INT_EQ(moe_st_open(path, &f, &err), MOE_OK);
    if (f != NULL) {
        check_hand_file(f, path);
    }
    moe_st_close(f);
    unlink(path);

    /* With no name, memory files are called <memory> in messages. */
    f = NULL;
    CHECK_INT_EQ(moe_st_open_memory(buf, 5, NULL, &f, &err), MOE_ERR_TRUNCATED);
    CHECK_STR_CONTAINS(err.msg, "<memory>");
    free(buf);
}

/* Headers that must open: the edges of what is allowed. */
static void test_valid_edges(void)
{
    char deep[256] = "{\"__metadata__\":{\"d\":";
    for (int i = 0; i < 30; i++) {
        strcat(deep, "[");
    }
    for (int i = 0; i < 30; i++) {
        strcat(deep, "]");
    }
    strcat(deep, "}}");
    CHECK_INT_EQ(open_ok(deep, 0), 0);
    CHECK_INT_EQ(open_ok("{}", 0), 0);
    CHECK_INT_EQ(open_ok("  {  }      ", 0), 0);
    CHECK_INT_EQ(open_ok("{\"__metadata__\":{}}", 16), 0);
    CHECK_INT_EQ(open_ok("{\"a\":{\"dtype\":\"F4\",\"shape\":[4],\"data_offsets\":[0,2]},"
                         "\"b\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[2,4]},"
                         "\"c\":{\"dtype\":\"BOOL\",\"shape\":[],\"data_offsets\":[4,5]},"
                         "\"d\":{\"dtype\":\"F6_E3M2\",\"shape\":[4],\"data_offsets\":[5,8]}}",
                         8), 4);
    /* Empty tensors may sit anywhere, even inside another's range; holes are fine. */
    CHECK_INT_EQ(open_ok("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                         "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
                         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}",
                         20), 3);
    CHECK_INT_EQ(open_ok("{\"big\":{\"dtype\":\"U8\",\"shape\":[9223372036854775807,0],"
                         "\"data_offsets\":[0,0]}}", 0), 1);
}

static void test_corrupt_sizes(void)
{
    unsigned char tiny[5] = {1, 0, 0, 0, 0};
    expect_bad_bytes("short_file", tiny, sizeof(tiny), MOE_ERR_TRUNCATED,
                     "5 bytes, shorter than the 8-byte header length");
    expect_bad_bytes("empty_file", tiny, 0, MOE_ERR_TRUNCATED, "0 bytes");

    unsigned char big[8 + 10] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    expect_bad_bytes("header_past_end", big, sizeof(big), MOE_ERR_TRUNCATED,
                     "header length 100 but only 10 bytes follow it");

    unsigned char huge[16] = {0, 0, 0, 0, 0, 0, 0, 0x80, '{', '}'};
    expect_bad_bytes("header_2pow63", huge, sizeof(huge), MOE_ERR_FORMAT,
                     "header length 9223372036854775808 is over the 100 MiB limit");
    unsigned char ones[16] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, '{', '}'};
    expect_bad_bytes("header_all_ones", ones, sizeof(ones), MOE_ERR_FORMAT, "100 MiB limit");

    expect_bad("beyond_data", "{\"a.weight\":{\"dtype\":\"F32\",\"shape\":[1024],"
               "\"data_offsets\":[0,4096]}}", 1000, MOE_ERR_TRUNCATED,
               "tensor 'a.weight': data_offsets [0, 4096] need 4096 bytes but the file has "
               "1000 bytes of data (truncated?)");
    expect_bad("end_before_begin", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],"
               "\"data_offsets\":[8,4]}}", 16, MOE_ERR_FORMAT,
               "tensor 'a': data_offsets [8, 4]: end is before begin");
    expect_bad("size_mismatch", "{\"a\":{\"dtype\":\"BF16\",\"shape\":[2,2],"
               "\"data_offsets\":[0,12]}}", 16, MOE_ERR_FORMAT,
               "data_offsets [0, 12] hold 12 bytes but shape [2, 2] of BF16 needs 8");
    expect_bad("overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 16,
               MOE_ERR_FORMAT, "tensors 'a' [0, 8] and 'b' [4, 12] overlap");
    expect_bad("overlap_nested", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],"
               "\"data_offsets\":[0,16]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],"
               "\"data_offsets\":[16,20]},\"c\":{\"dtype\":\"I8\",\"shape\":[2],"
               "\"data_offsets\":[2,4]}}", 20, MOE_ERR_FORMAT, "overlap");
    expect_bad("same_range", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
               MOE_ERR_FORMAT, "overlap");
    expect_bad("duplicate", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
               MOE_ERR_FORMAT, "a key appears twice in one object (duplicate object key near '\"a\"')");
    expect_bad("negative_dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,-1],"
               "\"data_offsets\":[0,4]}}", 8, MOE_ERR_FORMAT,
               "tensor 'a': shape: expected a non-negative integer, found -1");
    expect_bad("too_many_dims", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
               "\"data_offsets\":[0,4]}}", 8, MOE_ERR_FORMAT, "more than 8 dimensions");
    expect_bad("shape_overflow", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,"
               "2],\"data_offsets\":[0,0]}}", 8, MOE_ERR_FORMAT,
               "shape [4294967296, 4294967296, 2] overflows 64 bits");
    expect_bad("bytes_overflow", "{\"a\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],"
               "\"data_offsets\":[0,0]}}", 8, MOE_ERR_FORMAT, "overflows 64 bits");
    /* jansson holds integers as int64: one past INT64_MAX is refused while parsing. */
    expect_bad("dim_too_large", "{\"a\":{\"dtype\":\"F32\",\"shape\":[9223372036854775808],"
               "\"data_offsets\":[0,0]}}", 8, MOE_ERR_FORMAT,
               "header line 1 col 48 (file offset 56): number out of range (integers must fit "
               "in 63 bits) (too big integer near '9223372036854775808')");
    expect_bad("offset_overflow", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
               "\"data_offsets\":[0,18446744073709551616]}}", 8, MOE_ERR_FORMAT,
               "too big integer near '18446744073709551616'");
    expect_bad("offset_u64", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],"
               "\"data_offsets\":[18446744073709551614,18446744073709551615]}}", 8,
               MOE_ERR_FORMAT, "too big integer near '18446744073709551614'");
    /* The largest offsets that parse must not overflow the bounds arithmetic. */
    expect_bad("offset_max", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],"
               "\"data_offsets\":[9223372036854775806,9223372036854775807]}}", 8,
               MOE_ERR_TRUNCATED, "need 9223372036854775807 bytes");
    expect_bad("unknown_dtype", "{\"a\":{\"dtype\":\"Q7\",\"shape\":[1],"
               "\"data_offsets\":[0,4]}}", 8, MOE_ERR_FORMAT, "unknown dtype 'Q7' (known: F32");
    expect_bad("sub_byte", "{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,1]}}",
               8, MOE_ERR_FORMAT, "not a whole number of bytes");
}

static void test_corrupt_json(void)
{
    static const struct {
        const char *what, *hdr, *needle;
    } cases[] = {
        {"trailing_comma", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],}}",
         "string or '}' expected near '}'"},
        {"trailing_garbage", "{} x", "header line 1 col 4 (file offset 12): trailing characters after the header object "
         "(end of file expected near 'x')"},
        {"two_objects", "{}{}", "trailing characters"},
        {"nul_padding", "{}\x01", "trailing characters"},
        {"top_array", "[]", "the header must be a JSON object, found an array"},
        {"empty_header", "", "'[' or '{' expected near end of file"},
        {"unterminated_object", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}",
         "'}' expected near end of file"},
        {"unterminated_string", "{\"abc", "premature end of input near '\"abc'"},
        {"missing_colon", "{\"a\" {}}", "':' expected near '{'"},
        {"array_comma", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,,1],\"data_offsets\":[0,4]}}",
         "unexpected token near ','"},
        {"float_dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}",
         "shape: expected an integer, found a fraction or exponent"},
        {"exp_dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1e2],\"data_offsets\":[0,4]}}",
         "fraction or exponent"},
        {"plus_dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[+1],\"data_offsets\":[0,4]}}",
         "invalid token near '+'"},
        {"leading_zero", "{\"a\":{\"dtype\":\"F32\",\"shape\":[01],\"data_offsets\":[0,4]}}",
         "invalid token near '0'"},
        {"string_dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}",
         "shape: expected a non-negative integer, found a string"},
        {"shape_not_array", "{\"a\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}",
         "shape must be an array"},
        {"offsets_three", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}",
         "data_offsets must have exactly 2 integers"},
        {"offsets_one", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}",
         "exactly 2 integers"},
        {"negative_offset", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}",
         "data_offsets: expected a non-negative integer"},
        {"dtype_not_string", "{\"a\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}",
         "dtype must be a string"},
        {"dtype_lowercase", "{\"a\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
         "unknown dtype 'f32'"},
        {"missing_offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}",
         "tensor 'a': entry lacks 'data_offsets'"},
        {"missing_dtype", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", "lacks 'dtype'"},
        {"dup_field", "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],"
                      "\"data_offsets\":[0,4]}}", "a key appears twice in one object (duplicate object key near "
                                "'\"dtype\"')"},
        {"entry_not_object", "{\"a\":5}", "tensor 'a': entry must be an object"},
        {"metadata_not_object", "{\"__metadata__\":\"pt\"}", "'__metadata__' must be an object"},
        {"metadata_twice", "{\"__metadata__\":{},\"__metadata__\":{}}",
         "duplicate object key near '\"__metadata__\"'"},
        {"bad_literal", "{\"__metadata__\":{\"k\":tru}}", "invalid token near 'tru'"},
        {"bad_number", "{\"__metadata__\":{\"k\":-}}", "invalid token near '-'"},
        {"bad_fraction", "{\"__metadata__\":{\"k\":1.}}", "invalid token near '1.'"},
        {"bad_exponent", "{\"__metadata__\":{\"k\":1e+}}", "invalid token near '1e+'"},
        {"metadata_leading_zero", "{\"__metadata__\":{\"k\":01}}", "invalid token near '0'"},
        {"lone_low_surrogate", "{\"\\udc00\":{}}", "invalid Unicode '\\uDC00'"},
        {"lone_high_surrogate", "{\"\\ud800x\":{}}", "invalid Unicode '\\uD800'"},
        {"high_then_high", "{\"\\ud800\\ud800\":{}}", "invalid Unicode '\\uD800\\uD800'"},
        {"short_u_escape", "{\"\\u12\":{}}", "invalid escape near '\"\\u12\"'"},
        {"bad_escape", "{\"\\x\":{}}", "invalid escape near '\"\\x'"},
        {"bad_utf8", "{\"\xff\":{}}", "invalid UTF-8 (unable to decode byte 0xff"},
        {"overlong_utf8", "{\"\xc0\x80\":{}}", "invalid UTF-8"},
        {"surrogate_utf8", "{\"\xed\xa0\x80\":{}}", "invalid UTF-8"},
        {"cut_utf8", "{\"\xe2\x82\":{}}", "invalid UTF-8"},
        {"control_char", "{\"a\nb\":{}}", "unexpected newline"},
        {"control_byte", "{\"a\x01b\":{}}", "control character 0x1"},
        {"nul_in_name", "{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],"
                        "\"data_offsets\":[0,4]}}", "a string contains a NUL character (\\u0000)"},
        {"nul_in_metadata", "{\"__metadata__\":{\"k\":\"a\\u0000\"}}", "NUL character"},
        {"huge_real", "{\"__metadata__\":{\"k\":1e999}}", "real number overflow"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        expect_bad(cases[i].what, cases[i].hdr, 8, MOE_ERR_FORMAT, cases[i].needle);
    }

    /* Nesting past 32 levels in __metadata__ is refused (one level past the deepest that
     * test_valid_edges opens); jansson itself stops at 2048, and an unclosed one is a syntax
     * error. */
    char deep[512] = "{\"__metadata__\":{\"d\":";
    for (int i = 0; i < 31; i++) {
        strcat(deep, "[");
    }
    for (int i = 0; i < 31; i++) {
        strcat(deep, "]");
    }
    strcat(deep, "}}");
    expect_bad("deep_nesting", deep, 0, MOE_ERR_FORMAT, "nested more than 32 levels");
    char *deeper = malloc(2 * 3000 + 8);
    CHECK(deeper != NULL);
    if (deeper != NULL) {
        strcpy(deeper, "{\"k\":");
        memset(deeper + 5, '[', 3000);
        memset(deeper + 5 + 3000, ']', 3000);
        strcpy(deeper + 5 + 6000, "}");
        expect_bad("deeper_nesting", deeper, 0, MOE_ERR_FORMAT, "JSON nested too deeply");
        deeper[5 + 200] = '\0';
        expect_bad("unclosed_nesting", deeper, 0, MOE_ERR_FORMAT, "']' expected near end");
    }
    free(deeper);
}

/* A file whose data section was cut off, and paths that cannot be read. */
static void test_truncated_and_io(void)
{
    char path[256], cut[256];
    moe_error_t err;
    moe_st_file_t *f = NULL;
    struct stat st;

    path_in(path, sizeof(path), "basic.safetensors");
    CHECK(stat(path, &st) == 0);
    unsigned char *buf = malloc((size_t)st.st_size);
    FILE *fp = fopen(path, "rb");
    CHECK(buf != NULL && fp != NULL && fread(buf, 1, (size_t)st.st_size, fp) == (size_t)st.st_size);
    if (fp != NULL) {
        fclose(fp);
    }
    if (buf != NULL) {
        expect_bad_bytes("truncated_data", buf, (size_t)st.st_size - 3, MOE_ERR_TRUNCATED,
                         "tensor 'scale': data_offsets [80, 84] need 84 bytes but the file has "
                         "81 bytes of data (truncated?)");
        expect_bad_bytes("header_cut", buf, 40, MOE_ERR_TRUNCATED, "but only 32 bytes follow");
    }
    free(buf);

    path_in(cut, sizeof(cut), "no/such/file.safetensors");
    CHECK_INT_EQ(moe_st_open(cut, &f, &err), MOE_ERR_IO);
    CHECK(f == NULL);
    CHECK_STR_CONTAINS(err.msg, cut);
    CHECK_STR_CONTAINS(err.msg, "cannot open: No such file or directory");
    CHECK_INT_EQ(moe_st_open(g_dir, &f, &err), MOE_ERR_IO);
    CHECK(f == NULL);
    CHECK_STR_CONTAINS(err.msg, "not a regular file");
    CHECK_INT_EQ(moe_st_open(NULL, &f, &err), MOE_ERR_INVALID_ARG);
    CHECK_INT_EQ(moe_st_open_memory(NULL, 8, "m", &f, &err), MOE_ERR_INVALID_ARG);
}

static int count_tmp_files(void)
{
    DIR *d = opendir(g_dir);
    struct dirent *e;
    int n = 0;
    while (d != NULL && (e = readdir(d)) != NULL) {
        n += strstr(e->d_name, ".tmp.") != NULL;
    }
    if (d != NULL) {
        closedir(d);
    }
    return n;
}

static void test_writer_errors(void)
{
    char path[256], nodir[256];
    moe_error_t err;
    float x[2] = {1, 2};
    struct stat st;
    path_in(path, sizeof(path), "werr.safetensors");

    moe_st_out_tensor_t dup[2] = {{"a", MOE_ST_F32, 1, {2}, x}, {"a", MOE_ST_BF16, 1, {2}, x}};
    CHECK_INT_EQ(moe_st_write(path, dup, 2, &err), MOE_ERR_INVALID_ARG);
    CHECK_STR_CONTAINS(err.msg, "tensor name 'a' given twice");
    moe_st_out_tensor_t other = {"b", MOE_ST_OTHER, 1, {2}, x};
    CHECK_INT_EQ(moe_st_write(path, &other, 1, &err), MOE_ERR_INVALID_ARG);
    CHECK_STR_CONTAINS(err.msg, "tensor 'b': dtype 3 cannot be written");
    moe_st_out_tensor_t neg = {"c", MOE_ST_F32, 2, {2, -1}, x};
    CHECK_INT_EQ(moe_st_write(path, &neg, 1, &err), MOE_ERR_INVALID_ARG);
    moe_st_out_tensor_t meta = {"__metadata__", MOE_ST_F32, 1, {2}, x};
    CHECK_INT_EQ(moe_st_write(path, &meta, 1, &err), MOE_ERR_INVALID_ARG);
    moe_st_out_tensor_t nodata = {"d", MOE_ST_F32, 1, {2}, NULL};
    CHECK_INT_EQ(moe_st_write(path, &nodata, 1, &err), MOE_ERR_INVALID_ARG);
    moe_st_out_tensor_t badname = {"\xff", MOE_ST_F32, 1, {2}, x};
    CHECK_INT_EQ(moe_st_write(path, &badname, 1, &err), MOE_ERR_INVALID_ARG);
    CHECK(stat(path, &st) != 0 && errno == ENOENT);

    path_in(nodir, sizeof(nodir), "missing/dir/w.safetensors");
    moe_st_out_tensor_t ok = {"ok", MOE_ST_F32, 1, {2}, x};
    CHECK_INT_EQ(moe_st_write(nodir, &ok, 1, &err), MOE_ERR_IO);
    CHECK_STR_CONTAINS(err.msg, "cannot create");
    /* Renaming over a directory fails after the data was written: the tmp file goes. */
    char sub[256];
    path_in(sub, sizeof(sub), "subdir");
    CHECK(mkdir(sub, 0700) == 0);
    CHECK_INT_EQ(moe_st_write(sub, &ok, 1, &err), MOE_ERR_IO);
    CHECK_STR_CONTAINS(err.msg, "cannot rename");
    CHECK(rmdir(sub) == 0);
    CHECK_INT_EQ(count_tmp_files(), 0);

    /* Names with quotes, backslashes and control characters survive the writer. */
    moe_st_out_tensor_t odd = {"q\"b\\c\x01\n\xc3\xa9", MOE_ST_F16, 1, {2}, x};
    moe_st_file_t *f = NULL;
    float y[2] = {0, 0};
    CHECK_INT_EQ(moe_st_write(path, &odd, 1, &err), MOE_OK);
    CHECK_INT_EQ(moe_st_open(path, &f, &err), MOE_OK);
    CHECK_INT_EQ(moe_st_read_f32(f, odd.name, y, 2, &err), MOE_OK);
    CHECK(y[0] == 1.0f && y[1] == 2.0f);
    moe_st_close(f);
    /* An empty file list is a valid file. */
    CHECK_INT_EQ(moe_st_write(path, NULL, 0, &err), MOE_OK);
    f = NULL;
    CHECK_INT_EQ(moe_st_open(path, &f, &err), MOE_OK);
    CHECK_INT_EQ(moe_st_count(f), 0);
    CHECK(moe_st_find(f, "x") == NULL);
    moe_st_close(f);
    CHECK_INT_EQ(count_tmp_files(), 0);
}

static void remove_dir(void)
{
    DIR *d = opendir(g_dir);
    struct dirent *e;
    char path[512];
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            snprintf(path, sizeof(path), "%s/%s", g_dir, e->d_name);
            unlink(path);
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    CHECK(rmdir(g_dir) == 0);
}

/* One slab of a fused tensor (gpt-oss experts), raw bytes, and FP8 e4m3 decoding. */
static void test_range_raw_fp8(void)
{
    char path[256];
    moe_error_t err;
    moe_st_file_t *f = NULL;
    float v[12], got[4];
    for (int i = 0; i < 12; i++) {
        v[i] = 0.5f * (float)i; /* exact in BF16 */
    }
    moe_st_out_tensor_t t = {"fused", MOE_ST_BF16, 2, {3, 4}, v};
    path_in(path, sizeof(path), "range.safetensors");
    CHECK_INT_EQ(moe_st_write(path, &t, 1, &err), MOE_OK);
    CHECK_INT_EQ(moe_st_open(path, &f, &err), MOE_OK);
    if (f == NULL) {
        return;
    }
    CHECK_INT_EQ(moe_st_read_f32_range(f, "fused", 4, 4, got, &err), MOE_OK);
    for (int i = 0; i < 4; i++) {
        CHECK_NEAR(got[i], v[4 + i], 0.0);
    }
    CHECK_INT_EQ(moe_st_read_f32_range(f, "fused", 10, 4, got, &err), MOE_ERR_WEIGHTS);
    CHECK(strstr(err.msg, "past its end") != NULL);
    unsigned char raw[24];
    CHECK_INT_EQ(moe_st_read_raw(f, "fused", raw, sizeof(raw), &err), MOE_OK);
    CHECK_INT_EQ(raw[2] | raw[3] << 8, moe_f32_to_bf16(0.5f));
    CHECK_INT_EQ(moe_st_read_raw(f, "fused", raw, 8, &err), MOE_ERR_WEIGHTS);
    moe_st_close(f);
    CHECK_NEAR(moe_fp8_e4m3_to_f32(0x38), 1.0, 0.0);         /* exponent 7: 2^0 */
    CHECK_NEAR(moe_fp8_e4m3_to_f32(0xB8), -1.0, 0.0);
    CHECK_NEAR(moe_fp8_e4m3_to_f32(0x7E), 448.0, 0.0);       /* the largest: 1.75 x 2^8 */
    CHECK_NEAR(moe_fp8_e4m3_to_f32(0x01), 0.001953125, 0.0); /* subnormal: 1/8 x 2^-6 */
    CHECK_NEAR(moe_fp8_e4m3_to_f32(0x45), 3.25, 0.0);        /* 1.625 x 2^1 */
    CHECK(isnan(moe_fp8_e4m3_to_f32(0x7F)) && isnan(moe_fp8_e4m3_to_f32(0xFF)));
}

/* A NaN or an infinity in a float tensor is refused by every reader, naming the tensor, its
 * dtype and the first such element; finite extremes read as they are. */
static void test_nonfinite(void)
{
    const moe_st_dtype_t dts[3] = {MOE_ST_F32, MOE_ST_BF16, MOE_ST_F16};
    const char *names[3] = {"F32", "BF16", "F16"};
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    const char *said[3] = {"NaN", "+inf", "-inf"};
    const float top[3] = {3.4028235e38f, 3.3895314e38f, 65504.0f}; /* largest finite */
    for (int d = 0; d < 3; d++) {
        for (int b = 0; b < 3; b++) {
            char path[256], want[128];
            float v[6] = {1, 2, 3, 4, 5, 6}, ok[2] = {top[d], -top[d]}, got[6];
            moe_error_t err;
            moe_st_file_t *f = NULL;
            v[4] = bad[b];
            moe_st_out_tensor_t t[2] = {{"w", dts[d], 2, {2, 3}, v}, {"ok", dts[d], 1, {2}, ok}};
            snprintf(want, sizeof(want), "tensor 'w' (%s) holds %s at element 4", names[d],
                     said[b]);
            path_in(path, sizeof(path), "nonfinite.safetensors");
            CHECK_INT_EQ(moe_st_write(path, t, 2, &err), MOE_OK);
            CHECK_INT_EQ(moe_st_open(path, &f, &err), MOE_OK);
            if (f == NULL) {
                continue;
            }
            CHECK_INT_EQ(moe_st_read_f32(f, "w", got, 6, &err), MOE_ERR_WEIGHTS);
            CHECK_STR_CONTAINS(err.msg, want);
            CHECK_STR_CONTAINS(err.msg, path);
            CHECK_INT_EQ(moe_st_read_f32_shaped(f, "w", 2, (int64_t[]){2, 3}, got, &err),
                         MOE_ERR_WEIGHTS);
            CHECK_STR_CONTAINS(err.msg, want);
            CHECK_INT_EQ(moe_st_read_f32_range(f, "w", 3, 3, got, &err), MOE_ERR_WEIGHTS);
            CHECK_STR_CONTAINS(err.msg, want); /* the element of the tensor, not of the range */
            CHECK_INT_EQ(moe_st_read_f32_range(f, "w", 0, 4, got, &err), MOE_OK);
            CHECK_NEAR(got[3], 4.0, 0.0);
            CHECK_INT_EQ(moe_st_read_f32(f, "ok", got, 2, &err), MOE_OK);
            CHECK(got[0] == top[d] && got[1] == -top[d]);
            moe_st_close(f);
        }
    }
}

/* A FIFO (no writer: open() would wait forever), a folder and a missing file are refused at
 * once, each said as what it is; a regular file opens in blocking mode. */
static void test_not_regular(void)
{
    char fifo[256], reg[256];
    const char *kind = NULL;
    moe_error_t err;
    moe_st_file_t *f = NULL;
    path_in(fifo, sizeof(fifo), "pipe.safetensors");
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK_INT_EQ(moe_file_open_regular(fifo, &kind), -1);
    CHECK_STR_CONTAINS(kind, "a FIFO (named pipe)");
    CHECK_INT_EQ(moe_st_open(fifo, &f, &err), MOE_ERR_IO);
    CHECK(f == NULL);
    CHECK_STR_CONTAINS(err.msg, "pipe.safetensors: is a FIFO (named pipe), not a regular file");
    CHECK_INT_EQ(moe_file_open_regular(g_dir, &kind), -1);
    CHECK_STR_CONTAINS(kind, "a folder");
    path_in(reg, sizeof(reg), "absent.safetensors");
    errno = 0;
    CHECK_INT_EQ(moe_file_open_regular(reg, &kind), -1);
    CHECK(kind == NULL && errno == ENOENT);
    path_in(reg, sizeof(reg), "plain.bin");
    CHECK(write_bytes(reg, "abc", 3) == 0);
    int fd = moe_file_open_regular(reg, &kind);
    CHECK(fd >= 0 && kind == NULL);
    if (fd >= 0) {
        CHECK((fcntl(fd, F_GETFL) & O_NONBLOCK) == 0);
        close(fd);
    }
}

/* model.checkpoint given with a trailing slash: the loader's messages join it and a file name
 * with one slash, as typed ("ck/config.json", not "ck//config.json"). */
static void test_ckpt_trailing_slash(void)
{
    char dir[256], path[256];
    moe_cfg_checkpoint_info_t info;
    moe_error_t err;
    snprintf(dir, sizeof(dir), "%s/", g_dir);
    CHECK(moe_ckpt_read_info(dir, &info, &err) != MOE_OK);
    snprintf(path, sizeof(path), "%s/config.json: no such file", g_dir);
    CHECK_STR_CONTAINS(err.msg, path);
    CHECK(strstr(err.msg, "//") == NULL);
    path_in(path, sizeof(path), "config.json");
    CHECK(write_bytes(path, "{}", 2) == 0);
    const char *index = "{\"weight_map\": {\"w\": \"shard-1.safetensors\"}}";
    path_in(path, sizeof(path), "model.safetensors.index.json");
    CHECK(write_bytes(path, index, strlen(index)) == 0);
    moe_config_t *cfg = calloc(1, sizeof(*cfg));
    moe_ckpt_t *ck = NULL;
    CHECK(cfg != NULL);
    if (cfg != NULL) {
        moe_cfg_defaults(cfg);
        snprintf(cfg->checkpoint, sizeof(cfg->checkpoint), "%s", dir);
        CHECK(moe_ckpt_open(cfg, &ck, &err) != MOE_OK && ck == NULL);
        snprintf(path, sizeof(path), "%s/model.safetensors.index.json: names shard %s/shard-1",
                 g_dir, g_dir);
        CHECK_STR_CONTAINS(err.msg, path);
        CHECK(strstr(err.msg, "//") == NULL);
    }
    free(cfg);
}

int main(void)
{
    if (mkdtemp(g_dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    test_bf16();
    test_f16();
    test_round_trip();
    test_large_round_trip();
    test_lookup_errors();
    test_shrunk_after_open();
    test_hand_written();
    test_valid_edges();
    test_corrupt_sizes();
    test_corrupt_json();
    test_truncated_and_io();
    test_writer_errors();
    test_range_raw_fp8();
    test_nonfinite();
    test_not_regular();
    test_ckpt_trailing_slash();
    remove_dir();
    return moe_test_finish("test_safetensors");
}
