/*-------------------------------------------------------------------------
 *
 * cluster.c
 *	  SQL entry points of cluster mode that every node answers, in
 *	  single-node mode too: silo.cluster_info (the shard map as this node
 *	  knows it), silo.node_info (this node), silo.shard_for_tenant and
 *	  silo.tenant_hash; and the functions moves use, which only the
 *	  coordinator (a superuser) and the broker's passes call:
 *	  silo.shard_served, silo.shard_drain, silo.shard_forget_hints.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_api.h"

#include "utils/builtins.h"
#include "utils/numeric.h"
#include "utils/pg_lsn.h"

PG_FUNCTION_INFO_V1(silo_cluster_info);
PG_FUNCTION_INFO_V1(silo_node_info);
PG_FUNCTION_INFO_V1(silo_shard_for_tenant);
PG_FUNCTION_INFO_V1(silo_tenant_hash_sql);
PG_FUNCTION_INFO_V1(silo_shard_served);
PG_FUNCTION_INFO_V1(silo_shard_drain);
PG_FUNCTION_INFO_V1(silo_shard_forget_hints);
PG_FUNCTION_INFO_V1(silo_move_tail_setsums);

/*
 * cluster_int128_numeric: an int128 (a shard bound, up to 2^63) as a
 * numeric datum.
 */
static Datum
cluster_int128_numeric(int128 v)
{
	char		buf[64];
	char	   *p = buf + sizeof(buf) - 1;
	bool		neg = v < 0;
	uint128		u = neg ? (uint128) (-(v + 1)) + 1 : (uint128) v;

	*p = '\0';
	do
	{
		*--p = '0' + (char) (u % 10);
		u /= 10;
	} while (u > 0);
	if (neg)
		*--p = '-';
	return DirectFunctionCall3(numeric_in, CStringGetDatum(p), ObjectIdGetDatum(InvalidOid),
							   Int32GetDatum(-1));
}

/*
 * cluster_state_name: a shard's state as the views show it.
 */
static const char *
cluster_state_name(const SiloShard *s)
{
	if (!s->local && s->move == SILO_MOVE_IN)
		return "receiving";
	if (!s->local)
		return !s->owner_node_id[0] ? "unowned" : s->owner_down ? "owner-down" : "remote";
	switch (s->state)
	{
		case SILO_SHARD_SERVING:
			return s->move == SILO_MOVE_OUT ? "moving" : "serving";
		case SILO_SHARD_PAUSED:
			return "paused";
		case SILO_SHARD_ACQUIRING:
			return "acquiring";
	}
	return "unknown";
}

/*
 * silo_cluster_info: SQL entry point behind the view silo.cluster_info:
 * one row per shard (shard_id, range_start, range_end, owner_node_id,
 * owner_conninfo, state, is_local).  Single-node mode shows the whole
 * range as one local shard.
 */
Datum
silo_cluster_info(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SiloShard  *shards = palloc(sizeof(SiloShard) * SILO_MAX_SHARDS);
	bool		member;
	bool		serving;
	int			n;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	n = silo_cluster_snapshot(shards, &member, &serving);
	for (i = 0; i < n; i++)
	{
		SiloShard  *s = &shards[i];
		Datum		values[7];
		bool		nulls[7] = {false, false, false, false, false, false, false};
		int128		end = s->end_is_max ? ((int128) 1 << 63) : (int128) s->range_end;

		values[0] = Int32GetDatum(s->id);
		values[1] = cluster_int128_numeric((int128) s->range_start);
		values[2] = cluster_int128_numeric(end);
		if (!silo_cluster_mode())
		{
			/* the one local shard: this node, as configured */
			values[3] = CStringGetTextDatum(silo_node_id ? silo_node_id : "");
			values[4] = CStringGetTextDatum(silo_advertise_conninfo ? silo_advertise_conninfo : "");
		}
		else
		{
			values[3] = CStringGetTextDatum(s->owner_node_id);
			values[4] = CStringGetTextDatum(s->owner_conninfo);
			nulls[3] = s->owner_node_id[0] == '\0';
			nulls[4] = s->owner_conninfo[0] == '\0';
		}
		values[5] = CStringGetTextDatum(cluster_state_name(s));
		values[6] = BoolGetDatum(s->local);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * silo_node_info: SQL entry point behind the view silo.node_info: this
 * node's id, mode ('single-node' or 'cluster'), membership ('alive',
 * 'lost' or, in single-node mode, 'none'), the shards it owns and those
 * it serves now.
 */
Datum
silo_node_info(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SiloShard  *shards = palloc(sizeof(SiloShard) * SILO_MAX_SHARDS);
	Datum	   *owned = palloc(sizeof(Datum) * SILO_MAX_SHARDS);
	Datum	   *served = palloc(sizeof(Datum) * SILO_MAX_SHARDS);
	int			nowned = 0;
	int			nserved = 0;
	bool		member;
	bool		serving;
	int			n;
	int			i;
	Datum		values[5];
	bool		nulls[5] = {false, false, false, false, false};

	InitMaterializedSRF(fcinfo, 0);
	n = silo_cluster_snapshot(shards, &member, &serving);
	for (i = 0; i < n; i++)
	{
		if (!shards[i].local)
			continue;
		owned[nowned++] = Int32GetDatum(shards[i].id);
		if (shards[i].state == SILO_SHARD_SERVING && serving)
			served[nserved++] = Int32GetDatum(shards[i].id);
	}
	values[0] = CStringGetTextDatum(silo_node_id ? silo_node_id : "");
	values[1] = CStringGetTextDatum(silo_cluster_mode() ? "cluster" : "single-node");
	values[2] = CStringGetTextDatum(!silo_cluster_mode() ? "none"
									: member && serving ? "alive" : "lost");
	values[3] = PointerGetDatum(construct_array(owned, nowned, INT4OID, 4, true, TYPALIGN_INT));
	values[4] = PointerGetDatum(construct_array(served, nserved, INT4OID, 4, true, TYPALIGN_INT));
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}

/*
 * silo_shard_for_tenant: SQL entry point silo.shard_for_tenant(tenant):
 * the id of the tenant's shard, as this node's map says (NULL when it has
 * no map yet).
 */
Datum
silo_shard_for_tenant(PG_FUNCTION_ARGS)
{
	char	   *tenant = silo_text_arg(fcinfo, 0, "tenant", 1, SILO_MAX_TENANT_LEN);
	SiloShard	s;

	if (!silo_shard_of(tenant, &s))
		PG_RETURN_NULL();
	PG_RETURN_INT32(s.id);
}

/*
 * silo_tenant_hash_sql: SQL entry point silo.tenant_hash(tenant): the
 * 64-bit hash shards are ranges of (hashtextextended(tenant, 0)).
 */
Datum
silo_tenant_hash_sql(PG_FUNCTION_ARGS)
{
	text	   *t;

	silo_require_arg(fcinfo, 0, "tenant");
	t = PG_GETARG_TEXT_PP(0);
	PG_RETURN_INT64(silo_tenant_hash(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t)));
}

