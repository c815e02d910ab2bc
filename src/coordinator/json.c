/*-------------------------------------------------------------------------
 *
 * json.c
 *	  The values of the coordinator's keys in etcd (docs/cluster.md):
 *	  member and owner keys hold flat JSON objects of strings, the shard map
 *	  an object with an array of shards whose bounds are decimal strings.
 *
 * Written with StringInfo and escape_json, read with PostgreSQL's own
 * JSON parser (common/jsonapi.h, pg_parse_json with semantic actions),
 * which returns errors instead of raising them: a value that does not
 * parse is reported by the caller, never fatal.  jansson stays inside
 * src/etcd/ (its names clash with PostgreSQL's).
 *
 *-------------------------------------------------------------------------
 */
#include "silo_coordinator.h"

#include <time.h>

#include "common/jsonapi.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/json.h"

/* ----------------------------------------------------------------------
 * Building
 * ---------------------------------------------------------------------- */

/*
 * json_flat: a flat JSON object of string fields, palloc'd.
 */
static char *
json_flat(int n, const char *const names[], const char *const values[])
{
	StringInfoData buf;
	int			i;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	for (i = 0; i < n; i++)
	{
		if (i > 0)
			appendStringInfoString(&buf, ", ");
		escape_json(&buf, names[i]);
		appendStringInfoString(&buf, ": ");
		escape_json(&buf, values[i]);
	}
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

/*
 * coord_now_iso: the wall clock as ISO 8601 UTC with milliseconds, for
 * started_at and acquired_at (informational: nothing decides on them).
 */
void
coord_now_iso(char *buf, size_t size)
{
	struct timespec ts;
	struct tm	tm;
	char		secs[32];

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(secs, sizeof(secs), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf, size, "%s.%03dZ", secs, (int) (ts.tv_nsec / 1000000));
}

/*
 * coord_member_value: the value of this node's member key.
 */
char *
coord_member_value(const CoordState *cs)
{
	const char *const names[] = {
		"node_id", "conninfo", "started_at", "incarnation", "replication_conninfo", "draining"
	};
	const char *const values[] = {
		silo_node_id, cs->conninfo, cs->started_at, cs->incarnation, cs->repl_conninfo,
		cs->draining ? "true" : "false"
	};

	return json_flat(6, names, values);
}

/*
 * coord_owner_value: the value of an owner key naming this node.
 */
char *
coord_owner_value(const CoordState *cs, const char *acquired_at)
{
	const char *const names[] = {"node_id", "conninfo", "acquired_at"};
	const char *const values[] = {silo_node_id, cs->conninfo, acquired_at};

	return json_flat(3, names, values);
}

/*
 * coord_map_value: the shard map of n shards, bounds from
 * silo_shard_bounds as decimal strings (the last end is 2^63, past int8).
 */
char *
coord_map_value(int n)
{
	StringInfoData buf;
	int			i;

	initStringInfo(&buf);
	appendStringInfo(&buf, "{\"version\": 1, \"count\": %d, \"shards\": [", n);
	for (i = 0; i < n; i++)
	{
		int128		start;
		int128		end;
		char		s[48];
		char		e[48];
		char	   *p;
		uint128		u;
		bool		neg;
		int			k;

		silo_shard_bounds(i, n, &start, &end);
		for (k = 0; k < 2; k++)
		{
			int128		v = k == 0 ? start : end;
			char	   *out = k == 0 ? s : e;

			neg = v < 0;
			u = neg ? (uint128) (-(v + 1)) + 1 : (uint128) v;
			p = out + sizeof(s) - 1;
			*p = '\0';
			do
			{
				*--p = '0' + (char) (u % 10);
				u /= 10;
			} while (u > 0);
			if (neg)
				*--p = '-';
			memmove(out, p, strlen(p) + 1);
		}
		appendStringInfo(&buf, "%s{\"id\": %d, \"start\": \"%s\", \"end\": \"%s\"}",
						 i > 0 ? ", " : "", i, s, e);
	}
	appendStringInfoString(&buf, "]}");
	return buf.data;
}

/* ----------------------------------------------------------------------
 * Parsing
 * ---------------------------------------------------------------------- */

/* what the flat parser collects */
typedef struct FlatParse
{
	JsonLexContext *lex;
	int			n;
	const char *const *names;
	char	  **values;			/* palloc'd, NULL when absent */
	int			field;			/* index of the current top-level field */
	bool		is_object;
} FlatParse;

/* flat_object_start: the top-level value must be an object */
static void
flat_object_start(void *state)
{
	FlatParse  *p = (FlatParse *) state;

	if (p->lex->lex_level == 0)
		p->is_object = true;
}

/* flat_field_start: remember which known field a top-level value is for */
static void
flat_field_start(void *state, char *fname, bool isnull)
{
	FlatParse  *p = (FlatParse *) state;
	int			i;

	if (p->lex->lex_level != 1)
		return;
	p->field = -1;
	for (i = 0; i < p->n; i++)
		if (strcmp(fname, p->names[i]) == 0)
			p->field = i;
}

/* flat_scalar: keep a known field's string value */
static void
flat_scalar(void *state, char *token, JsonTokenType type)
{
	FlatParse  *p = (FlatParse *) state;

	if (p->lex->lex_level == 1 && p->field >= 0 && type == JSON_TOKEN_STRING)
		p->values[p->field] = pstrdup(token);
}

/*
 * json_parse_flat: read the string fields names[] of a JSON object into
 * values[] (palloc'd; NULL when absent or not a string).  false when the
 * text is not a JSON object.
 */
static bool
json_parse_flat(const char *json, size_t len, int n, const char *const names[], char *values[])
{
	FlatParse	p;
	JsonSemAction sem;
	char	   *copy = pnstrdup(json, len);

	memset(&p, 0, sizeof(p));
	memset(&sem, 0, sizeof(sem));
	memset(values, 0, sizeof(char *) * n);
	p.lex = makeJsonLexContextCstringLen(copy, strlen(copy), GetDatabaseEncoding(), true);
	p.n = n;
	p.names = names;
	p.values = values;
	p.field = -1;
	sem.semstate = &p;
	sem.object_start = flat_object_start;
	sem.object_field_start = flat_field_start;
	sem.scalar = flat_scalar;
	return pg_parse_json(p.lex, &sem) == JSON_SUCCESS && p.is_object;
}

/*
 * coord_parse_member: a member key's value; node_id is required.
 */
bool
coord_parse_member(const char *json, size_t len, CoordMember *out)
{
	const char *const names[] = {"node_id", "conninfo", "replication_conninfo", "draining"};
	char	   *values[4];

	if (!json_parse_flat(json, len, 4, names, values) || values[0] == NULL)
		return false;
	strlcpy(out->node_id, values[0], sizeof(out->node_id));
	strlcpy(out->conninfo, values[1] ? values[1] : "", sizeof(out->conninfo));
	/* a member of an older version: replicate over its advertised conninfo */
	strlcpy(out->repl_conninfo, values[2] && values[2][0] ? values[2] : out->conninfo,
			sizeof(out->repl_conninfo));
	out->draining = values[3] != NULL && strcmp(values[3], "true") == 0;
	return true;
}

/*
 * coord_parse_owner: an owner key's value; node_id is required.
 */
bool
coord_parse_owner(const char *json, size_t len, CoordOwner *out)
{
	const char *const names[] = {"node_id", "conninfo", "acquired_at"};
	char	   *values[3];

	if (!json_parse_flat(json, len, 3, names, values) || values[0] == NULL ||
		values[0][0] == '\0')
		return false;
	strlcpy(out->node_id, values[0], sizeof(out->node_id));
	strlcpy(out->conninfo, values[1] ? values[1] : "", sizeof(out->conninfo));
	strlcpy(out->acquired_at, values[2] ? values[2] : "", sizeof(out->acquired_at));
	return true;
}

/*
 * coord_move_value: the value of shard's move record: a flat object of
 * strings (docs/cluster.md, "Moving a shard").
 */
char *
coord_move_value(const CoordMove *m, int shard)
{
	const char *const names[] = {
		"shard", "phase", "source", "target", "source_conninfo", "lsn", "setsums", "reason",
		"created_at", "paused_at"
	};
	const char *const values[] = {
		psprintf("%d", shard), coord_move_phase_name(m->phase), m->source, m->target,
		m->source_conninfo, m->lsn, m->setsums ? m->setsums : "", m->reason, m->created_at,
		m->paused_at
	};

	return json_flat(10, names, values);
}

/*
 * coord_parse_move: a move record's value into out (setsums palloc'd in
 * the current context); false when it is not one (no readable phase, no
 * source or target).
 */
bool
coord_parse_move(const char *json, size_t len, CoordMove *out)
{
	const char *const names[] = {
		"phase", "source", "target", "source_conninfo", "lsn", "setsums", "reason", "created_at",
		"paused_at"
	};
	char	   *values[9];

	if (!json_parse_flat(json, len, 9, names, values) || values[0] == NULL ||
		values[1] == NULL || values[2] == NULL)
		return false;
	out->phase = coord_move_phase_of(values[0]);
	strlcpy(out->source, values[1], sizeof(out->source));
	strlcpy(out->target, values[2], sizeof(out->target));
	strlcpy(out->source_conninfo, values[3] ? values[3] : "", sizeof(out->source_conninfo));
	strlcpy(out->lsn, values[4] ? values[4] : "", sizeof(out->lsn));
	out->setsums = values[5] && values[5][0] ? values[5] : NULL;
	strlcpy(out->reason, values[6] ? values[6] : "", sizeof(out->reason));
	strlcpy(out->created_at, values[7] ? values[7] : "", sizeof(out->created_at));
	strlcpy(out->paused_at, values[8] ? values[8] : "", sizeof(out->paused_at));
	return out->phase != MOVE_NONE && out->source[0] && out->target[0];
}

/* what the shard map parser collects */
typedef struct MapParse
{
	JsonLexContext *lex;
	char		top_field[16];	/* current top-level field */
	char		elem_field[16]; /* current field of a shard object */
	bool		in_shards;
	int			version;
	int			count;
	int			n;				/* shards seen */
	int			ids[SILO_MAX_SHARDS];
	char	   *starts[SILO_MAX_SHARDS];
	char	   *ends[SILO_MAX_SHARDS];
	bool		bad;
} MapParse;

/* map_field_start: track the field at the top level and in a shard */
static void
map_field_start(void *state, char *fname, bool isnull)
{
	MapParse   *p = (MapParse *) state;

	if (p->lex->lex_level == 1)
		strlcpy(p->top_field, fname, sizeof(p->top_field));
	else if (p->lex->lex_level == 3 && p->in_shards)
		strlcpy(p->elem_field, fname, sizeof(p->elem_field));
}

/* map_array_start: the "shards" array */
static void
map_array_start(void *state)
{
	MapParse   *p = (MapParse *) state;

	if (p->lex->lex_level == 1 && strcmp(p->top_field, "shards") == 0)
		p->in_shards = true;
}

/* map_array_end: leaving the "shards" array */
static void
map_array_end(void *state)
{
	MapParse   *p = (MapParse *) state;

	if (p->lex->lex_level == 1)
		p->in_shards = false;
}

/* map_element_start: a new shard */
static void
map_element_start(void *state, bool isnull)
{
	MapParse   *p = (MapParse *) state;

	if (p->lex->lex_level != 2 || !p->in_shards)
		return;
	if (p->n >= SILO_MAX_SHARDS)
	{
		p->bad = true;
		return;
	}
	p->ids[p->n] = -1;
	p->starts[p->n] = NULL;
	p->ends[p->n] = NULL;
	p->n++;
	p->elem_field[0] = '\0';
}

/* map_scalar: version, count, and each shard's id, start and end */
static void
map_scalar(void *state, char *token, JsonTokenType type)
{
	MapParse   *p = (MapParse *) state;

	if (p->lex->lex_level == 1)
	{
		if (strcmp(p->top_field, "version") == 0)
			p->version = atoi(token);
		else if (strcmp(p->top_field, "count") == 0)
			p->count = atoi(token);
	}
	else if (p->lex->lex_level == 3 && p->in_shards && p->n > 0)
	{
		int			i = p->n - 1;

		if (strcmp(p->elem_field, "id") == 0)
			p->ids[i] = atoi(token);
		else if (strcmp(p->elem_field, "start") == 0)
			p->starts[i] = pstrdup(token);
		else if (strcmp(p->elem_field, "end") == 0)
			p->ends[i] = pstrdup(token);
	}
}

/*
 * parse_int128: a decimal string as int128 (at most 39 digits); false
 * when it is not one.
 */
static bool
parse_int128(const char *s, int128 *out)
{
	bool		neg = false;
	uint128		u = 0;
	int			digits = 0;

	if (s == NULL)
		return false;
	if (*s == '-')
	{
		neg = true;
		s++;
	}
	for (; *s; s++)
	{
		if (*s < '0' || *s > '9' || ++digits > 38)
			return false;
		u = u * 10 + (uint128) (*s - '0');
	}
	if (digits == 0)
		return false;
	*out = neg ? -(int128) u : (int128) u;
	return true;
}

/*
 * coord_parse_map: a shard map's value into shards[] (id, range_start,
 * range_end, end_is_max; the rest zeroed) and *n.  The map must be
 * version 1, its shards numbered 0..count-1 in order, each starting where
 * the previous ended, from -2^63 to 2^63.  On false, *why says what is
 * wrong.
 */
bool
coord_parse_map(const char *json, size_t len, SiloShard *shards, int *n, char **why)
{
	MapParse   *p = palloc0(sizeof(MapParse));
	JsonSemAction sem;
	char	   *copy = pnstrdup(json, len);
	int128		min = -((int128) 1 << 63);
	int128		max = (int128) 1 << 63;
	int128		prev_end = min;
	int			i;

	memset(&sem, 0, sizeof(sem));
	p->lex = makeJsonLexContextCstringLen(copy, strlen(copy), GetDatabaseEncoding(), true);
	sem.semstate = p;
	sem.object_field_start = map_field_start;
	sem.array_start = map_array_start;
	sem.array_end = map_array_end;
	sem.array_element_start = map_element_start;
	sem.scalar = map_scalar;
	*why = NULL;
	if (pg_parse_json(p->lex, &sem) != JSON_SUCCESS || p->bad)
		*why = "not valid JSON, or more shards than this build supports";
	else if (p->version != 1)
		*why = psprintf("version %d (this node reads version 1)", p->version);
	else if (p->n < 1 || p->count != p->n)
		*why = psprintf("count %d with %d shards", p->count, p->n);
	if (*why)
		return false;
	for (i = 0; i < p->n; i++)
	{
		int128		start;
		int128		end;

		if (p->ids[i] != i || !parse_int128(p->starts[i], &start) ||
			!parse_int128(p->ends[i], &end) || start != prev_end || end <= start || end > max ||
			(i == p->n - 1) != (end == max))
		{
			*why = psprintf("shard %d (position %d) is not the range after the one before it",
							p->ids[i], i);
			return false;
		}
		memset(&shards[i], 0, sizeof(SiloShard));
		shards[i].id = i;
		shards[i].range_start = (int64) start;
		shards[i].end_is_max = end == max;
		shards[i].range_end = shards[i].end_is_max ? PG_INT64_MAX : (int64) end;
		prev_end = end;
	}
	*n = p->n;
	return true;
}
