/*-------------------------------------------------------------------------
 *
 * json.c
 *	  JSON in and out, over jansson: the documents --json prints, the DETAIL
 *	  of a NOT_OWNER error, and the values of cluster mode's etcd keys.
 *
 * This is the only file of siloctl that includes jansson.h; the others see
 * a JsonValue, an opaque handle that is a json_t underneath.  Builders
 * that take a value take over its reference (jv_set, jv_append), so a
 * document is freed once, by jv_print or jv_free.
 *
 * How table cells become JSON (the kinds are output.c's): integers that fit
 * 64 bits and booleans as such; floats as numbers unless not finite;
 * numeric as strings (shard bounds reach 2^63, and a JSON reader may hold
 * numbers as doubles); json and jsonb embedded; one-dimensional integer
 * and text arrays as arrays; everything else, and anything that does not
 * parse, as strings.
 *
 * tools/siloctl/json.c
 *
 *-------------------------------------------------------------------------
 */
#include "siloctl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#define J(v) ((json_t *) (v))
#define V(j) ((JsonValue *) (j))

/*
 * checked
 *		A new jansson value, or exit on out of memory.
 */
static json_t *
checked(json_t *j)
{
	if (j == NULL)
	{
		fputs("siloctl: out of memory\n", stderr);
		exit(EXIT_FAILED);
	}
	return j;
}

/*
 * jv_object, jv_array
 *		A new empty object / array.
 */
JsonValue *
jv_object(void)
{
	return V(checked(json_object()));
}

JsonValue *
jv_array(void)
{
	return V(checked(json_array()));
}

/*
 * jv_string
 *		A JSON string (null for NULL).  Bytes that are not UTF-8 become '?'
 *		rather than making the document invalid.
 */
JsonValue *
jv_string(const char *s)
{
	json_t	   *j;
	char	   *copy;

	if (s == NULL)
		return V(checked(json_null()));
	j = json_string(s);
	if (j != NULL)
		return V(j);
	copy = xstrdup(s);
	for (unsigned char *p = (unsigned char *) copy; *p; p++)
		if (*p >= 0x80)
			*p = '?';
	j = checked(json_string(copy));
	free(copy);
	return V(j);
}

/*
 * jv_int, jv_bool, jv_null
 *		A JSON integer, boolean, null.
 */
JsonValue *
jv_int(int64_t v)
{
	return V(checked(json_integer((json_int_t) v)));
}

JsonValue *
jv_bool(bool v)
{
	return V(checked(json_boolean(v)));
}

JsonValue *
jv_null(void)
{
	return V(checked(json_null()));
}

/*
 * jv_set, jv_append
 *		Add a value to an object / array, taking over its reference.
 */
void
jv_set(JsonValue *obj, const char *key, JsonValue *v)
{
	if (json_object_set_new(J(obj), key, J(v)) != 0)
	{
		fputs("siloctl: out of memory\n", stderr);
		exit(EXIT_FAILED);
	}
}

void
jv_append(JsonValue *arr, JsonValue *v)
{
	if (json_array_append_new(J(arr), J(v)) != 0)
	{
		fputs("siloctl: out of memory\n", stderr);
		exit(EXIT_FAILED);
	}
}

/*
 * jv_print
 *		Print a document on stdout (indented, one trailing newline) and
 *		free it.
 */
void
jv_print(JsonValue *v)
{
	json_dumpf(J(v), stdout, JSON_INDENT(2));
	putchar('\n');
	fflush(stdout);
	json_decref(J(v));
}

/*
 * jv_free
 *		Free a document that is not printed.
 */
void
jv_free(JsonValue *v)
{
	json_decref(J(v));
}

/*
 * int_value
 *		An integer's text as a JSON integer, or NULL when it is not one that
 *		fits 64 bits.
 */
static json_t *
int_value(const char *s)
{
	char	   *end;
	long long	v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0')
		return NULL;
	return checked(json_integer((json_int_t) v));
}

/*
 * array_value
 *		A one-dimensional PostgreSQL array literal ("{1,2}", "{a,\"b c\",NULL}")
 *		as a JSON array of integers (ints) or strings; NULL when the literal
 *		is not one this reads (more dimensions, bounds, a bad element).
 */
