/*-------------------------------------------------------------------------
 *
 * placement.c
 *	  Which member a shard should belong to: rendezvous (highest random
 *	  weight) hashing over the live members, a pure function of the member
 *	  set and the shard id, so every node computes the same answer from
 *	  the same member keys.
 *
 * The weight of member m for shard S is hash_bytes_extended of the text
 * "<node_id>:<S>" with seed 0 (PostgreSQL's common/hashfn.h), read as an
 * unsigned 64-bit number; the highest weight wins, ties going to the
 * smaller node id (strcmp).  A join or a leave moves only the shards whose
 * winner joined or left.  A member that is draining (silo.draining: it is
 * leaving) takes part in nothing while any member does not drain, so its
 * shards move away before it goes.  Placement only proposes: the owner keys decide
 * (docs/cluster.md).
 *
 * Like the tenant hash, hash_bytes_extended reads bytes in native order,
 * so every node of a cluster must have the same byte order (all supported
 * servers are little-endian).
 *
 *-------------------------------------------------------------------------
 */
#include "silo_coordinator.h"

#include "common/hashfn.h"

/*
 * coord_placement_weight: the rendezvous weight of node_id for shard.
 */
uint64
coord_placement_weight(const char *node_id, int shard)
{
	char		buf[SILO_NODE_ID_LEN + 16];
	int			len;

	len = snprintf(buf, sizeof(buf), "%s:%d", node_id, shard);
	return hash_bytes_extended((const unsigned char *) buf, len, 0);
}

/*
 * coord_placement_owner: the live member placement gives shard to, or
 * NULL when there is no live member (draining members only when all are).
 */
const CoordMember *
coord_placement_owner(const CoordState *cs, int shard)
{
	const CoordMember *best = NULL;
	uint64		best_weight = 0;
	bool		all_draining = true;
	int			i;

	for (i = 0; i < cs->nmembers; i++)
		all_draining &= cs->members[i].draining;
	for (i = 0; i < cs->nmembers; i++)
	{
		const CoordMember *m = &cs->members[i];
		uint64		w = coord_placement_weight(m->node_id, shard);

		/* a draining member gets nothing, unless every member drains */
		if (m->draining && !all_draining)
			continue;

		if (best == NULL || w > best_weight ||
			(w == best_weight && strcmp(m->node_id, best->node_id) < 0))
		{
			best = m;
			best_weight = w;
		}
	}
	return best;
}
