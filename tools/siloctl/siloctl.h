/*-------------------------------------------------------------------------
 *
 * siloctl.h
 *	  Private declarations shared by the files of siloctl, the operator's
 *	  command-line tool for silo's cluster mode (docs/cluster.md,
 *	  "siloctl").
 *
 * Files:
 *	  main.c	options, help texts, the command table and dispatch, exits
 *	  cluster.c	cluster info, node info, shard list, tenant hash / locate,
 *				shard force-release (its prompt and output)
 *	  jobs.c	job get / result / cancel / restart / expedite / delete,
 *				query
 *	  route.c	routing a tenant's call to the node that owns its shard:
 *				NOT_OWNER (SL020) hints, SL021 back-off, the hop budget
 *	  db.c		libpq: connecting (and merging a hint's conninfo with the
 *				--dsn's credentials), running statements, error reports
 *	  hash.c	the tenant hash (PostgreSQL's hash_bytes_extended), 128-bit
 *				shard bounds, UTF-8 checks
 *	  output.c	result tables and their text form
 *	  json.c	JSON in and out: --json documents, the SL020 DETAIL, the
 *				values of etcd's keys.  The only file that includes
 *				jansson.h
 *	  etcd_ops.c	etcd access: the client, the keys of cluster mode, the
 *				force-release txn
 *
 * siloctl is a plain C program: libpq, libc, the etcd client of src/etcd/
 * (libcurl, jansson) and jansson.  No PostgreSQL server header.
 *
 * Exit codes (docs/cluster.md lists them with each command):
 *	  0 ok; 1 the operation failed; 2 usage; 3 cannot connect (no node or
 *	  etcd reachable); 4 NOT_OWNER could not be resolved (a loop, too many
 *	  hops, no owner); 5 the shard stayed unavailable (SL021) through every
 *	  retry.
 *
 * tools/siloctl/siloctl.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SILOCTL_H
#define SILOCTL_H

#define _GNU_SOURCE

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#define EXIT_OK				0
#define EXIT_FAILED			1
#define EXIT_USAGE			2
#define EXIT_CONNECT		3
#define EXIT_NOT_OWNER		4
#define EXIT_UNAVAILABLE	5

#define SQLSTATE_NOT_OWNER			"SL020"
#define SQLSTATE_UNAVAILABLE		"SL021"

#define DEFAULT_MAX_HOPS	3
#define DEFAULT_RETRIES		5
#define BACKOFF_FIRST_MS	100
#define BACKOFF_MAX_MS		2000
#define DEFAULT_CONNECT_TIMEOUT "10"

/* Option bits: which options a command accepts. */
#define OPT_DSN			0x0001
#define OPT_ETCD		0x0002	/* --etcd, --prefix and the etcd credentials */
#define OPT_TENANT		0x0004
#define OPT_YES			0x0008
#define OPT_CHECK		0x0010
#define OPT_FROM_ETCD	0x0020
#define OPT_ROUTING		0x0040	/* --max-hops, --retries */
#define OPT_COMMON		0x8000	/* --json, --verbose, --help: everywhere */

/* The command line. */
typedef struct Options
{
	const char *dsn;			/* "" = the PG* environment */
	const char *etcd;			/* comma-separated URLs, or NULL */
	const char *prefix;			/* key prefix in etcd */
	const char *etcd_user;		/* password: $SILOCTL_ETCD_PASSWORD */
	const char *etcd_cacert;
	const char *etcd_cert;
	const char *etcd_key;
	const char *tenant;			/* job commands: --tenant, default "-" */
	int			max_hops;
	int			retries;
	bool		json;
	bool		yes;
	bool		check;
	bool		from_etcd;
	bool		verbose;
	bool		help;
	unsigned	given;			/* OPT_* bits of the options given */
} Options;

extern Options opt;

/* ----------------------------------------------------------------------
 * main.c: failing
 * ---------------------------------------------------------------------- */

/*
 * Print a message to stderr ("siloctl: ..."), with --json also an error
 * document on stdout, and exit with code.  sqlstate, detail and hint may be
 * NULL.
 */
extern void fail_full(int code, const char *sqlstate, const char *detail,
					  const char *hint, const char *fmt,...)
			__attribute__((format(printf, 5, 6), noreturn));
#define fail(code, ...) fail_full((code), NULL, NULL, NULL, __VA_ARGS__)
/* a usage error: message, "Try ... --help", exit 2 */
extern void usage_error(const char *fmt,...)
			__attribute__((format(printf, 1, 2), noreturn));
