/* The CPU executables' allocator (memref.alloc lowered with MLIR's generic
 * allocation functions): a temporary of 1 MiB or more is kept when freed
 * and handed out again for its size class, so a call does not fault its
 * pages in again (glibc maps such blocks afresh and unmaps them on free:
 * a dynamic-shape temporary past the workspace's cap paid that every call).
 * At most `limit` bytes are kept (twintrack_pool_limit; 2 GiB by default).
 * Thread-safe: the executables' parallel loops allocate from worker threads.
 *
 * A block's header (HEADER bytes, or the alignment if larger) holds, at its
 * end, the block's size class and the header's length; a kept block holds
 * the list's link at its start. */

#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>

#define HEADER 64
#define POOLED ((size_t)1 << 20)
#define CLASS ((size_t)1 << 16)

typedef struct Kept {
    struct Kept *next;
    size_t bytes, header;
} Kept;

static Kept *kept;
static size_t kept_bytes;
static size_t limit = (size_t)2 << 30;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

void twintrack_pool_limit(size_t bytes) { limit = bytes; }

size_t twintrack_pool_kept(void) { return kept_bytes; }

static void *take(size_t bytes, size_t header) {
    pthread_mutex_lock(&lock);
    Kept **at = &kept;
    while (*at && ((*at)->bytes != bytes || (*at)->header != header))
        at = &(*at)->next;
    Kept *found = *at;
    if (found) {
        *at = found->next;
        kept_bytes -= bytes;
    }
    pthread_mutex_unlock(&lock);
    return found;
}

static void *allocate(size_t alignment, size_t size) {
    size_t header = alignment > HEADER ? alignment : HEADER;
    size_t bytes = size + header;
    void *base = NULL;
    if (bytes >= POOLED) {
        bytes = (bytes + CLASS - 1) / CLASS * CLASS;
        base = take(bytes, header);
    }
    if (!base && posix_memalign(&base, header, bytes))
        return NULL;
    size_t *data = (size_t *)((char *)base + header);
    data[-1] = bytes;
    data[-2] = header;
    return data;
}

void *_mlir_memref_to_llvm_alloc(size_t size) { return allocate(HEADER, size); }

void *_mlir_memref_to_llvm_aligned_alloc(size_t alignment, size_t size) { return allocate(alignment, size); }

void _mlir_memref_to_llvm_free(void *pointer) {
    if (!pointer)
        return;
    size_t bytes = ((size_t *)pointer)[-1], header = ((size_t *)pointer)[-2];
    Kept *base = (Kept *)((char *)pointer - header);
    if (bytes >= POOLED) {
        pthread_mutex_lock(&lock);
        if (kept_bytes + bytes <= limit) {
            base->next = kept;
            base->bytes = bytes;
            base->header = header;
            kept = base;
            kept_bytes += bytes;
            base = NULL;
        }
        pthread_mutex_unlock(&lock);
    }
    free(base);
}