static json_t *
array_value(const char *s, bool ints)
{
	json_t	   *arr;
	size_t		len = strlen(s);
	char	   *buf = xmalloc(len + 1);
	const char *p = s;

	if (*p != '{')
	{
		free(buf);
		return NULL;
	}
	arr = checked(json_array());
	p++;
	if (*p == '}' && p[1] == '\0')
	{
		free(buf);
		return arr;
	}
	for (;;)
	{
		size_t		n = 0;
		bool		quoted = false;
		json_t	   *elem;

		if (*p == '{')
			goto bad;
		if (*p == '"')
		{
			quoted = true;
			for (p++; *p && *p != '"'; p++)
			{
				if (*p == '\\' && p[1])
					p++;
				buf[n++] = *p;
			}
			if (*p != '"')
				goto bad;
			p++;
		}
		else
		{
			for (; *p && *p != ',' && *p != '}'; p++)
				buf[n++] = *p;
		}
		buf[n] = '\0';
		if (!quoted && strcasecmp(buf, "NULL") == 0)
			elem = checked(json_null());
		else if (ints)
		{
			elem = int_value(buf);
			if (elem == NULL)
				goto bad;
		}
		else
			elem = J(jv_string(buf));
		json_array_append_new(arr, elem);
		if (*p == ',')
		{
			p++;
			continue;
		}
		if (*p == '}' && p[1] == '\0')
			break;
		goto bad;
	}
	free(buf);
	return arr;

bad:
	free(buf);
	json_decref(arr);
	return NULL;
}

/*
 * jv_cell
 *		A table cell as JSON, by its column's kind (see the file header).
 */
JsonValue *
jv_cell(const Table *t, int row, int col)
{
	const char *v = t->cells[(size_t) row * t->ncols + col];
	json_t	   *j = NULL;

	if (v == NULL)
		return jv_null();
	switch (t->kinds[col])
	{
		case CELL_INT:
			j = int_value(v);
			break;
		case CELL_FLOAT:
			{
				char	   *end;
				double		d = strtod(v, &end);

				if (end != v && *end == '\0' && isfinite(d))
					j = checked(json_real(d));
				break;
			}
		case CELL_BOOL:
			if (strcmp(v, "t") == 0 || strcmp(v, "f") == 0)
				j = checked(json_boolean(v[0] == 't'));
			break;
		case CELL_JSON:
			j = json_loads(v, JSON_DECODE_ANY, NULL);
			break;
		case CELL_INT_ARRAY:
			j = array_value(v, true);
			break;
		case CELL_TEXT_ARRAY:
			j = array_value(v, false);
			break;
		case CELL_BIGNUM:
		case CELL_TEXT:
			break;
	}
	return j ? V(j) : jv_string(v);
}

/*
 * jv_row
 *		One row as an object, column names as keys (a later column of the
 *		same name wins).
 */
JsonValue *
jv_row(const Table *t, int row)
{
	JsonValue  *obj = jv_object();

	for (int c = 0; c < t->ncols; c++)
		jv_set(obj, t->names[c], jv_cell(t, row, c));
	return obj;
}

/*
 * jv_rows
 *		Every row, as an array of objects.
 */
JsonValue *
jv_rows(const Table *t)
{
	JsonValue  *arr = jv_array();

	for (int r = 0; r < t->nrows; r++)
		jv_append(arr, jv_row(t, r));
	return arr;
}

/* ----------------------------------------------------------------------
 * Reading
 * ---------------------------------------------------------------------- */

/*
 * string_or_null
 *		An object member that must be a string or null (or absent, = null):
 *		*out is a copy or NULL.  False when it is something else.
 */
static bool
string_or_null(json_t *obj, const char *key, char **out)
{
	json_t	   *v = json_object_get(obj, key);

	*out = NULL;
	if (v == NULL || json_is_null(v))
		return true;
	if (!json_is_string(v))
		return false;
	*out = xstrdup(json_string_value(v));
	return true;
}

/*
 * json_parse_owner_hint
 *		The DETAIL of a NOT_OWNER error: {"shard": 3, "owner_node_id": "b",
 *		"owner_conninfo": "host=..."}, the owner fields possibly null.
 *		False when detail is not such an object.
 */
