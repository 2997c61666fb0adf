/* ntcopy.c — see ntcopy.h. The loop is glibc's for its own large copies
 * (memmove-vec-unaligned-erms, large_memcpy_4x): four pages at once, a line
 * from each in turn, so that four streams of stores are open at a time,
 * with the source's next lines prefetched; stores of 32 bytes where the
 * CPU has AVX2, else 16 (SSE2). */
#include "ntcopy.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

enum { LINE = 64, PAGE = 4096, PAGES = 4, BLOCK = PAGE * PAGES };

__attribute__((target("avx2"))) static void block_avx2(unsigned char *d, const unsigned char *s)
{
    for (size_t off = 0; off < PAGE; off += LINE)
        for (size_t p = 0; p < PAGES; p++) {
            const unsigned char *from = s + p * PAGE + off;
            _mm_prefetch((const char *)from + 4 * LINE, _MM_HINT_T0);
            __m256i a = _mm256_loadu_si256((const __m256i *)from);
            __m256i b = _mm256_loadu_si256((const __m256i *)(from + 32));
            _mm256_stream_si256((__m256i *)(d + p * PAGE + off), a);
            _mm256_stream_si256((__m256i *)(d + p * PAGE + off + 32), b);
        }
}

static void block_sse2(unsigned char *d, const unsigned char *s)
{
    for (size_t off = 0; off < PAGE; off += LINE)
        for (size_t p = 0; p < PAGES; p++) {
            const unsigned char *from = s + p * PAGE + off;
            unsigned char *to = d + p * PAGE + off;
            _mm_prefetch((const char *)from + 4 * LINE, _MM_HINT_T0);
            __m128i a = _mm_loadu_si128((const __m128i *)from);
            __m128i b = _mm_loadu_si128((const __m128i *)(from + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(from + 32));
            __m128i e = _mm_loadu_si128((const __m128i *)(from + 48));
            _mm_stream_si128((__m128i *)to, a);
            _mm_stream_si128((__m128i *)(to + 16), b);
            _mm_stream_si128((__m128i *)(to + 32), c);
            _mm_stream_si128((__m128i *)(to + 48), e);
        }
}

static void copy_blocks(void *dst, const void *src, size_t n, int avx2)
{
    unsigned char *d = dst;
    const unsigned char *s = src;
    size_t head = (LINE - ((uintptr_t)d & (LINE - 1))) & (LINE - 1); /* to the destination's first whole line */
    if (n < head + BLOCK) {
        memcpy(d, s, n);
        return;
    }
    memcpy(d, s, head);
    d += head, s += head, n -= head;
    void (*block)(unsigned char *, const unsigned char *) = avx2 ? block_avx2 : block_sse2;
    for (; n >= BLOCK; d += BLOCK, s += BLOCK, n -= BLOCK)
        block(d, s);
    _mm_sfence();
    memcpy(d, s, n);
}

void pb_ntcopy(void *dst, const void *src, size_t n)
{
    copy_blocks(dst, src, n, __builtin_cpu_supports("avx2"));
}

void pb_ntcopy_sse2(void *dst, const void *src, size_t n)
{
    copy_blocks(dst, src, n, 0);
}

#else

void pb_ntcopy(void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
}

void pb_ntcopy_sse2(void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
}

#endif
