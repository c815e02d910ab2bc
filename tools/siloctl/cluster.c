/*-------------------------------------------------------------------------
 *
 * cluster.c
 *	  The commands about the cluster itself: cluster info, node info,
 *	  shard list, tenant hash, tenant locate and shard force-release.
 *
 * Everything but force-release and "cluster info --from-etcd" asks one
 * node (silo.cluster_info, silo.node_info), and "tenant hash" asks nobody
 * unless --check: the hash is computed here (hash.c), the way a client
 * routes its calls.
 *
 * tools/siloctl/cluster.c
 *
 *-------------------------------------------------------------------------
 */
#include "siloctl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SQL_NODE_INFO \
	"SELECT node_id, mode, membership, owned_shards, serving_shards " \
	"FROM silo.node_info"
#define SQL_SHARDS \
	"SELECT shard_id, range_start, range_end, owner_node_id, state, is_local, " \
	"owner_conninfo FROM silo.cluster_info ORDER BY range_start"
#define SQL_TENANT_HASH "SELECT silo.tenant_hash($1)::text"

/*
 * query_table
 *		Run a query without parameters and return its rows (exit 1 on an
 *		error, 3 on a lost connection).
 */
static Table *
query_table(PGconn *conn, const char *sql, const char *what)
{
	PGresult   *res = db_exec(conn, sql, 0, NULL);
	Table	   *t;

	db_expect_tuples(conn, res, what);
	t = table_from_result(res);
	PQclear(res);
	return t;
}

/*
 * print_node_line
 *		The one-line summary of a node (a silo.node_info row) that heads
 *		"cluster info".
 */
static void
print_node_line(const Table *node, int nshards)
{
	const char *id = table_get(node, 0, "node_id");

	if (node->nrows == 0)
	{
		printf("node: (silo.node_info is empty)\n");
		return;
	}
	printf("node %s%s%s: %s mode, membership %s; owns %s, serves %s; %d shard%s in its map\n",
		   id && *id ? "\"" : "", id && *id ? id : "(no node id)", id && *id ? "\"" : "",
		   table_get(node, 0, "mode"), table_get(node, 0, "membership"),
		   table_get(node, 0, "owned_shards"), table_get(node, 0, "serving_shards"),
		   nshards, nshards == 1 ? "" : "s");
}

/*
 * cluster_info_from_etcd
 *		cluster info --from-etcd: the map, the owners and the members, read
 *		from etcd at one revision.
 */
static int
cluster_info_from_etcd(void)
{
	static const char *const shard_cols[] = {
		"shard_id", "range_start", "range_end", "owner_node_id", "state",
		"acquired_at", "owner_conninfo"
	};
	static const CellKind shard_kinds[] = {
		CELL_INT, CELL_BIGNUM, CELL_BIGNUM, CELL_TEXT, CELL_TEXT, CELL_TEXT, CELL_TEXT
	};
	static const char *const member_cols[] = {"node_id", "started_at", "conninfo"};
	EtcdSession *s = etcdx_open();
	char	   *map_key = etcdx_key("coord/shardmap");
	char	   *owners_prefix = etcdx_key("coord/shards/");
	char	   *members_prefix = etcdx_key("coord/members/");
	EtcdValue	map;
	int64_t		rev;
	ShardRange *ranges;
	int			nranges;
	EtcdEntry  *owners;
	EtcdEntry  *members;
	int			nowners;
	int			nmembers;
	Table	   *shards = table_new(7, shard_cols, shard_kinds);
	Table	   *mem = table_new(3, member_cols, NULL);

	etcdx_get(s, map_key, 0, &map, &rev);
	if (!map.found)
		fail(EXIT_FAILED, "no shard map in etcd: %s is absent (no node has started in cluster mode with --prefix %s)",
			 map_key, opt.prefix);
	if (!json_parse_shardmap(map.value, map.len, &ranges, &nranges))
		fail(EXIT_FAILED, "the shard map %s is not readable: %s", map_key, map.value);
	nowners = etcdx_list(s, owners_prefix, rev, &owners);
	nmembers = etcdx_list(s, members_prefix, rev, &members);

	for (int i = 0; i < nmembers; i++)
	{
		NodeValue	v;
		const char *row[3] = {members[i].key, NULL, NULL};

		if (json_parse_node_value(members[i].value, members[i].len, true, &v))
		{
			row[1] = v.since;
			row[2] = v.conninfo;
		}
		table_add_row(mem, row);
		node_value_free(&v);
	}
	for (int i = 0; i < nranges; i++)
	{
		char		id[16];
		char		suffix[32];
		NodeValue	owner = {0};
		bool		owned = false;
		bool		alive = false;
		const char *row[7];

		snprintf(id, sizeof(id), "%d", ranges[i].id);
		snprintf(suffix, sizeof(suffix), "%d/owner", ranges[i].id);
		for (int j = 0; j < nowners; j++)
		{
			if (strcmp(owners[j].key, suffix) != 0)
				continue;
			owned = true;
			if (!json_parse_node_value(owners[j].value, owners[j].len, false, &owner))
				owner.node_id = xstrdup(owners[j].value);
		}
		for (int j = 0; owned && j < nmembers; j++)
			if (strcmp(members[j].key, owner.node_id) == 0)
				alive = true;
		row[0] = id;
		row[1] = ranges[i].start;
		row[2] = ranges[i].end;
		row[3] = owner.node_id;
		row[4] = !owned ? "unowned" : alive ? "owned" : "owner-down";
		row[5] = owner.since;
		row[6] = owner.conninfo;
		table_add_row(shards, row);
		node_value_free(&owner);
	}

	if (opt.json)
	{
		JsonValue  *doc = jv_object();

		jv_set(doc, "source", jv_string("etcd"));
		jv_set(doc, "prefix", jv_string(opt.prefix));
		jv_set(doc, "revision", jv_int(rev));
		jv_set(doc, "shards", jv_rows(shards));
		jv_set(doc, "members", jv_rows(mem));
		jv_print(doc);
	}
	else
	{
		printf("etcd (prefix %s) at revision %" PRId64 ": %d shard%s, %d live member%s\n\n",
			   opt.prefix, rev, nranges, nranges == 1 ? "" : "s",
			   nmembers, nmembers == 1 ? "" : "s");
		print_table(shards);
		if (nmembers > 0)
		{
			putchar('\n');
			print_table(mem);
		}
	}
	table_free(shards);
	table_free(mem);
	free(ranges);
	etcd_entries_free(owners, nowners);
	etcd_entries_free(members, nmembers);
	etcd_value_free(&map);
	free(map_key);
	free(owners_prefix);
	free(members_prefix);
	etcdx_close(s);
	return EXIT_OK;
}

