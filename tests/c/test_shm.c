/* test_shm.c — values in shared memory (src/shm.h): adopting this process's
 * own memfds through /proc, the checks (sealed against grow and shrink, a
 * memfd, the size claimed),
 * the budget, what a reader is told, and that the last reference gives back
 * the fd, the mapping and the budget. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shm.h"

#define SEALS (F_SEAL_SEAL | F_SEAL_GROW | F_SEAL_SHRINK)

/* A memfd holding len bytes of c, sealed with seals (0: none). */
static int make_memfd(size_t len, char c, int seals)
{
    int fd = memfd_create("beam-object", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    assert_true(fd >= 0);
    char *buf = malloc(len);
    memset(buf, c, len);
    assert_int_equal(write(fd, buf, len), (ssize_t)len);
    free(buf);
    if (seals)
        assert_int_equal(fcntl(fd, F_ADD_SEALS, seals), 0);
    return fd;
}

/* This process's beam-object memfds (fds) and mappings of them. */
static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    char path[300], link[256];
    int n = 0;
    while ((e = readdir(d))) {
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(path, link, sizeof link - 1);
        if (k > 0) {
            link[k] = '\0';
            n += strncmp(link, "/memfd:beam-object", 18) == 0;
        }
    }
    closedir(d);
    return n;
}

static int count_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, "memfd:beam-object") != NULL;
    fclose(f);
    return n;
}

static void adopts_a_sealed_memfd_and_gives_everything_back(void **state)
{
    (void)state;
    beam_node_t node = {.shm_budget = 1 << 20};
    int fd = make_memfd(200000, 'v', SEALS);
    beam_buf_t *b = NULL;
    assert_int_equal(beam_shm_adopt(&node, getpid(), fd, 200000, &b), 0);
    close(fd); /* beamd's own fd keeps it */
    assert_non_null(b);
    assert_true(beam_shm_is(b));
    assert_int_equal(b->len, 200000);
    assert_true(b->data[0] == 'v' && b->data[199999] == 'v');
    assert_int_equal(node.shm_used, 200000);
    assert_int_equal(node.shm_objects, 1);
    assert_int_equal(count_fds(), 1);
    assert_int_equal(count_maps(), 1);
    beam_buf_ref(b);
    beam_buf_unref(b);
    assert_int_equal(node.shm_objects, 1); /* a reference left */
    beam_buf_unref(b);
    assert_int_equal(node.shm_used, 0);
    assert_int_equal(node.shm_objects, 0);
    assert_int_equal(count_fds(), 0);
    assert_int_equal(count_maps(), 0);
}

static void refuses_what_could_change_or_lies(void **state)
{
    (void)state;
    beam_node_t node = {.shm_budget = 1 << 20};
    beam_buf_t *b = NULL;
    int open_fd = make_memfd(4096, 'x', 0); /* not sealed: it could shrink under a mapping (SIGBUS) */
    assert_int_equal(beam_shm_adopt(&node, getpid(), open_fd, 4096, &b), -EINVAL);
    int part = make_memfd(4096, 'x', F_SEAL_SHRINK); /* its size is not fixed yet */
    assert_int_equal(beam_shm_adopt(&node, getpid(), part, 4096, &b), -EINVAL);
    int sealed = make_memfd(4096, 'x', SEALS);
    assert_int_equal(beam_shm_adopt(&node, getpid(), sealed, 8192, &b), -EINVAL); /* not the size claimed */
    char path[] = "/tmp/beam-test-shm-XXXXXX";
    int file = mkstemp(path); /* a plain file: no seals */
    unlink(path);
    assert_int_equal(write(file, "abcd", 4), 4);
    assert_int_equal(beam_shm_adopt(&node, getpid(), file, 4, &b), -EINVAL);
    assert_int_equal(beam_shm_adopt(&node, getpid(), 1000000, 4096, &b), -ENOENT); /* no such fd */
    char fifo[] = "/tmp/beam-test-fifo-XXXXXX";
    int tmp = mkstemp(fifo);
    close(tmp);
    unlink(fifo);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    int reader = open(fifo, O_RDONLY | O_NONBLOCK); /* a FIFO with no writer: a blocking open would hang */
    unlink(fifo);
    assert_int_equal(beam_shm_adopt(&node, getpid(), reader, 4096, &b), -EINVAL);
    close(reader);
    assert_int_equal(beam_shm_adopt(&node, getpid(), sealed, 0, &b), -EINVAL);
    assert_null(b);
    assert_int_equal(node.shm_used, 0);
    close(open_fd);
    close(part);
    close(sealed);
    close(file);
    assert_int_equal(count_fds(), 0);
    assert_int_equal(count_maps(), 0);
}

