/*-------------------------------------------------------------------------
 *
 * members.c
 *	  Cluster mode: which nodes the worker leases from, found from the
 *	  shard map of the node it was given, and kept up to date.
 *
 * The node of --dsn is the seed.  At startup members_start() connects to
 * it and reads silo.node_info: a node in cluster mode (and no
 * --no-cluster) turns cluster mode on, and then every distinct owner in
 * silo.cluster_info becomes a member with a connection of its own (the
 * seed keeps its --dsn connection: it is the owner the map marks local).
 * members_refresh() reads the map again every MEMBERS_REFRESH_MS, and at
 * once after an SL020 or a lost connection: owners that appear are
 * connected, owners that disappear are no longer leased from and are
 * disconnected once no running job reports to them.  The map is read from
 * the seed, or from any connected member while the seed is down.
 *
 * members_follow_hint() turns the DETAIL of an SL020 into the member that
 * owns the shard, adding and connecting it when the map did not know it
 * yet.
 *
 * tools/worker/members.c
 *
 *-------------------------------------------------------------------------
 */
#include "silo_worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MEMBERS_REFRESH_MS	5000

Member	  **members;
int			nmembers;
bool		cluster_mode;
int64_t		members_refresh_at;

/*
 * member_name
 *		How logs name a member: its node id and conninfo, or for the seed
 *		before its id is known, "the node of --dsn".
 */
const char *
member_name(const Member *m)
{
	static char buf[512];

	if (m->node_id == NULL)
		return "the node of --dsn";
	snprintf(buf, sizeof(buf), "node \"%s\" (%s)", m->node_id,
			 m->conninfo ? m->conninfo : "--dsn");
	return buf;
}

/*
 * members_add
 *		Append a new, disconnected member; conninfo NULL is the seed.
 */
static Member *
members_add(const char *node_id, const char *conninfo)
{
	Member	   *m = calloc(1, sizeof(Member));
	Member	  **grown = realloc(members, (nmembers + 1) * sizeof(Member *));

	if (m == NULL || grown == NULL)
	{
		log_msg(LOG_ERROR, "out of memory");
		exit(1);
	}
	members = grown;
	m->node_id = xstrdup(node_id);
	m->conninfo = xstrdup(conninfo);
	m->backoff_ms = RECONNECT_DELAY_MS;
	m->listed = true;
	members[nmembers++] = m;
	return m;
}

/*
 * members_find
 *		The member with this node id, or NULL.
 */
static Member *
members_find(const char *node_id)
{
	int			i;

	for (i = 0; i < nmembers; i++)
		if (members[i]->node_id && strcmp(members[i]->node_id, node_id) == 0)
			return members[i];
	return NULL;
}

/*
 * members_join
 *		Make the owner node_id, reached at conninfo, a listed member: a new
 *		one is connected at once (a failure is retried by the loop), a
 *		known one whose advertised conninfo changed is reconnected there.
 */
static Member *
members_join(const char *node_id, const char *conninfo)
{
	Member	   *m = members_find(node_id);

	if (m != NULL && m->conninfo != NULL && conninfo != NULL &&
		strcmp(m->conninfo, conninfo) != 0)
	{
		log_msg(LOG_INFO, "node \"%s\" moved to %s", node_id, conninfo);
		free(m->conninfo);
		m->conninfo = xstrdup(conninfo);
		if (m->conn != NULL && !members_in_use(m))
		{
			PQfinish(m->conn);
			m->conn = NULL;
			m->reconnect_at = 0;
		}
	}
	if (m == NULL)
	{
		m = members_add(node_id, conninfo);
		log_msg(LOG_INFO, "leasing from %s too", member_name(m));
		(void) db_connect(m, false);
	}
	else if (!m->listed)
	{
		log_msg(LOG_INFO, "%s is in the shard map again", member_name(m));
		m->listed = true;
		m->lease_wanted = true;
	}
	return m;
}

/*
 * members_in_use
 *		Whether a running job's lease is on m (its reports go there).
 */
bool
members_in_use(const Member *m)
{
	int			i;

	for (i = 0; i < opt.concurrency; i++)
		if (jobs[i] && jobs[i]->member == m)
			return true;
	return false;
}

/*
 * members_any_connected
 *		Whether some member we lease from has a connection.
 */
bool
members_any_connected(void)
{
	int			i;

	for (i = 0; i < nmembers; i++)
		if (members[i]->listed && members[i]->conn != NULL)
			return true;
	return false;
}

/*
 * members_start
 *		Connect to the seed (a failure is fatal), learn its node id and
 *		mode, and in cluster mode connect to every owner of its map.
 */