/*
 * cmd_cluster_info
 *		siloctl cluster info [--from-etcd].
 */
int
cmd_cluster_info(char **args, int nargs)
{
	PGconn	   *conn;
	Table	   *node;
	Table	   *shards;

	(void) args;
	(void) nargs;
	if (opt.from_etcd)
	{
		if (opt.given & OPT_DSN)
			usage_error("--dsn and --from-etcd exclude each other");
		return cluster_info_from_etcd();
	}
	conn = db_connect_or_exit();
	node = query_table(conn, SQL_NODE_INFO, "silo.node_info");
	shards = query_table(conn, SQL_SHARDS, "silo.cluster_info");
	if (opt.json)
	{
		JsonValue  *doc = jv_object();

		jv_set(doc, "node", node->nrows ? jv_row(node, 0) : jv_null());
		jv_set(doc, "shards", jv_rows(shards));
		jv_print(doc);
	}
	else
	{
		print_node_line(node, shards->nrows);
		putchar('\n');
		print_table(shards);
	}
	table_free(node);
	table_free(shards);
	PQfinish(conn);
	return EXIT_OK;
}

/*
 * cmd_node_info
 *		siloctl node info.
 */
int
cmd_node_info(char **args, int nargs)
{
	PGconn	   *conn = db_connect_or_exit();
	Table	   *node = query_table(conn, SQL_NODE_INFO, "silo.node_info");

	(void) args;
	(void) nargs;
	if (node->nrows == 0)
		fail(EXIT_FAILED, "silo.node_info returned no row");
	if (opt.json)
		jv_print(jv_row(node, 0));
	else
		print_record(node, 0);
	table_free(node);
	PQfinish(conn);
	return EXIT_OK;
}

/*
 * cmd_shard_list
 *		siloctl shard list.
 */
int
cmd_shard_list(char **args, int nargs)
{
	PGconn	   *conn = db_connect_or_exit();
	Table	   *shards = query_table(conn, SQL_SHARDS, "silo.cluster_info");

	(void) args;
	(void) nargs;
	if (opt.json)
		jv_print(jv_rows(shards));
	else
		print_table(shards);
	table_free(shards);
	PQfinish(conn);
	return EXIT_OK;
}

/*
 * hash_doc
 *		One tenant's --json object for "tenant hash".
 */
static JsonValue *
hash_doc(const char *tenant, int64_t hash, const char *server)
{
	JsonValue  *o = jv_object();

	jv_set(o, "tenant", jv_string(tenant));
	jv_set(o, "hash", jv_int(hash));
	if (server)
	{
		jv_set(o, "server_hash", jv_int(strtoll(server, NULL, 10)));
		jv_set(o, "agrees", jv_bool(strtoll(server, NULL, 10) == hash));
	}
	return o;
}