/* a note on stderr when --verbose */
extern void verbose(const char *fmt,...) __attribute__((format(printf, 1, 2)));
extern void *xmalloc(size_t n);
extern void *xrealloc(void *p, size_t n);
extern char *xstrdup(const char *s);
extern char *xasprintf(const char *fmt,...) __attribute__((format(printf, 1, 2)));
extern void sleep_ms(int ms);

/* ----------------------------------------------------------------------
 * hash.c
 * ---------------------------------------------------------------------- */

typedef __int128 int128_t;

extern uint64_t hash_bytes_extended(const unsigned char *k, size_t keylen, uint64_t seed);
extern int64_t tenant_hash(const char *tenant, size_t len);
extern bool parse_int128(const char *s, int128_t *out);
extern void format_int128(int128_t v, char *buf, size_t size);
extern bool utf8_valid(const char *s, size_t len);
extern bool parse_shard_id(const char *s, int *out);

/* ----------------------------------------------------------------------
 * output.c: a result table (strings; NULL cells are SQL NULLs)
 * ---------------------------------------------------------------------- */

typedef enum CellKind
{
	CELL_TEXT,
	CELL_INT,					/* an integer that fits int64 */
	CELL_BIGNUM,				/* numeric: kept as a JSON string */
	CELL_FLOAT,
	CELL_BOOL,					/* "t" / "f" */
	CELL_JSON,					/* json, jsonb: embedded as JSON */
	CELL_INT_ARRAY,				/* a 1-D PostgreSQL array of integers */
	CELL_TEXT_ARRAY				/* a 1-D PostgreSQL array of texts */
} CellKind;

typedef struct Table
{
	int			ncols;
	char	  **names;
	CellKind   *kinds;
	int			nrows;
	int			cap;
	char	  **cells;			/* nrows * ncols, row-major; NULL = null */
} Table;

extern Table *table_new(int ncols, const char *const *names, const CellKind *kinds);
extern Table *table_from_result(const PGresult *res);
extern void table_add_row(Table *t, const char *const *cells);
extern const char *table_get(const Table *t, int row, const char *name);
extern int	table_col(const Table *t, const char *name);
extern void table_free(Table *t);
extern void print_table(const Table *t);
extern void print_record(const Table *t, int row);
extern const char *display_bool(const char *v);

/* ----------------------------------------------------------------------
 * json.c: JSON documents (an opaque handle over jansson's json_t)
 * ---------------------------------------------------------------------- */

typedef struct JsonValue JsonValue;

extern JsonValue *jv_object(void);
extern JsonValue *jv_array(void);
extern JsonValue *jv_string(const char *s);	/* NULL gives null */
extern JsonValue *jv_int(int64_t v);
extern JsonValue *jv_bool(bool v);
extern JsonValue *jv_null(void);
extern JsonValue *jv_cell(const Table *t, int row, int col);
extern JsonValue *jv_row(const Table *t, int row);
extern JsonValue *jv_rows(const Table *t);
extern void jv_set(JsonValue *obj, const char *key, JsonValue *v);	/* steals v */
extern void jv_append(JsonValue *arr, JsonValue *v);	/* steals v */
extern void jv_print(JsonValue *v);		/* to stdout, then frees v */
extern void jv_free(JsonValue *v);

/* the DETAIL of a NOT_OWNER (SL020) error */
typedef struct OwnerHint
{
	int			shard;			/* -1 when absent */
	char	   *node_id;		/* NULL: null (no owner right now) */
	char	   *conninfo;		/* NULL: null */
} OwnerHint;

extern bool json_parse_owner_hint(const char *detail, OwnerHint *out);
extern void owner_hint_free(OwnerHint *h);

/* the value of P/coord/shards/<id>/owner and of P/coord/members/<id> */
typedef struct NodeValue
{
	char	   *node_id;
	char	   *conninfo;
	char	   *since;			/* acquired_at / started_at, as written */
} NodeValue;

extern bool json_parse_node_value(const char *value, size_t len, bool member,
								  NodeValue *out);
extern void node_value_free(NodeValue *v);

/* P/coord/shardmap */
typedef struct ShardRange
{
	int			id;
	char		start[48];		/* decimal strings, as in etcd */
	char		end[48];
} ShardRange;

extern bool json_parse_shardmap(const char *value, size_t len, ShardRange **out, int *n);

/* ----------------------------------------------------------------------
 * db.c
 * ---------------------------------------------------------------------- */

