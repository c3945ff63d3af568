/* safetensors reader and writer.
 *
 * Format: 8 bytes little-endian u64 N, then N bytes of UTF-8 JSON header
 *   {"name": {"dtype": "F32", "shape": [d0, d1], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"k": "v"}}
 * then the data; offsets are relative to the byte after the header. moed reads F32, BF16
 * and F16 tensors into F32. Opening reads only the header; each tensor is read with pread
 * on demand, so a rank reads only the tensors it needs.
 *
 * The reader trusts nothing: header size against the file size, every offset and shape
 * product against the data size and against each other, dtype names, JSON syntax. A file
 * that lies about its sizes is rejected with a message, never read out of bounds. */
#ifndef MOE_SAFETENSORS_H
#define MOE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "moe/status.h"

#define MOE_ST_MAX_DIMS 8

typedef enum {
    MOE_ST_F32 = 0,
    MOE_ST_BF16 = 1,
    MOE_ST_F16 = 2,
    MOE_ST_OTHER = 3, /* listed (so the file opens) but not readable as float */
    MOE_ST_I32 = 4,   /* read with moe_st_read_raw; written from int32_t values */
} moe_st_dtype_t;

typedef struct moe_st_tensor_info {
    const char *name;          /* owned by the file handle */
    moe_st_dtype_t dtype;
    const char *dtype_name;    /* as written in the file, e.g. "BF16", "I64" */
    int ndim;
    int64_t shape[MOE_ST_MAX_DIMS];
    uint64_t data_begin;       /* relative to the data section */
    uint64_t data_end;
} moe_st_tensor_info_t;

typedef struct moe_st_file moe_st_file_t;


/* Open and validate the header. err says the path and the exact problem; a path that is
 * not a regular file (a FIFO, a folder, a device) is refused at once (MOE_ERR_IO). */
moe_status_t moe_st_open(const char *path, moe_st_file_t **out, moe_error_t *err);
/* Open from memory (no copy: buf must outlive the handle). For tests and fuzzing. */
moe_status_t moe_st_open_memory(const void *buf, size_t len, const char *name,
                                moe_st_file_t **out, moe_error_t *err);
void moe_st_close(moe_st_file_t *f); /* accepts NULL */

int moe_st_count(const moe_st_file_t *f);
const moe_st_tensor_info_t *moe_st_at(const moe_st_file_t *f, int i);
/* NULL when absent. */
const moe_st_tensor_info_t *moe_st_find(const moe_st_file_t *f, const char *name);
/* The string value of __metadata__[key] (owned by the handle), or NULL when the file has no
 * such key or its value is not a string. */
const char *moe_st_metadata(const moe_st_file_t *f, const char *key);

/* Read tensor `name` converted to F32 into dst, which holds `count` floats. Fails with a
 * message naming the file and tensor when the tensor is missing (MOE_ERR_WEIGHTS), its
 * element count differs from `count` (MOE_ERR_WEIGHTS), its dtype is not F32/BF16/F16
 * (MOE_ERR_UNSUPPORTED), the data cannot be read (MOE_ERR_IO / MOE_ERR_TRUNCATED), or it
 * holds a NaN or an infinity (MOE_ERR_WEIGHTS, naming the first such element): weights and
 * inputs are finite, and one such value would make the whole output NaN. The same holds
 * for the _shaped and _range readers below. */
moe_status_t moe_st_read_f32(moe_st_file_t *f, const char *name, float *dst, size_t count,
                             moe_error_t *err);
/* Same, but also checks the exact shape (ndim dims). */
moe_status_t moe_st_read_f32_shaped(moe_st_file_t *f, const char *name, int ndim,
                                    const int64_t *shape, float *dst, moe_error_t *err);

/* The stored bytes of tensor `name` (any dtype) into dst, which holds len bytes: len must
 * be the tensor's byte size. For formats read elsewhere (FP8 + scales, model/checkpoint.c). */
moe_status_t moe_st_read_raw(moe_st_file_t *f, const char *name, void *dst, size_t len,
                             moe_error_t *err);
/* Bytes [offset, offset + len) of tensor `name`'s data, whatever its dtype (one expert's slab
 * of a U8 tensor, say). */
moe_status_t moe_st_read_raw_range(moe_st_file_t *f, const char *name, uint64_t offset,
                                   void *dst, size_t len, moe_error_t *err);

/* Elements [first, first + count) of tensor `name` (F32/BF16/F16, in storage order) into
 * dst as F32: one expert's slab of a fused [E, ...] tensor without reading the others. */
moe_status_t moe_st_read_f32_range(moe_st_file_t *f, const char *name, uint64_t first,
                                   size_t count, float *dst, moe_error_t *err);

/* Writer: a file of F32 / BF16 / F16 tensors (and I32). data points to floats, stored in
 * `dtype` (round to nearest even), or, for MOE_ST_I32, to int32_t values. Written to path
 * atomically (tmp, fsync, rename). */
typedef struct moe_st_out_tensor {
    const char *name;
    moe_st_dtype_t dtype;
    int ndim;
    int64_t shape[MOE_ST_MAX_DIMS];
    const void *data;
} moe_st_out_tensor_t;

moe_status_t moe_st_write(const char *path, const moe_st_out_tensor_t *tensors, int count,
                          moe_error_t *err);
/* The same with a __metadata__ object of string values: meta[2i] the key, meta[2i+1] the
 * value, i < nmeta (keys distinct, UTF-8). */
moe_status_t moe_st_write_meta(const char *path, const moe_st_out_tensor_t *tensors, int count,
                               const char *const *meta, int nmeta, moe_error_t *err);

/* Conversions (exposed for tests and the CUDA path). */
float moe_bf16_to_f32(uint16_t h);
uint16_t moe_f32_to_bf16(float f);
float moe_f16_to_f32(uint16_t h);
uint16_t moe_f32_to_f16(float f);

#endif /* MOE_SAFETENSORS_H */