/*
 * cmd_tenant_hash
 *		siloctl tenant hash TENANT... [--check].  --json prints one object
 *		for one tenant, an array of them for several.
 */
int
cmd_tenant_hash(char **args, int nargs)
{
	PGconn	   *conn = NULL;
	JsonValue  *doc = NULL;
	int			differ = 0;
	const char *first_differ = NULL;

	for (int i = 0; i < nargs; i++)
		if (!utf8_valid(args[i], strlen(args[i])))
			usage_error("tenant %d is not valid UTF-8", i + 1);
	if (opt.check)
		conn = db_connect_or_exit();
	if (opt.json && nargs > 1)
		doc = jv_array();

	for (int i = 0; i < nargs; i++)
	{
		int64_t		hash = tenant_hash(args[i], strlen(args[i]));
		char	   *server = NULL;
		bool		agrees = true;

		if (conn)
		{
			const char *params[1] = {args[i]};
			PGresult   *res = db_exec(conn, SQL_TENANT_HASH, 1, params);

			db_expect_tuples(conn, res, "silo.tenant_hash");
			server = xstrdup(PQgetvalue(res, 0, 0));
			PQclear(res);
			agrees = strtoll(server, NULL, 10) == hash;
			if (!agrees && differ++ == 0)
				first_differ = args[i];
		}
		if (opt.json && nargs == 1)
			doc = hash_doc(args[i], hash, server);
		else if (opt.json)
			jv_append(doc, hash_doc(args[i], hash, server));
		else if (server)
			printf("%" PRId64 "\t%s\tserver %s\n", hash, args[i],
				   agrees ? "agrees" : "DIFFERS");
		else if (nargs == 1)
			printf("%" PRId64 "\n", hash);
		else
			printf("%" PRId64 "\t%s\n", hash, args[i]);
		free(server);
	}
	if (doc)
		jv_print(doc);
	if (conn)
		PQfinish(conn);
	if (differ > 0)
	{
		fprintf(stderr, "siloctl: the server's hash differs for %d tenant%s (the first: \"%s\")\n",
				differ, differ == 1 ? "" : "s", first_differ);
		return EXIT_FAILED;
	}
	return EXIT_OK;
}

/*
 * cmd_tenant_locate
 *		siloctl tenant locate TENANT: its shard and owner by the node's map.
 */
int
cmd_tenant_locate(char **args, int nargs)
{
	static const char *const cols[] = {
		"tenant", "hash", "shard_id", "range_start", "range_end", "owner_node_id",
		"owner_conninfo", "state", "is_local"
	};
	static const CellKind kinds[] = {
		CELL_TEXT, CELL_INT, CELL_INT, CELL_BIGNUM, CELL_BIGNUM, CELL_TEXT, CELL_TEXT,
		CELL_TEXT, CELL_BOOL
	};
	const char *tenant = args[0];
	int64_t		hash;
	char		hash_text[32];
	PGconn	   *conn;
	Table	   *shards;
	Table	   *out;
	int			row;

	(void) nargs;
	if (!utf8_valid(tenant, strlen(tenant)))
		usage_error("the tenant is not valid UTF-8");
	hash = tenant_hash(tenant, strlen(tenant));
	snprintf(hash_text, sizeof(hash_text), "%" PRId64, hash);
	conn = db_connect_or_exit();
	shards = query_table(conn, SQL_SHARDS, "silo.cluster_info");
	row = shard_row_of_hash(shards, hash);
	if (row < 0)
		fail(EXIT_FAILED, "no shard of the node's map holds tenant \"%s\" (hash %s): the node has no shard map yet",
			 tenant, hash_text);
	out = table_new(9, cols, kinds);
	{
		const char *cells[9] = {
			tenant, hash_text,
			table_get(shards, row, "shard_id"),
			table_get(shards, row, "range_start"),
			table_get(shards, row, "range_end"),
			table_get(shards, row, "owner_node_id"),
			table_get(shards, row, "owner_conninfo"),
			table_get(shards, row, "state"),
			table_get(shards, row, "is_local")
		};

		table_add_row(out, cells);
	}
	if (opt.json)
		jv_print(jv_row(out, 0));
	else
		print_record(out, 0);
	table_free(out);
	table_free(shards);
	PQfinish(conn);
	return EXIT_OK;
}

/*
 * confirm
 *		Ask on the terminal; true when the answer is "yes".  Without --yes
 *		stdin must be a terminal: otherwise exit 2.
 */
