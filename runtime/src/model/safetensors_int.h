/* Private to the safetensors files of the model part (and their tests):
 *
 * safetensors.c        the reader: the file handle, the header (jansson), its checks,
 *                      opening, reading tensors
 * safetensors_dtype.c  the conversions, little-endian helpers, the dtype table, shapes,
 *                      and the decode/encode loops
 * safetensors_write.c  the writer
 *
 * The reader and the writer call safetensors_dtype.c, never each other. */
#ifndef MOE_MODEL_SAFETENSORS_INT_H
#define MOE_MODEL_SAFETENSORS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moe_model/safetensors.h"

/* pread/write sizes per call: Linux transfers at most ~2 GiB per call anyway. */
#define ST_IO_MAX ((size_t)1 << 30)

typedef struct st_dtype_desc {
    const char *name;
    moe_st_dtype_t dtype;
    unsigned bits; /* per element; the sub-byte float formats pack */
} st_dtype_desc_t;

/* Every dtype the format names, with its element size; only F32, BF16 and F16 are read. */
extern const st_dtype_desc_t st_dtypes[];
extern const int st_ndtypes;

/* The bits of f, and back. */
uint32_t st_f32_bits(float f);
/* Little-endian u64 at p. */
uint64_t st_le64(const unsigned char *p);
void st_put_le64(unsigned char *p, uint64_t v);
/* The dtype named s (len bytes) or a tensor's dtype; NULL when the format has no such name. */
const st_dtype_desc_t *st_dtype_lookup(const char *s, size_t len);
const st_dtype_desc_t *st_dtype_of(const moe_st_tensor_info_t *t);
/* Product of the dims; false when a dim is negative or the product overflows 64 bits. */
bool st_shape_elems(int ndim, const int64_t *shape, uint64_t *out);
/* printf into buf at *len, never past cap; a truncated result stays NUL-terminated. */
void st_appendf(char *buf, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* "[4, 8]" */
void st_format_shape(char *buf, size_t cap, int ndim, const int64_t *shape);
/* Decodes n little-endian elements of dtype from raw, at the tail of dst's bytes, into
 * dst in place; returns whether any element is NaN or infinite. */
bool st_decode_in_place(moe_st_dtype_t dtype, float *dst, const unsigned char *raw, size_t n);
/* Encodes n floats of src as dtype (F32, BF16, F16) into out, little endian. */
void st_encode(moe_st_dtype_t dtype, const float *src, size_t n, unsigned char *out);

#endif /* MOE_MODEL_SAFETENSORS_INT_H */
