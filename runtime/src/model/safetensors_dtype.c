/* safetensors' numbers: the BF16/F16 <-> F32 conversions (moe/bf16.h), little-endian
 * helpers, the dtype table, shapes, and the loops that decode a tensor in place as it is
 * read and encode one as it is written (safetensors_int.h lists the files). All multi-byte
 * values are decoded byte by byte as little endian, whatever the host order. */
#include "moe_model/safetensors.h"

#include "model/safetensors_int.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------------------ */
/* Conversions                                                                           */

uint32_t st_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static float st_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

float moe_bf16_to_f32(uint16_t h)
{
    return st_bits_f32((uint32_t)h << 16);
}

uint16_t moe_f32_to_bf16(float f)
{
    uint32_t u = st_f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
        /* Truncating could clear every mantissa bit and turn NaN into inf: force quiet. */
        return (uint16_t)((u >> 16) | 0x0040u);
    }
    /* Round to nearest even; a carry into the exponent is the correct rounding, up to inf. */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float moe_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t mant = h & 0x3FFu;

    if (exp == 0x1F) {
        return st_bits_f32(sign | 0x7F800000u | (mant << 13));
    }
    if (exp == 0) {
        if (mant == 0) {
            return st_bits_f32(sign);
        }
        /* Subnormal: normalise so the leading 1 becomes the implicit bit. */
        exp = 113;
        while ((mant & 0x400u) == 0) {
            mant <<= 1;
            exp--;
        }
        return st_bits_f32(sign | (exp << 23) | ((mant & 0x3FFu) << 13));
    }
    return st_bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

/* Keeps the top bits of mant above `shift`, rounding the rest to nearest even. */
static uint32_t st_round_shift(uint32_t mant, unsigned shift)
{
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) {
        q++;
    }
    return q;
}

uint16_t moe_f32_to_f16(float f)
{
    uint32_t u = st_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7FFFFFFFu;

    if (a > 0x7F800000u) {
        return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
    }
    if (a >= 0x477FF000u) {
        /* 65520 and above: halfway past 65504 rounds (to even) up to inf. */
        return (uint16_t)(sign | 0x7C00u);
    }
    if (a < 0x38800000u) {
        /* Below 2^-14: an f16 subnormal, in units of 2^-24. */
        unsigned shift = 126u - (a >> 23);
        if (shift > 24) {
            return sign;
        }
        return (uint16_t)(sign | st_round_shift((a & 0x7FFFFFu) | 0x800000u, shift));
    }
    /* Normal; a mantissa carry moves into the exponent, which is the right result. */
    return (uint16_t)(sign | st_round_shift(a - 0x38000000u, 13));
}

/* ------------------------------------------------------------------------------------ */
/* Little-endian helpers                                                                  */

uint64_t st_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

void st_put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        p[i] = (unsigned char)(v >> (8 * i));
    }
}

/* ------------------------------------------------------------------------------------ */
/* Dtypes                                                                                 */


const st_dtype_desc_t st_dtypes[] = {
    {"F32", MOE_ST_F32, 32},          {"BF16", MOE_ST_BF16, 16},
    {"F16", MOE_ST_F16, 16},          {"F64", MOE_ST_OTHER, 64},
    {"I64", MOE_ST_OTHER, 64},        {"U64", MOE_ST_OTHER, 64},
    {"I32", MOE_ST_I32, 32}  ,        {"U32", MOE_ST_OTHER, 32},
    {"I16", MOE_ST_OTHER, 16},        {"U16", MOE_ST_OTHER, 16},
    {"I8", MOE_ST_OTHER, 8},          {"U8", MOE_ST_OTHER, 8},
    {"BOOL", MOE_ST_OTHER, 8},        {"F8_E4M3", MOE_ST_OTHER, 8},
    {"F8_E5M2", MOE_ST_OTHER, 8},     {"F8_E8M0", MOE_ST_OTHER, 8},
    {"F6_E2M3", MOE_ST_OTHER, 6},     {"F6_E3M2", MOE_ST_OTHER, 6},
    {"F4", MOE_ST_OTHER, 4},          {"C64", MOE_ST_OTHER, 64},
};
const int st_ndtypes = (int)(sizeof(st_dtypes) / sizeof(st_dtypes[0]));

const st_dtype_desc_t *st_dtype_lookup(const char *s, size_t len)
{
    for (int i = 0; i < st_ndtypes; i++) {
        if (strlen(st_dtypes[i].name) == len && memcmp(st_dtypes[i].name, s, len) == 0) {
            return &st_dtypes[i];
        }
    }
    return NULL;
}

const st_dtype_desc_t *st_dtype_of(const moe_st_tensor_info_t *t)
{
    return st_dtype_lookup(t->dtype_name, strlen(t->dtype_name));
}

/* Product of the dims; false when a dim is negative or the product overflows 64 bits. */
bool st_shape_elems(int ndim, const int64_t *shape, uint64_t *out)
{
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            return false;
        }
        if (shape[i] != 0 && n > UINT64_MAX / (uint64_t)shape[i]) {
            return false;
        }
        n *= (uint64_t)shape[i];
    }
    *out = n;
    return true;
}

/* printf into buf at *len, never past cap; a truncated result stays NUL-terminated. */
void st_appendf(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
    if (*len + 1 >= cap) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (r > 0) {
        *len = (size_t)r < cap - *len ? *len + (size_t)r : cap - 1;
    }
}

