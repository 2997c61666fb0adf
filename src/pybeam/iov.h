/* iov.h — stepping an iovec array past the bytes a writev/sendmsg wrote,
 * for the loops that write all of one (wire.c, termlog.c). */
#ifndef PYBEAM_IOV_H
#define PYBEAM_IOV_H

#include <stddef.h>
#include <sys/uio.h>

/* Drops the n written bytes from the front of *iov (*cnt pieces): whole
 * pieces go, a partly written one is shortened in place. */
static inline void pb_iov_consume(struct iovec **iov, int *cnt, size_t n)
{
    while (*cnt > 0 && n >= (*iov)->iov_len) {
        n -= (*iov)->iov_len;
        (*iov)++;
        (*cnt)--;
    }
    if (*cnt > 0) {
        (*iov)->iov_base = (char *)(*iov)->iov_base + n;
        (*iov)->iov_len -= n;
    }
}

#endif
