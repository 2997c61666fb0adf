/* deaths.h — sweeps of the actor table when something around it goes: a
 * placement group removed (or its record freed), a member node lost, the
 * daemon stopping. Each marks the actors concerned and kills them one at a
 * time through the actor table (actors.h). Wired as node hooks (beamd.c). */
#ifndef BEAM_DEATHS_H
#define BEAM_DEATHS_H

#include "actors.h"
#include "node.h"

/* Its placement group was removed: kills every actor placed in it. */
void beam_actors_pg_removed(beam_node_t *node, struct beam_pg_s *pg);
/* The removed group's record is about to be freed: no actor keeps pointing
 * at it (any not dead yet dies as in beam_actors_pg_removed). */
void beam_actors_pg_forget(beam_node_t *node, struct beam_pg_s *pg);
/* Every actor placed on member m dies with message. */
void beam_actors_member_lost(beam_node_t *node, struct beam_member_s *m, const char *message);
/* Kills every worker (daemon exit); their handles close in later loop turns. */
void beam_actors_stop_all(beam_node_t *node);

#endif
