/* localbatch.c — the local_batch a member builds for its head (localbatch.h). */
#include "localbatch.h"

#include <errno.h>

#include "boards.h"
#include "link.h"
#include "port.h"

void beam_localbatch_flush(beam_localbatch_t *b)
{
    size_t n = b->n;
    beam_link_t *l = beam_link_up(b->node);
    uv_timer_stop(&b->quiet);
    uv_prepare_stop(&b->age);
    if (n == 0)
        return;
    b->n = 0;
    if (l && !b->enc.failed) {
        beam_pack_array_close(&b->enc, b->count_at, (uint32_t)n);
        if (beam_enc_end(&b->enc, 0) == 0) {
            beam_link_send_enc(l, &b->enc); /* (which destroys it) */
            return;
        }
    }
    beam_enc_destroy(&b->enc);
    if (l)
        beam_link_close(l, "out of memory holding local calls for the head", 0);
}

static void on_quiet(uv_timer_t *t)
{
    beam_localbatch_flush(t->data);
}

/* The loop is about to wait: what has been held BEAM_SHORTCUT_HOLD_MS goes. */
static void on_age(uv_prepare_t *p)
{
    beam_localbatch_t *b = p->data;
    if (uv_now(b->node->loop) - b->since >= BEAM_SHORTCUT_HOLD_MS)
        beam_localbatch_flush(b);
}

msgpack_packer *beam_localbatch_start(beam_localbatch_t *b, int kind, uint32_t vconn)
{
    if (b->n == 0) {
        beam_enc_init(&b->enc);
        beam_enc_push(&b->enc, "local_batch", 1);
        beam_pack_key(&b->enc.pk, "msgs");
        b->count_at = beam_pack_array_open(&b->enc); /* its count written when the batch goes */
    }
    msgpack_pack_array(&b->enc.pk, 3);
    msgpack_pack_uint8(&b->enc.pk, (uint8_t)kind);
    msgpack_pack_uint32(&b->enc.pk, vconn);
    return &b->enc.pk;
}

void beam_localbatch_done(beam_localbatch_t *b)
{
    if (++b->n >= BEAM_SHORTCUT_HOLD_MAX || b->enc.sbuf.size >= BEAM_SHORTCUT_HOLD_BYTES || b->enc.failed) {
        beam_localbatch_flush(b);
    } else if (b->n == 1) {
        b->since = uv_now(b->node->loop);
        uv_prepare_start(&b->age, on_age);
        uv_timer_start(&b->quiet, on_quiet, BEAM_LOCAL_QUIET_MS, 0);
    }
}

static void hold_board(void *arg, const void *owner, beam_board_counts_t now)
{
    beam_localbatch_t *b = arg;
    char frame[BEAM_BOARD_COUNTS_BYTES];
    beam_boards_pack_counts(now, frame);
    /* owner: the worker's local session, alive while its board is (session.c drops it last) */
    beam_pack_bin(beam_localbatch_start(b, BEAM_LOCAL_REC_BOARD, ((const beam_port_t *)owner)->id), frame,
                  sizeof frame);
    beam_localbatch_done(b);
}

void beam_localbatch_boards(beam_localbatch_t *b)
{
    beam_boards_changed(b->node, hold_board, b);
}

static void on_boards(uv_timer_t *t)
{
    beam_localbatch_t *b = t->data;
    beam_localbatch_boards(b);
    if (beam_boards_count(b->node) == 0)
        uv_timer_stop(t);
}

void beam_localbatch_boards_start(beam_localbatch_t *b)
{
    if (!uv_is_active((uv_handle_t *)&b->boards) && !uv_is_closing((uv_handle_t *)&b->boards))
        uv_timer_start(&b->boards, on_boards, BEAM_LOCAL_BOARDS_MS, BEAM_LOCAL_BOARDS_MS);
}

int beam_localbatch_hold_frame(beam_localbatch_t *b, uint32_t vconn, const char *body, size_t len)
{
    if (len > BEAM_SHORTCUT_HOLD_BYTES / 4)
        return -EMSGSIZE;
    beam_pack_bin(beam_localbatch_start(b, BEAM_LOCAL_REC_FRAME, vconn), body, len);
    beam_localbatch_done(b);
    return 0;
}

void beam_localbatch_reset(beam_localbatch_t *b)
{
    if (b->n)
        beam_enc_destroy(&b->enc);
    b->n = 0;
    uv_timer_stop(&b->quiet);
    uv_prepare_stop(&b->age);
    uv_timer_stop(&b->boards);
    if (b->node->stopping && !uv_is_closing((uv_handle_t *)&b->quiet)) {
        uv_close((uv_handle_t *)&b->quiet, NULL);
        uv_close((uv_handle_t *)&b->age, NULL);
        uv_close((uv_handle_t *)&b->boards, NULL);
    }
}

void beam_localbatch_init(beam_localbatch_t *b, beam_node_t *node)
{
    b->node = node;
    b->n = 0;
    uv_timer_init(node->loop, &b->quiet);
    b->quiet.data = b;
    uv_prepare_init(node->loop, &b->age);
    b->age.data = b;
    uv_timer_init(node->loop, &b->boards);
    b->boards.data = b;
}
