/* shm.c — values in shared memory on this node (shm.h). */
#define _GNU_SOURCE
#include "shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "beam/codec.h"

/* what a value's memfd must be sealed against: its size is fixed, so no
 * mapping of it can fault past its end (the producer may write it again
 * once no one else has it open: shm.py's write lease) */
#define SEALED (F_SEAL_GROW | F_SEAL_SHRINK)

typedef struct shm_buf_s {
    beam_buf_t b; /* first: the buffer the tables hold */
    beam_node_t *node;
    int fd;
    uint64_t ino;
} shm_buf_t;

static void shm_release(beam_buf_t *b)
{
    shm_buf_t *s = (shm_buf_t *)b;
    munmap(b->data, b->len);
    close(s->fd);
    s->node->shm_used -= b->len;
    s->node->shm_objects--;
    free(s);
}

/* 0 if fd is a memfd of len bytes whose size no one can change any more. */
static int check_sealed(int fd, size_t len, uint64_t *ino)
{
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & SEALED) != SEALED || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        (uint64_t)st.st_size != (uint64_t)len)
        return -EINVAL;
    *ino = (uint64_t)st.st_ino;
    return 0;
}

int beam_shm_map(long pid, int64_t fd_num, size_t len, void **map, int *fd_out, uint64_t *ino)
{
    *map = NULL;
    *fd_out = -1;
    if (len == 0 || fd_num < 0 || pid <= 0)
        return -EINVAL;
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/fd/%lld", pid, (long long)fd_num);
    /* non-blocking and no tty: whatever the client named, the open cannot hang or take a terminal */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return -errno;
    uint64_t inode = 0;
    int rc = check_sealed(fd, len, &inode);
    void *m = rc == 0 ? mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (rc == 0 && m == MAP_FAILED)
        rc = -errno;
    if (rc < 0) {
        close(fd);
        return rc;
    }
    *map = m;
    *fd_out = fd;
    if (ino)
        *ino = inode;
    return 0;
}

int beam_shm_adopt(beam_node_t *node, long pid, int64_t fd_num, size_t len, beam_buf_t **out)
{
    *out = NULL;
    if (len == 0 || fd_num < 0 || pid <= 0)
        return -EINVAL;
    if (len > node->shm_budget - node->shm_used || node->shm_used > node->shm_budget)
        return -ENOSPC;
    shm_buf_t *s = malloc(sizeof *s);
    if (!s)
        return -ENOMEM;
    void *map;
    int fd;
    uint64_t ino;
    int rc = beam_shm_map(pid, fd_num, len, &map, &fd, &ino);
    if (rc < 0) {
        free(s);
        return rc;
    }
    *s = (shm_buf_t){.b = {.refs = 1, .len = len, .data = map, .release = shm_release},
                     .node = node, .fd = fd, .ino = ino};
    node->shm_used += len;
    node->shm_objects++;
    *out = &s->b;
    return 0;
}

int beam_shm_is(const beam_buf_t *b)
{
    return b && b->release == shm_release;
}

void beam_shm_pack(msgpack_packer *pk, const beam_buf_t *b)
{
    const shm_buf_t *s = (const shm_buf_t *)b;
    msgpack_pack_map(pk, 3);
    beam_pack_key(pk, "fd");
    msgpack_pack_int(pk, s->fd);
    beam_pack_key(pk, "size");
    msgpack_pack_uint64(pk, b->len);
    beam_pack_key(pk, "ino");
    msgpack_pack_uint64(pk, s->ino);
}
