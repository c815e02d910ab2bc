/*-------------------------------------------------------------------------
 *
 * route.c
 *	  Sending a tenant's call to the node that owns the tenant's shard.
 *
 * A routed operation is a function that makes one attempt on the route's
 * current connection and says how it went (an Attempt).  route_run() calls
 * it until it is done, reacting to the outcome:
 *
 *	  - NOT_OWNER (SQLSTATE SL020): the DETAIL is a JSON object naming the
 *		shard and its owner ({"shard", "owner_node_id", "owner_conninfo"}).
 *		Connect to the owner (db.c keeps --dsn's credentials) and try
 *		again there.  An owner of null means the shard has no owner right
 *		now: retry on the same node after a back-off.
 *	  - the node's silo.cluster_info gives the shard to another node (for
 *		calls that raise no NOT_OWNER themselves: reads of views): the
 *		same, with the row's owner as the hint.
 *	  - SHARD_UNAVAILABLE (SL021), or a node without a shard map yet: retry
 *		on the same node after 100 ms, 200 ms, ... (at most 2 s each),
 *		--retries times.
 *	  - any other error: report it and exit 1.
 *
 * Hints are followed at most --max-hops times, and never to a conninfo
 * already followed (a loop: two nodes whose maps disagree, each naming the
 * other).  Giving up on NOT_OWNER exits 4; a shard that stays unavailable
 * exits 5; a node that cannot be reached exits 3.
 *
 * Nothing a call wrote survives an SL020 or SL021 (the check comes first in
 * every entry point, docs/cluster.md), so sending the call again elsewhere
 * cannot apply it twice.
 *
 * tools/siloctl/route.c
 *
 *-------------------------------------------------------------------------
 */
#include "siloctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SQL_CLUSTER_INFO \
	"SELECT shard_id, range_start, range_end, owner_node_id, owner_conninfo, " \
	"state, is_local FROM silo.cluster_info"

/*
 * route_begin
 *		Start a route for tenant at the node of --dsn (exit 3 if it cannot
 *		be reached).
 */
void
route_begin(Route *r, const char *tenant)
{
	memset(r, 0, sizeof(*r));
	r->tenant = tenant;
	r->conn = db_connect_or_exit();
	r->where = xstrdup("the node of --dsn");
	r->visited = xmalloc(sizeof(char *) * (opt.max_hops + 1));
	r->trail = jv_array();
}

/*
 * route_end
 *		Close the connection and free the route (its trail too, unless a
 *		command took it into its output).
 */
void
route_end(Route *r)
{
	PQfinish(r->conn);
	r->conn = NULL;
	for (int i = 0; i < r->hops; i++)
		free(r->visited[i]);
	free(r->visited);
	free(r->where);
	if (r->trail)
		jv_free(r->trail);
	r->trail = NULL;
}

/*
 * hint_node
 *		A hint's owner for messages: "node \"b\" (host=...)".
 */
static char *
hint_node(const OwnerHint *h)
{
	return xasprintf("node \"%s\" (%s)", h->node_id ? h->node_id : "?",
					 h->conninfo ? h->conninfo : "no conninfo");
}

/*
 * route_follow
 *		Move the route to the owner a hint names: refuse a loop or one hop
 *		too many (exit 4), connect (exit 3 on failure), remember the hop.
 *		via says where the hint came from ("not_owner" or "cluster_info").
 */
