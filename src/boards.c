/* boards.c — the call boards beamd has adopted (boards.h). */
#include "boards.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <utlist.h>

#include "shm.h"

typedef struct beam_board_s {
    const void *owner; /* compared only */
    char actor[BEAM_ACTOR_ID_SIZE];
    const uint64_t *page; /* BEAM_BOARD_SIZE bytes, read-only */
    struct beam_board_s *next;
} beam_board_t;

/* the node's boards and what dropped ones counted (node->boards) */
typedef struct beam_boards_s {
    beam_board_t *live;
    beam_board_counts_t folded;
} beam_boards_t;

static beam_board_t *find(const beam_node_t *node, const void *owner)
{
    for (beam_board_t *b = node->boards ? node->boards->live : NULL; b; b = b->next)
        if (b->owner == owner)
            return b;
    return NULL;
}

int beam_boards_adopt(beam_node_t *node, const void *owner, const char *actor, long pid, int64_t fd_num,
                      int64_t size)
{
    if (size != BEAM_BOARD_SIZE)
        return -EINVAL;
    if (!node->boards && !(node->boards = calloc(1, sizeof *node->boards)))
        return -ENOMEM;
    beam_board_t *b = calloc(1, sizeof *b);
    if (!b)
        return -ENOMEM;
    void *map;
    int fd;
    /* what the fd is comes first: a bad one is named as such, even a second */
    int rc = beam_shm_map(pid, fd_num, BEAM_BOARD_SIZE, &map, &fd, NULL);
    if (rc == 0) {
        close(fd); /* the mapping keeps the page */
        if (find(node, owner)) {
            munmap(map, BEAM_BOARD_SIZE);
            rc = -EEXIST;
        }
    }
    if (rc < 0) {
        free(b);
        return rc;
    }
    b->owner = owner;
    memcpy(b->actor, actor, BEAM_ACTOR_ID_SIZE);
    b->page = map;
    LL_PREPEND(node->boards->live, b);
    return 0;
}

static void drop(beam_boards_t *t, beam_board_t *b)
{
    beam_board_counts_t c = beam_board_read(b->page);
    t->folded.started += c.started;
    t->folded.finished += c.finished;
    t->folded.pushed += c.pushed;
    LL_DELETE(t->live, b);
    munmap((void *)b->page, BEAM_BOARD_SIZE);
    free(b);
}

void beam_boards_drop(beam_node_t *node, const void *owner)
{
    beam_board_t *b = find(node, owner);
    if (b)
        drop(node->boards, b);
}

uint32_t beam_boards_running(const beam_node_t *node, const char *actor)
{
    uint64_t n = 0;
    for (beam_board_t *b = node->boards ? node->boards->live : NULL; b; b = b->next) {
        if (memcmp(b->actor, actor, BEAM_ACTOR_ID_SIZE) == 0) {
            beam_board_counts_t c = beam_board_read(b->page);
            n += c.started - c.finished;
        }
    }
    return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

beam_board_counts_t beam_boards_totals(const beam_node_t *node)
{
    beam_board_counts_t t = {0};
    if (!node->boards)
        return t;
    t = node->boards->folded;
    for (beam_board_t *b = node->boards->live; b; b = b->next) {
        beam_board_counts_t c = beam_board_read(b->page);
        t.started += c.started;
        t.finished += c.finished;
        t.pushed += c.pushed;
    }
    return t;
}

uint32_t beam_boards_count(const beam_node_t *node)
{
    uint32_t n = 0;
    for (beam_board_t *b = node->boards ? node->boards->live : NULL; b; b = b->next)
        n++;
    return n;
}

void beam_boards_free(beam_node_t *node)
{
    if (!node->boards)
        return;
    while (node->boards->live)
        drop(node->boards, node->boards->live);
    free(node->boards);
    node->boards = NULL;
}
