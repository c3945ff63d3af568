/* A bump arena for buffers sized once: run the same carving code twice, first with
 * base == NULL to learn the size (every pointer it hands out is NULL), then on one block of
 * that size. Each buffer starts on a 64-byte boundary (a cache line; what AVX-512 loads
 * like), so carving never puts two buffers on one line. */
#ifndef MOE_LAYER_ARENA_H
#define MOE_LAYER_ARENA_H

#include <stddef.h>
#include <stdint.h>

#define MOE_ARENA_ALIGN 64

typedef struct moe_arena {
    char *base; /* NULL while sizing */
    size_t used;
} moe_arena_t;

/* count elements of size bytes (zero-filled when the block was), or NULL while sizing.
 * count 0 still takes an aligned slot, so every buffer has a distinct address. */
static inline void *moe_arena_take(moe_arena_t *a, size_t count, size_t size)
{
    size_t off = (a->used + MOE_ARENA_ALIGN - 1) & ~(size_t)(MOE_ARENA_ALIGN - 1);
    size_t bytes = count * size;
    a->used = off + (bytes > 0 ? bytes : 1);
    return a->base != NULL ? a->base + off : NULL;
}

/* Bytes the block needs for what was carved, rounded up to the alignment. */
static inline size_t moe_arena_size(const moe_arena_t *a)
{
    return (a->used + MOE_ARENA_ALIGN - 1) & ~(size_t)(MOE_ARENA_ALIGN - 1);
}

#endif /* MOE_LAYER_ARENA_H */