bool
members_start(void)
{
	Member	   *seed = members_add(NULL, NULL);
	PGresult   *res = NULL;

	if (!db_connect(seed, true))
		return false;
	if (opt.no_cluster)
		return true;
	/* an extension older than cluster mode has no silo.node_info */
	if (db_query(seed, "node info", SQL_NODE_INFO, 0, NULL, &res) != QS_OK)
		return seed->conn != NULL;
	if (PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 1), "cluster") == 0)
	{
		cluster_mode = true;
		seed->node_id = xstrdup(PQgetvalue(res, 0, 0));
		log_msg(LOG_INFO, "%s is in cluster mode; leasing from every owner "
				"of its shard map", member_name(seed));
		members_refresh(now_ms());
	}
	PQclear(res);
	return true;
}

/*
 * members_refresh
 *		Read the owners from the seed's silo.cluster_info (or a connected
 *		member's while the seed is down) and bring the member list in line;
 *		schedule the next read.  Nothing changes when no map can be read.
 */
void
members_refresh(int64_t now)
{
	Member	   *from = NULL;
	PGresult   *res = NULL;
	bool	   *seen;
	int			i,
				n;

	members_refresh_at = now + MEMBERS_REFRESH_MS;
	if (!cluster_mode)
		return;
	for (i = 0; i < nmembers && from == NULL; i++)
		if (members[i]->conn != NULL && members[i]->node_id != NULL &&
			(i == 0 || members[i]->listed))
			from = members[i];
	if (from == NULL ||
		db_query(from, "cluster info", SQL_OWNERS, 0, NULL, &res) != QS_OK)
		return;
	n = nmembers;
	seen = calloc(n + 1, sizeof(bool));
	if (seen == NULL)
	{
		log_msg(LOG_ERROR, "out of memory");
		exit(1);
	}
	seen[0] = true;				/* the seed is always leased from */
	for (i = 0; i < PQntuples(res); i++)
	{
		const char *node_id = PQgetvalue(res, i, 0);
		bool		local = strcmp(PQgetvalue(res, i, 2), "t") == 0;
		Member	   *m;
		int			j;

		/* the asked node's own shards: reach it as we already do */
		if (local || strcmp(node_id, from->node_id) == 0)
			m = from;
		else if (members[0]->node_id &&
				 strcmp(node_id, members[0]->node_id) == 0)
			m = members[0];
		else if (PQgetisnull(res, i, 1) || PQgetvalue(res, i, 1)[0] == '\0')
			continue;			/* no silo.advertise_conninfo: unreachable */
		else
			m = members_join(node_id, PQgetvalue(res, i, 1));
		for (j = 0; j < n; j++)
			if (members[j] == m)
				seen[j] = true;
	}
	PQclear(res);
	for (i = 0; i < n; i++)
	{
		Member	   *m = members[i];

		if (seen[i] || !m->listed)
			continue;
		m->listed = false;
		log_msg(LOG_INFO, "%s owns no shard any more; not leasing from it",
				member_name(m));
	}
	free(seen);
	/* unlisted members keep their connection only for running jobs */
	for (i = 1; i < nmembers; i++)
		if (!members[i]->listed && members[i]->conn != NULL &&
			!members_in_use(members[i]))
		{
			PQfinish(members[i]->conn);
			members[i]->conn = NULL;
		}
}

/*
 * members_follow_hint
 *		The member an SL020's DETAIL names as the shard's owner, added and
 *		connected if new; NULL when the DETAIL is not the JSON hint or names
 *		no owner (the shard is between owners: the caller retries later).
 */
Member *
members_follow_hint(const char *detail)
{
	char	   *node_id = NULL,
			   *conninfo = NULL;
	Member	   *m = NULL;

	members_refresh_at = now_ms();	/* the map changed: read it soon */
	if (detail == NULL || !json_flat_get(detail, "owner_node_id", &node_id) ||
		!json_flat_get(detail, "owner_conninfo", &conninfo))
	{
		log_msg(LOG_WARNING, "cannot read the owner hint: %s",
				detail ? detail : "(no detail)");
		free(node_id);
		return NULL;
	}
	if (node_id != NULL && (conninfo == NULL || conninfo[0] == '\0') &&
		!(members[0]->node_id && strcmp(node_id, members[0]->node_id) == 0))
		log_msg(LOG_WARNING, "node \"%s\" advertises no conninfo", node_id);
	else if (node_id != NULL)
	{
		if (members[0]->node_id && strcmp(node_id, members[0]->node_id) == 0)
			m = members[0];
		else
			m = members_join(node_id, conninfo);
		if (m->conn == NULL)
			(void) db_connect(m, false);
	}
	free(node_id);
	free(conninfo);
	return m;
}

/*
 * members_close_all
 *		Close every connection at exit.
 */
void
members_close_all(void)
{
	int			i;

	for (i = 0; i < nmembers; i++)
		if (members[i]->conn != NULL)
		{
			PQfinish(members[i]->conn);
			members[i]->conn = NULL;
		}
}