static void
route_follow(Route *r, const OwnerHint *h, const char *via)
{
	char	   *node = hint_node(h);
	char	   *err;
	PGconn	   *conn;
	JsonValue  *hop;

	for (int i = 0; i < r->hops; i++)
	{
		if (strcmp(r->visited[i], h->conninfo) == 0)
			fail_full(EXIT_NOT_OWNER, NULL,
					  "The nodes' shard maps disagree, or a node advertises a conninfo that leads elsewhere.",
					  "Compare \"siloctl cluster info\" on the nodes involved; retry once their maps agree.",
					  "NOT_OWNER loop: %s says shard %d of tenant \"%s\" is owned by %s, which was already tried",
					  r->where, h->shard, r->tenant, node);
	}
	if (r->hops >= opt.max_hops)
		fail_full(EXIT_NOT_OWNER, NULL, NULL,
				  "Raise --max-hops if the cluster is moving shards.",
				  "gave up after %d hop%s: %s says shard %d of tenant \"%s\" is owned by %s",
				  r->hops, r->hops == 1 ? "" : "s", r->where, h->shard, r->tenant, node);

	verbose("%s: shard %d of tenant \"%s\" is owned by %s; following (%s)",
			r->where, h->shard, r->tenant, node, via);
	conn = db_connect(h->conninfo, &err);
	if (conn == NULL)
		fail(EXIT_CONNECT, "cannot connect to %s, the owner of shard %d as %s says: %s",
			 node, h->shard, r->where, err);
	PQfinish(r->conn);
	r->conn = conn;
	r->visited[r->hops++] = xstrdup(h->conninfo);
	free(r->where);
	r->where = node;

	hop = jv_object();
	jv_set(hop, "shard", h->shard >= 0 ? jv_int(h->shard) : jv_null());
	jv_set(hop, "owner_node_id", jv_string(h->node_id));
	jv_set(hop, "owner_conninfo", jv_string(h->conninfo));
	jv_set(hop, "via", jv_string(via));
	jv_append(r->trail, hop);
}

/*
 * backoff
 *		Wait before retrying on the same node, if retries are left; false
 *		when they are used up.
 */
static bool
backoff(Route *r, int *left, int *delay_ms, const char *why)
{
	if (*left <= 0)
		return false;
	verbose("%s: %s; retrying in %d ms", r->where, why, *delay_ms);
	sleep_ms(*delay_ms);
	*delay_ms = *delay_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : *delay_ms * 2;
	(*left)--;
	return true;
}

/*
 * route_run
 *		Run fn until it is done, following and retrying as the file header
 *		says.  what names the call in error messages.  Returns only when fn
 *		reported ATTEMPT_DONE; every other end exits.
 */
void
route_run(Route *r, RouteFn fn, void *arg)
{
	int			left = opt.retries;
	int			delay = BACKOFF_FIRST_MS;

	for (;;)
	{
		Attempt		a;
		const char *state;
		const char *where;

		memset(&a, 0, sizeof(a));
		a.hint.shard = -1;
		fn(r, arg, &a);
		switch (a.status)
		{
			case ATTEMPT_DONE:
				return;

			case ATTEMPT_REMOTE:
				route_follow(r, &a.hint, "cluster_info");
				owner_hint_free(&a.hint);
				continue;

			case ATTEMPT_UNOWNED:
				if (!backoff(r, &left, &delay, "the tenant's shard has no owner"))
					fail_full(EXIT_NOT_OWNER, NULL, NULL,
							  "A node acquires an unowned shard once placement gives it one; a dead owner's shard needs \"siloctl shard force-release\".",
							  "shard %d of tenant \"%s\" has no owner, as %s says",
							  a.hint.shard, r->tenant, r->where);
				owner_hint_free(&a.hint);
				continue;

			case ATTEMPT_NO_MAP:
				if (!backoff(r, &left, &delay, "the node does not know the shard map yet"))
					fail(EXIT_UNAVAILABLE, "%s has no shard that holds tenant \"%s\" (no shard map yet?)",
						 r->where, r->tenant);
				continue;

			case ATTEMPT_ERROR:
				break;
		}

		/* an SQL error */
		if (db_conn_lost(r->conn))
			db_fail_result(r->conn, a.res, r->where);
		where = r->hops > 0 ? r->where : NULL;
		state = db_sqlstate(a.res);
		if (strcmp(state, SQLSTATE_NOT_OWNER) == 0)
		{
			const char *detail = PQresultErrorField(a.res, PG_DIAG_MESSAGE_DETAIL);

			if (!json_parse_owner_hint(detail, &a.hint))
				fail_full(EXIT_NOT_OWNER, state, detail, NULL,
						  "%s answered NOT_OWNER with a DETAIL that is not the JSON owner hint",
						  r->where);
			if (a.hint.conninfo == NULL || a.hint.conninfo[0] == '\0')
			{
				if (!backoff(r, &left, &delay, "NOT_OWNER and the shard has no owner right now"))
					fail_full(EXIT_NOT_OWNER, state, detail, NULL,
							  "shard %d of tenant \"%s\" has no owner, as %s says",
							  a.hint.shard, r->tenant, r->where);
			}
			else
				route_follow(r, &a.hint, "not_owner");
			owner_hint_free(&a.hint);
			PQclear(a.res);
			continue;
		}
		if (strcmp(state, SQLSTATE_UNAVAILABLE) == 0)
		{
			if (!backoff(r, &left, &delay, "the shard is unavailable (SL021)"))
			{
				const char *primary = PQresultErrorField(a.res, PG_DIAG_MESSAGE_PRIMARY);

				fail_full(EXIT_UNAVAILABLE, state,
						  PQresultErrorField(a.res, PG_DIAG_MESSAGE_DETAIL),
						  PQresultErrorField(a.res, PG_DIAG_MESSAGE_HINT),
						  "%s: %s (still, after %d retr%s)", r->where,
						  primary ? primary : "shard unavailable",
						  opt.retries, opt.retries == 1 ? "y" : "ies");
			}
			PQclear(a.res);
			continue;
		}
		db_fail_result(r->conn, a.res, where);
	}
}