/*
 * silo_shard_served: SQL function silo.shard_served(tenant), the filter of
 * the broker's passes in cluster mode: whether this node serves the
 * tenant's shard right now (then the shard's lock is held in share mode
 * until the transaction ends, as after the check of an entry point).
 * Rows of shards it does not serve -- a copy arriving during a move, a
 * copy left by one -- are not its to touch.  Always true in single-node
 * mode.
 */
Datum
silo_shard_served(PG_FUNCTION_ARGS)
{
	text	   *t = PG_GETARG_TEXT_PP(0);

	PG_RETURN_BOOL(silo_cluster_serves_tenant(text_to_cstring(t)));
}

/*
 * silo_shard_drain: SQL function silo.shard_drain(shard, timeout_ms), the
 * wait of a move's pause (cluster/pause.c); the coordinator's, over its
 * connection to this node.  Returns the WAL insert position after it.
 */
Datum
silo_shard_drain(PG_FUNCTION_ARGS)
{
	PG_RETURN_LSN(silo_cluster_drain(PG_GETARG_INT32(0), PG_GETARG_INT32(1)));
}

/*
 * silo_shard_forget_hints: SQL function silo.shard_forget_hints(), part
 * of taking a shard over from another node: the node-local state that
 * speeds its paths up may not know of the rows that arrived.  The lease
 * marks of this database are dropped (no mark is the lowest key, always
 * safe), the floating-limit refresh hint is turned on, and the broker is
 * woken at commit to look at the new rows.
 */
Datum
silo_shard_forget_hints(PG_FUNCTION_ARGS)
{
	silo_mark_forget_database();
	silo_set_refresh_hint(true);
	silo_wake_broker_at_commit();
	PG_RETURN_VOID();
}

/*
 * silo_move_tail_setsums: SQL function silo.move_tail_setsums(shard, move,
 * lo, hi, publication, finish_state, limit_ms), a move's setsums with only
 * the tail summed during the pause (cluster/tail.c); the coordinator's,
 * over a connection of its own.  hi NULL: the range ends at 2^63.
 */
Datum
silo_move_tail_setsums(PG_FUNCTION_ARGS)
{
	char	   *result;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2) || PG_ARGISNULL(4) ||
		PG_ARGISNULL(5) || PG_ARGISNULL(6))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("only the upper bound of silo.move_tail_setsums may be null")));
	result = silo_cluster_tail_setsums(PG_GETARG_INT32(0), PG_GETARG_INT64(1), PG_GETARG_INT64(2),
									   PG_ARGISNULL(3), PG_ARGISNULL(3) ? 0 : PG_GETARG_INT64(3),
									   text_to_cstring(PG_GETARG_TEXT_PP(4)),
									   text_to_cstring(PG_GETARG_TEXT_PP(5)), PG_GETARG_INT32(6));
	PG_RETURN_TEXT_P(cstring_to_text(result));
}