static bool
confirm(int shard, const char *node)
{
	char		line[64];

	if (!isatty(STDIN_FILENO))
	{
		fprintf(stderr, "siloctl: refusing to release shard %d without --yes: stdin is not a terminal to confirm on\n",
				shard);
		exit(EXIT_USAGE);
	}
	fprintf(stderr, "Type \"yes\" to release shard %d from node \"%s\": ", shard, node);
	fflush(stderr);
	if (fgets(line, sizeof(line), stdin) == NULL)
		return false;
	line[strcspn(line, "\r\n")] = '\0';
	return strcmp(line, "yes") == 0;
}

/*
 * cmd_shard_force_release
 *		siloctl shard force-release ID [--yes]: see its --help and
 *		docs/cluster.md.  The warning and the prompt go to stderr, so that
 *		stdout carries only the result (or the --json document).
 */
int
cmd_shard_force_release(char **args, int nargs)
{
	int			shard;
	EtcdSession *s;
	char	   *owner_key;
	char	   *member_key;
	EtcdValue	owner;
	EtcdValue	member;
	NodeValue	who;
	int64_t		rev;
	ReleaseOutcome outcome;

	(void) nargs;
	if (!parse_shard_id(args[0], &shard))
		usage_error("invalid shard id \"%s\" (expected a whole number)", args[0]);
	s = etcdx_open();
	owner_key = etcdx_key("coord/shards/%d/owner", shard);
	etcdx_get(s, owner_key, 0, &owner, NULL);
	if (!owner.found)
		fail(EXIT_FAILED, "shard %d has no owner (%s is absent): nothing to release",
			 shard, owner_key);
	if (!json_parse_node_value(owner.value, owner.len, false, &who))
		fail_full(EXIT_FAILED, NULL, owner.value,
				  "Inspect the key with etcdctl; siloctl cannot tell whose member key to check.",
				  "refusing to release shard %d: %s does not hold a readable owner", shard,
				  owner_key);
	member_key = etcdx_key("coord/members/%s", who.node_id);
	etcdx_get(s, member_key, 0, &member, NULL);
	if (member.found)
	{
		char	   *detail = xasprintf("%s exists (lease %" PRId64 "): node \"%s\" is a live member, or its lease has not expired yet (at most silo.lease_ttl_s after it stopped).",
									   member_key, member.lease, who.node_id);

		fail_full(EXIT_FAILED, NULL, detail,
				  "A live owner keeps its shards. Stop the node for good (or wait for its lease to expire) before releasing them.",
				  "refusing to release shard %d: its owner, node \"%s\", is alive", shard,
				  who.node_id);
	}

	fprintf(stderr,
			"shard %d is owned by node \"%s\" (%s), since %s\n"
			"  owner key %s (mod revision %" PRId64 "); member key %s is absent\n\n"
			"WARNING: releasing the shard lets another node acquire it EMPTY.  Every job of\n"
			"the shard's tenants that node \"%s\" held is lost to the cluster unless its\n"
			"database is restored (its standby, its backups) before the shard is used\n"
			"again: see docs/cluster.md, \"siloctl\".  If node \"%s\" can come back,\n"
			"restart it instead: it reclaims its shards.\n",
			shard, who.node_id, who.conninfo ? who.conninfo : "no conninfo",
			who.since ? who.since : "?", owner_key, owner.mod_revision, member_key,
			who.node_id, who.node_id);
	if (!opt.yes && !confirm(shard, who.node_id))
		fail(EXIT_FAILED, "shard %d not released: not confirmed", shard);

	outcome = etcdx_force_release(s, owner_key, owner.mod_revision, member_key, &rev);
	if (outcome == RELEASE_OWNER_ALIVE)
		fail(EXIT_FAILED, "refusing to release shard %d: node \"%s\" registered as a member meanwhile",
			 shard, who.node_id);
	if (outcome == RELEASE_OWNER_CHANGED)
		fail(EXIT_FAILED, "shard %d not released: its owner key changed meanwhile; look again",
			 shard);

	if (opt.json)
	{
		JsonValue  *doc = jv_object();
		JsonValue  *o = jv_object();

		jv_set(o, "node_id", jv_string(who.node_id));
		jv_set(o, "conninfo", jv_string(who.conninfo));
		jv_set(o, "acquired_at", jv_string(who.since));
		jv_set(doc, "shard", jv_int(shard));
		jv_set(doc, "released", jv_bool(true));
		jv_set(doc, "owner", o);
		jv_set(doc, "owner_mod_revision", jv_int(owner.mod_revision));
		jv_set(doc, "revision", jv_int(rev));
		jv_print(doc);
	}
	else
		printf("released shard %d: deleted %s (its owner was node \"%s\"), revision %" PRId64 "\n",
			   shard, owner_key, who.node_id, rev);
	node_value_free(&who);
	etcd_value_free(&owner);
	etcd_value_free(&member);
	free(owner_key);
	free(member_key);
	etcdx_close(s);
	return EXIT_OK;
}