/*
 * shard_row_of_hash
 *		The row of a cluster_info-shaped table (range_start, range_end as
 *		decimal text) whose half-open range holds hash, or -1.  The bounds
 *		are compared as 128-bit integers: the last shard ends at 2^63.
 */
int
shard_row_of_hash(const Table *t, int64_t hash)
{
	for (int r = 0; r < t->nrows; r++)
	{
		const char *s = table_get(t, r, "range_start");
		const char *e = table_get(t, r, "range_end");
		int128_t	start,
					end;

		if (s == NULL || e == NULL || !parse_int128(s, &start) || !parse_int128(e, &end))
			continue;
		if ((int128_t) hash >= start && (int128_t) hash < end)
			return r;
	}
	return -1;
}

/*
 * route_locate
 *		Look the tenant's shard up in the node's silo.cluster_info (the hash
 *		computed here).  True when the shard is this node's (its id in
 *		*shard); otherwise false with the attempt filled in: the error, the
 *		owner to follow, no owner, or no map.
 */
bool
route_locate(PGconn *conn, const char *tenant, Attempt *a, int *shard)
{
	PGresult   *res = db_exec(conn, SQL_CLUSTER_INFO, 0, NULL);
	Table	   *t;
	int			row;
	bool		local = false;

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		a->status = ATTEMPT_ERROR;
		a->res = res;
		return false;
	}
	t = table_from_result(res);
	PQclear(res);
	row = shard_row_of_hash(t, tenant_hash(tenant, strlen(tenant)));
	if (row < 0)
		a->status = ATTEMPT_NO_MAP;
	else
	{
		const char *owner = table_get(t, row, "owner_node_id");
		const char *conninfo = table_get(t, row, "owner_conninfo");
		const char *is_local = table_get(t, row, "is_local");

		*shard = atoi(table_get(t, row, "shard_id"));
		a->hint.shard = *shard;
		if (is_local && strcmp(is_local, "t") == 0)
			local = true;
		else if (conninfo == NULL || conninfo[0] == '\0')
			a->status = ATTEMPT_UNOWNED;
		else
		{
			a->status = ATTEMPT_REMOTE;
			a->hint.node_id = owner ? xstrdup(owner) : NULL;
			a->hint.conninfo = xstrdup(conninfo);
		}
	}
	table_free(t);
	return local;
}
