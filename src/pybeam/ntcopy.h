/* ntcopy.h — copying a large buffer into memory no one reads soon (a value
 * written into shared memory): with non-temporal stores, which go to memory
 * without first reading each destination line into the cache and without
 * evicting the cache for it. glibc's memcpy uses them only past a
 * threshold it derives from the cache size the CPU reports (3/4 of L3),
 * which on a VM that reports the host's L3 (480 MiB here) no value
 * reaches: 64 MiB copied 9.8 ms with memcpy, 4.6 ms with these stores,
 * measured (docs/DESIGN.md, "Large values"). Pure C, no GIL, nothing kept;
 * x86-64 only (SSE2, in every x86-64 CPU), memcpy elsewhere. */
#ifndef PYBEAM_NTCOPY_H
#define PYBEAM_NTCOPY_H

#include <stddef.h>

/* dst[0..n) = src[0..n) (they must not overlap). The stores are fenced
 * before it returns: whoever is told after sees every byte. */
void pb_ntcopy(void *dst, const void *src, size_t n);

/* pb_ntcopy with 16-byte stores whatever the CPU has (for the tests). */
void pb_ntcopy_sse2(void *dst, const void *src, size_t n);

#endif
