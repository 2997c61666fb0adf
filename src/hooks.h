/* hooks.h — the node's upward calls (node.h, `hooks`) wired to the modules
 * that answer them. beamd's main and the fuzz targets share this, so a
 * harness runs the daemon's real wiring. */
#ifndef BEAM_HOOKS_H
#define BEAM_HOOKS_H

#include "node.h"

/* Sets every hook of node (and its procs reports, which on a member the
 * relay sets again when it joins). */
void beam_hooks_wire(beam_node_t *node);

#endif
