/* boards.c — the call boards of a node's workers (boards.h). */
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
    const uint64_t *page;      /* adopted: BEAM_BOARD_SIZE bytes, read-only; NULL: reported */
    beam_board_counts_t kept;  /* reported: the last counts; adopted: those the last walk saw */
    struct beam_board_s *next;
} beam_board_t;

/* the node's boards and what dropped ones counted (node->boards) */
typedef struct beam_boards_s {
    beam_board_t *live;
    beam_board_counts_t folded;
} beam_boards_t;

const beam_field_spec_t beam_board_fields[BEAM_BOARD_NFIELDS] = {
    [BEAM_BOARD_F_FD] = BEAM_FIELD("fd", BEAM_F_INT, BEAM_F_REQUIRED, .min = 0, .max = INT32_MAX,
                                   .bound = "must be an fd"),
    [BEAM_BOARD_F_SIZE] = BEAM_FIELD("size", BEAM_F_INT, BEAM_F_REQUIRED, .min = BEAM_BOARD_SIZE,
                                     .max = BEAM_BOARD_SIZE, .bound = "must be the board's size (4096)"),
};

static beam_board_counts_t counts(const beam_board_t *b)
{
    return b->page ? beam_board_read(b->page) : b->kept;
}

static beam_board_t *find(const beam_node_t *node, const void *owner)
{
    for (beam_board_t *b = node->boards ? node->boards->live : NULL; b; b = b->next)
        if (b->owner == owner)
            return b;
    return NULL;
}

/* A new board of owner for actor, in the table (NULL when out of memory). */
static beam_board_t *add(beam_node_t *node, const void *owner, const char *actor)
{
    if (!node->boards && !(node->boards = calloc(1, sizeof *node->boards)))
        return NULL;
    beam_board_t *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->owner = owner;
    memcpy(b->actor, actor, BEAM_ACTOR_ID_SIZE);
    LL_PREPEND(node->boards->live, b);
    return b;
}

int beam_boards_adopt(beam_node_t *node, const void *owner, const char *actor, long pid, int64_t fd_num,
                      int64_t size)
{
    if (size != BEAM_BOARD_SIZE)
        return -EINVAL;
    void *map;
    int fd;
    /* what the fd is comes first: a bad one is named as such, even a second */
    int rc = beam_shm_map(pid, fd_num, BEAM_BOARD_SIZE, &map, &fd, NULL);
    if (rc < 0)
        return rc;
    close(fd); /* the mapping keeps the page */
    beam_board_t *b = find(node, owner) ? NULL : add(node, owner, actor);
    if (!b) {
        munmap(map, BEAM_BOARD_SIZE);
        return find(node, owner) ? -EEXIST : -ENOMEM;
    }
    b->page = map;
    return 0;
}

void beam_boards_reply(beam_port_t *c, uint64_t msgid, int rc)
{
    if (rc == 0)
        beam_port_reply_empty(c, msgid);
    else if (rc == -EEXIST || rc == -EINVAL)
        beam_port_reply_error(c, msgid, "bad_request", "field 'fd' %s",
                              rc == -EEXIST ? "names a second board: this worker has one"
                                            : "must be a memfd of 4096 bytes sealed against grow and shrink");
    else
        beam_port_reply_error(c, msgid, "denied", "could not adopt the call board: %s",
                              rc == -EXDEV ? "only its node's daemon reads it" : strerror(-rc));
}

uint64_t beam_boards_report(beam_node_t *node, const void *owner, const char *actor, beam_board_counts_t now)
{
    beam_board_t *b = find(node, owner);
    if (!b && !(b = add(node, owner, actor)))
        return 0;
    if (b->page)
        return 0; /* adopted here: its page is the truth */
    uint64_t more = now.started > b->kept.started ? now.started - b->kept.started : 0;
    b->kept = now;
    return more;
}

void beam_boards_changed(beam_node_t *node, void (*fn)(void *arg, const void *owner, beam_board_counts_t now),
                         void *arg)
{
    for (beam_board_t *b = node->boards ? node->boards->live : NULL; b; b = b->next) {
        beam_board_counts_t c = counts(b);
        if (b->page && memcmp(&c, &b->kept, sizeof c) != 0) {
            b->kept = c;
            fn(arg, b->owner, c);
        }
    }
}

static void drop(beam_boards_t *t, beam_board_t *b)
{
    beam_board_counts_t c = counts(b);
    t->folded.started += c.started;
    t->folded.finished += c.finished;
    t->folded.pushed += c.pushed;
    LL_DELETE(t->live, b);
    if (b->page)
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
            beam_board_counts_t c = counts(b);
            n += c.started >= c.finished ? c.started - c.finished : 0;
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
        beam_board_counts_t c = counts(b);
        t.started += c.started;
        t.finished += c.finished;
        t.pushed += c.pushed;
    }
    return t;
}

static void put_le64(char *out, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        out[i] = (char)(v >> (8 * i));
}

static uint64_t get_le64(const char *in)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | (unsigned char)in[i];
    return v;
}

void beam_boards_pack_counts(beam_board_counts_t c, char out[BEAM_BOARD_COUNTS_BYTES])
{
    put_le64(out, c.started);
    put_le64(out + 8, c.finished);
    put_le64(out + 16, c.pushed);
}

beam_board_counts_t beam_boards_unpack_counts(const char in[BEAM_BOARD_COUNTS_BYTES])
{
    return (beam_board_counts_t){get_le64(in), get_le64(in + 8), get_le64(in + 16)};
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