static void the_budget_bounds_what_is_adopted(void **state)
{
    (void)state;
    beam_node_t node = {.shm_budget = 300000};
    int a = make_memfd(200000, 'a', SEALS), c = make_memfd(200000, 'c', SEALS);
    beam_buf_t *ba = NULL, *bc = NULL;
    assert_int_equal(beam_shm_adopt(&node, getpid(), a, 200000, &ba), 0);
    assert_int_equal(beam_shm_adopt(&node, getpid(), c, 200000, &bc), -ENOSPC);
    assert_null(bc);
    assert_int_equal(count_fds(), 3); /* the test's two and beamd's one */
    beam_buf_unref(ba);
    assert_int_equal(beam_shm_adopt(&node, getpid(), c, 200000, &bc), 0); /* room again */
    beam_buf_unref(bc);
    close(a);
    close(c);
    assert_int_equal(node.shm_used, 0);
}

static void a_reader_is_told_the_fd_size_and_inode(void **state)
{
    (void)state;
    beam_node_t node = {.shm_budget = 1 << 20};
    int fd = make_memfd(5000, 'r', SEALS);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    beam_buf_t *b = NULL;
    assert_int_equal(beam_shm_adopt(&node, getpid(), fd, 5000, &b), 0);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    beam_shm_pack(&pk, b);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    assert_int_equal(msgpack_unpack_next(&u, sb.data, sb.size, NULL), MSGPACK_UNPACK_SUCCESS);
    const msgpack_object_map *m = &u.data.via.map;
    assert_int_equal(m->size, 3);
    int64_t theirs = -1;
    uint64_t size = 0, ino = 0;
    for (uint32_t i = 0; i < m->size; i++) {
        const msgpack_object_str *k = &m->ptr[i].key.via.str;
        if (k->size == 2 && !memcmp(k->ptr, "fd", 2))
            theirs = m->ptr[i].val.via.i64;
        else if (k->size == 4 && !memcmp(k->ptr, "size", 4))
            size = m->ptr[i].val.via.u64;
        else if (k->size == 3 && !memcmp(k->ptr, "ino", 3))
            ino = m->ptr[i].val.via.u64;
    }
    assert_true(theirs >= 0 && theirs != fd);
    assert_int_equal(size, 5000);
    assert_int_equal(ino, (uint64_t)st.st_ino);
    struct stat st2; /* beamd's fd is the same memfd */
    assert_int_equal(fstat((int)theirs, &st2), 0);
    assert_int_equal(st2.st_ino, st.st_ino);
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
    beam_buf_unref(b);
    close(fd);
    /* a heap buffer is not one */
    beam_buf_t *heap = beam_buf_new(10);
    assert_false(beam_shm_is(heap));
    assert_false(beam_shm_is(NULL));
    beam_buf_unref(heap);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(adopts_a_sealed_memfd_and_gives_everything_back),
        cmocka_unit_test(refuses_what_could_change_or_lies),
        cmocka_unit_test(the_budget_bounds_what_is_adopted),
        cmocka_unit_test(a_reader_is_told_the_fd_size_and_inode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
