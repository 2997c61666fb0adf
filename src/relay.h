/* relay.h — the cluster's switches over the links (layer 5). On the head:
 * a member's join and welcome, its clients' frames into the op table
 * (node->hooks.dispatch), their opens and closes, and its workers' starts, output
 * and exits into the actor table; a lost link loses its member. On a
 * member: the join, the head's spawns and kills (procs), the head's frames
 * to local clients, and, when the head is lost, every local client closed
 * and every worker killed. The link (link.h) carries the bytes. */
#ifndef BEAM_RELAY_H
#define BEAM_RELAY_H

#include <stddef.h>

#include "link.h"
#include "node.h"

/* Head: listens for members (beam_links_listen) with the head's switch as
 * the links' owner. 0, or a negative errno with err set. */
int beam_relay_listen(beam_node_t *node, const beam_cluster_opts_t *opts, char *err, size_t errlen);
/* Member: joins the head (beam_link_join) with the member's switch, and
 * sends its workers' output and exits to the head. 0 or a negative errno. */
int beam_relay_join(beam_node_t *node, const beam_cluster_opts_t *opts);

/* Reads a link message by the op table of the side that receives it (the
 * head's, from a member: at_head; else the member's, from its head), for a
 * link up or still greeting (join, welcome), as the switch does before it
 * acts, and runs no handler: 0, or -EINVAL with the refusal in err (what
 * relay logs as it closes the link). For tests. */
int beam_relay_check(const beam_msg_t *m, int at_head, int up, char *err, size_t errlen);

#endif