extern void db_check_dsn(void);
extern PGconn *db_connect(const char *hint_conninfo, char **errmsg);
extern PGconn *db_connect_or_exit(void);
extern PGresult *db_exec(PGconn *conn, const char *sql, int nparams,
						 const char *const *params);
extern bool db_ok(const PGresult *res);
extern const char *db_sqlstate(const PGresult *res);
extern bool db_conn_lost(PGconn *conn);
extern void db_fail_result(PGconn *conn, PGresult *res, const char *what)
			__attribute__((noreturn));
extern void db_expect_tuples(PGconn *conn, PGresult *res, const char *what);

/* ----------------------------------------------------------------------
 * route.c
 * ---------------------------------------------------------------------- */

/* How one attempt of a routed operation went. */
typedef enum AttemptStatus
{
	ATTEMPT_DONE,				/* it ran; the function kept its results */
	ATTEMPT_ERROR,				/* an SQL error (res holds it) */
	ATTEMPT_REMOTE,				/* the node's map gives the shard to another
								 * node (hint holds it) */
	ATTEMPT_UNOWNED,			/* the node's map has no owner for it */
	ATTEMPT_NO_MAP				/* the node has no shard map yet */
} AttemptStatus;

typedef struct Attempt
{
	AttemptStatus status;
	PGresult   *res;			/* ATTEMPT_ERROR */
	OwnerHint	hint;			/* ATTEMPT_REMOTE, ATTEMPT_UNOWNED */
} Attempt;

typedef struct Route
{
	const char *tenant;
	PGconn	   *conn;
	char	   *where;			/* "the node of --dsn", "node b (...)" */
	int			hops;			/* hints followed */
	char	  **visited;		/* conninfos followed */
	JsonValue  *trail;			/* the hints followed, for --json */
} Route;

typedef void (*RouteFn) (Route *r, void *arg, Attempt *a);

extern void route_begin(Route *r, const char *tenant);
extern void route_run(Route *r, RouteFn fn, void *arg);
extern bool route_locate(PGconn *conn, const char *tenant, Attempt *a, int *shard);
extern void route_end(Route *r);

/* the shard a hash falls in, among cluster_info-shaped rows (or -1) */
extern int	shard_row_of_hash(const Table *t, int64_t hash);

/* ----------------------------------------------------------------------
 * etcd_ops.c
 * ---------------------------------------------------------------------- */

typedef struct EtcdSession EtcdSession;

typedef struct EtcdValue
{
	bool		found;
	char	   *value;
	size_t		len;
	int64_t		mod_revision;
	int64_t		create_revision;
	int64_t		lease;
} EtcdValue;

typedef struct EtcdEntry
{
	char	   *key;			/* the key with the listed prefix removed */
	char	   *value;
	size_t		len;
} EtcdEntry;

typedef enum ReleaseOutcome
{
	RELEASE_DONE,
	RELEASE_OWNER_ALIVE,		/* the member key exists now */
	RELEASE_OWNER_CHANGED,		/* the owner key changed or vanished */
} ReleaseOutcome;

extern EtcdSession *etcdx_open(void);
extern void etcdx_close(EtcdSession *s);
extern char *etcdx_key(const char *fmt,...) __attribute__((format(printf, 1, 2)));
extern void etcdx_get(EtcdSession *s, const char *key, int64_t revision, EtcdValue *out,
					  int64_t *header_revision);
extern int	etcdx_list(EtcdSession *s, const char *prefix, int64_t revision,
					   EtcdEntry **out);
extern ReleaseOutcome etcdx_force_release(EtcdSession *s, const char *owner_key,
										  int64_t owner_mod, const char *member_key,
										  int64_t *revision);
extern void etcd_value_free(EtcdValue *v);
extern void etcd_entries_free(EtcdEntry *e, int n);

/* ----------------------------------------------------------------------
 * Commands (cluster.c, jobs.c)
 * ---------------------------------------------------------------------- */

extern int	cmd_cluster_info(char **args, int nargs);
extern int	cmd_node_info(char **args, int nargs);
extern int	cmd_shard_list(char **args, int nargs);
extern int	cmd_shard_force_release(char **args, int nargs);
extern int	cmd_tenant_hash(char **args, int nargs);
extern int	cmd_tenant_locate(char **args, int nargs);
extern int	cmd_job(const char *action, char **args, int nargs);
extern int	cmd_query(char **args, int nargs);

#endif							/* SILOCTL_H */