bool
json_parse_owner_hint(const char *detail, OwnerHint *out)
{
	json_t	   *root;
	json_t	   *shard;
	bool		ok;

	memset(out, 0, sizeof(*out));
	out->shard = -1;
	if (detail == NULL)
		return false;
	root = json_loads(detail, 0, NULL);
	if (root == NULL || !json_is_object(root))
	{
		json_decref(root);
		return false;
	}
	shard = json_object_get(root, "shard");
	if (json_is_integer(shard))
		out->shard = (int) json_integer_value(shard);
	ok = string_or_null(root, "owner_node_id", &out->node_id) &&
		string_or_null(root, "owner_conninfo", &out->conninfo) &&
		(shard == NULL || json_is_integer(shard) || json_is_null(shard));
	json_decref(root);
	if (!ok)
		owner_hint_free(out);
	return ok;
}

/*
 * owner_hint_free
 *		Free a hint's strings (the struct itself is the caller's).
 */
void
owner_hint_free(OwnerHint *h)
{
	free(h->node_id);
	free(h->conninfo);
	h->node_id = NULL;
	h->conninfo = NULL;
}

/*
 * json_parse_node_value
 *		The value of an owner key ({"node_id", "conninfo", "acquired_at"})
 *		or, with member, of a member key ({"node_id", "conninfo",
 *		"started_at", "incarnation"}).  node_id is required; the time is kept
 *		as written (a number becomes its text).
 */
bool
json_parse_node_value(const char *value, size_t len, bool member, NodeValue *out)
{
	json_t	   *root = json_loadb(value, len, 0, NULL);
	json_t	   *since;
	bool		ok;

	memset(out, 0, sizeof(*out));
	if (root == NULL || !json_is_object(root))
	{
		json_decref(root);
		return false;
	}
	ok = string_or_null(root, "node_id", &out->node_id) && out->node_id != NULL &&
		string_or_null(root, "conninfo", &out->conninfo);
	since = json_object_get(root, member ? "started_at" : "acquired_at");
	if (json_is_string(since))
		out->since = xstrdup(json_string_value(since));
	else if (json_is_integer(since))
		out->since = xasprintf("%lld", (long long) json_integer_value(since));
	else if (json_is_real(since))
		out->since = xasprintf("%.17g", json_real_value(since));
	json_decref(root);
	if (!ok)
		node_value_free(out);
	return ok;
}

/*
 * node_value_free
 *		Free a node value's strings.
 */
void
node_value_free(NodeValue *v)
{
	free(v->node_id);
	free(v->conninfo);
	free(v->since);
	memset(v, 0, sizeof(*v));
}

/*
 * bound_text
 *		A shard bound (a decimal string, or an integer) into buf; false when
 *		it is neither.
 */
static bool
bound_text(json_t *v, char *buf, size_t size)
{
	int128_t	n;

	if (json_is_integer(v))
	{
		snprintf(buf, size, "%lld", (long long) json_integer_value(v));
		return true;
	}
	if (!json_is_string(v) || !parse_int128(json_string_value(v), &n))
		return false;
	format_int128(n, buf, size);
	return true;
}

/*
 * json_parse_shardmap
 *		P/coord/shardmap: {"version": 1, "count": n, "shards": [{"id",
 *		"start", "end"}]} with the bounds as decimal strings.  *out is
 *		malloc'd.  False when the value is not such a map.
 */
bool
json_parse_shardmap(const char *value, size_t len, ShardRange **out, int *n)
{
	json_t	   *root = json_loadb(value, len, 0, NULL);
	json_t	   *shards;
	size_t		i;
	json_t	   *s;

	*out = NULL;
	*n = 0;
	if (root == NULL || !json_is_object(root))
	{
		json_decref(root);
		return false;
	}
	shards = json_object_get(root, "shards");
	if (!json_is_array(shards))
	{
		json_decref(root);
		return false;
	}
	*out = xmalloc(sizeof(ShardRange) * (json_array_size(shards) + 1));
	json_array_foreach(shards, i, s)
	{
		ShardRange *r = &(*out)[*n];
		json_t	   *id = json_object_get(s, "id");

		if (!json_is_integer(id) ||
			!bound_text(json_object_get(s, "start"), r->start, sizeof(r->start)) ||
			!bound_text(json_object_get(s, "end"), r->end, sizeof(r->end)))
		{
			free(*out);
			*out = NULL;
			*n = 0;
			json_decref(root);
			return false;
		}
		r->id = (int) json_integer_value(id);
		(*n)++;
	}
	json_decref(root);
	return true;
}