/* "[8, 1024]"; always NUL-terminated. */
void st_format_shape(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t len = 0;
    buf[0] = '\0';
    st_appendf(buf, cap, &len, "[");
    for (int i = 0; i < ndim; i++) {
        st_appendf(buf, cap, &len, "%s%" PRId64, i ? ", " : "", shape[i]);
    }
    st_appendf(buf, cap, &len, "]");
}

/* ------------------------------------------------------------------------------------ */
/* Decoding a tensor as it is read, encoding one as it is written                       */

/* The 8 bytes at p as a little-endian u64 (one load on a little-endian host). */
static inline uint64_t st_le64_at(const unsigned char *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
           (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 |
           (uint64_t)p[7] << 56;
}

/* Lanes of 16 bits: each lane's magnitude bits plus its lowest exponent bit carry into the
 * lane's sign bit exactly when every exponent bit is set (NaN or infinite), and never into
 * the next lane. 32-bit lanes alike. */
#define ST_MAG16 0x7FFF7FFF7FFF7FFFull
#define ST_BF16_EXP1 0x0080008000800080ull
#define ST_F16_EXP1 0x0400040004000400ull
#define ST_SIGN16 0x8000800080008000ull
#define ST_MAG32 0x7FFFFFFF7FFFFFFFull
#define ST_F32_EXP1 0x0080000000800000ull
#define ST_SIGN32 0x8000000080000000ull

/* Decodes n little-endian elements from raw, which lies at the tail of dst's bytes, into
 * dst. Front to back is safe: element i is written to bytes [4i, 4i+4), which end at or
 * before where raw element i+1 starts (raw is 4n - n*esize bytes in, esize <= 4); the
 * 16-bit loops read 4 elements (8 bytes) before writing their 16, and group g's writes end
 * at 16g + 16 <= 2n + 8g + 8, where group g + 1's bytes start, while 4g + 4 <= n.
 *
 * Returns whether any element is NaN or infinite, for an AND, an ADD and an OR per 64-bit
 * word (4 BF16/F16 or 2 F32 elements, see ST_MAG16): reading a word at a time, the BF16
 * loop is no slower than the element-wise one it replaced. */
bool st_decode_in_place(moe_st_dtype_t dtype, float *dst, const unsigned char *raw,
                        size_t n)
{
    uint64_t acc = 0;
    size_t i = 0;
    if (dtype == MOE_ST_F32) { /* raw is dst */
        for (; i + 2 <= n; i += 2) {
            uint64_t w = st_le64_at(raw + 4 * i);
            acc |= (w & ST_MAG32) + ST_F32_EXP1;
            uint32_t u[2] = {(uint32_t)w, (uint32_t)(w >> 32)}; /* in the host's order */
            memcpy(&dst[i], u, sizeof(u));
        }
        if (i < n) {
            const unsigned char *b = raw + 4 * i;
            uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                         (uint32_t)b[3] << 24;
            acc |= (u & 0x7FFFFFFFu) + 0x00800000u;
            memcpy(&dst[i], &u, sizeof(u));
        }
        return (acc & ST_SIGN32) != 0;
    }
    if (dtype == MOE_ST_BF16) {
        for (; i + 4 <= n; i += 4) {
            uint64_t w = st_le64_at(raw + 2 * i);
            acc |= (w & ST_MAG16) + ST_BF16_EXP1;
            uint32_t u[4] = {(uint32_t)(w << 16), (uint32_t)w & 0xFFFF0000u,
                             (uint32_t)(w >> 16) & 0xFFFF0000u, (uint32_t)(w >> 32) & 0xFFFF0000u};
            memcpy(&dst[i], u, sizeof(u));
        }
        for (; i < n; i++) {
            uint32_t h = (uint32_t)raw[2 * i] | (uint32_t)raw[2 * i + 1] << 8;
            acc |= (h & 0x7FFFu) + 0x0080u;
            h <<= 16;
            memcpy(&dst[i], &h, sizeof(h));
        }
        return (acc & ST_SIGN16) != 0;
    }
    for (; i + 4 <= n; i += 4) {
        uint64_t w = st_le64_at(raw + 2 * i);
        acc |= (w & ST_MAG16) + ST_F16_EXP1;
        float v[4] = {moe_f16_to_f32((uint16_t)w), moe_f16_to_f32((uint16_t)(w >> 16)),
                      moe_f16_to_f32((uint16_t)(w >> 32)), moe_f16_to_f32((uint16_t)(w >> 48))};
        memcpy(&dst[i], v, sizeof(v));
    }
    for (; i < n; i++) {
        uint16_t h = (uint16_t)(raw[2 * i] | raw[2 * i + 1] << 8);
        acc |= (uint64_t)(h & 0x7FFFu) + 0x0400u;
        float v = moe_f16_to_f32(h);
        memcpy(&dst[i], &v, sizeof(v));
    }
    return (acc & ST_SIGN16) != 0;
}
void st_encode(moe_st_dtype_t dtype, const float *src, size_t n, unsigned char *out)
{
    for (size_t i = 0; i < n; i++) {
        if (dtype == MOE_ST_F32) {
            uint32_t u = st_f32_bits(src[i]);
            for (int k = 0; k < 4; k++) {
                out[4 * i + (size_t)k] = (unsigned char)(u >> (8 * k));
            }
        } else {
            uint16_t h = dtype == MOE_ST_BF16 ? moe_f32_to_bf16(src[i]) : moe_f32_to_f16(src[i]);
            out[2 * i] = (unsigned char)h;
            out[2 * i + 1] = (unsigned char)(h >> 8);
        }
    }
}