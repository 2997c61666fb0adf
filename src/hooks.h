/* hooks.h — the node's upward calls (node.h, `hooks`) wired to the modules
 * that answer them, and the node's stop and free in their order. beamd's
 * main and the fuzz targets share this, so a harness runs the daemon's real
 * wiring and teardown. */
#ifndef BEAM_HOOKS_H
#define BEAM_HOOKS_H

#include "node.h"

/* Sets every hook of node (and its procs reports, which on a member the
 * relay sets again when it joins). */
void beam_hooks_wire(beam_node_t *node);
/* Stops the node's work (the caller closes its own listener and signals):
 * workers killed, every client and link closed, the member-local table
 * reset, the reaper closed. The loop then runs until its handles are gone. */
void beam_node_stop(beam_node_t *node, const char *why);
/* Frees every table once the loop has stopped (after beam_node_stop). */
void beam_node_free(beam_node_t *node);

#endif
