/*-------------------------------------------------------------------------
 *
 * limits.c
 *	  Parsing and validation of a job's limits: the JSON array of Silo
 *	  client limit objects given to silo.enqueue.
 *
 * silo_parse_limits checks every object (type, known fields, JSON types,
 * ranges, 1-256 character keys) and returns them as SiloLimit structs plus
 * a normalized JSON copy with every default filled in.  The normalized
 * copy is what job_info.limits stores, so the chain walker (chain.c) reads
 * it back through the same parser and never needs to know the defaults.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_limits.h"

#include <math.h>

#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/float.h"
#include "utils/json.h"

/* The largest millisecond or count value accepted (about 31 years in ms). */
#define LIMITS_MAX_VALUE	1000000000000.0

/* Which fields one limit object has set, for the "required" checks. */
typedef struct LimitsSeen
{
	bool		type;
	bool		key;
	bool		max;
	bool		interval;
	bool		name;
	bool		unique_key;
	bool		limit;
	bool		duration;
} LimitsSeen;


/*
 * Whether the limits being parsed are a new job's (enqueue normalizes
 * them): only new keys are refused for control characters; stored ones
 * are read back as they are.
 */
static bool parse_new = false;

/*
 * limits_error: raise 22023 about field of limit number index.
 */
static void
limits_error(int index, const char *msg, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("limits[%d]: %s", index, msg),
			 detail ? errdetail("%s", detail) : 0,
			 errhint("See docs/limits.md for the shape of each limit type.")));
}

/*
 * limits_integer: a JSON integer in [min, max].
 */
static int64
limits_integer(int index, const char *field, JsonbValue *v, double min, double max)
{
	char		what[96];
	double		d;

	snprintf(what, sizeof(what), "limits[%d].%s", index, field);
	d = silo_json_number(what, v);
	if (d != floor(d) || !(d >= min && d <= max))
		limits_error(index, psprintf("%s must be an integer between %.0f and %.0f",
									 field, min, max), NULL);
	return (int64) d;
}

/*
 * limits_string: a JSON string of 1-256 characters.
 */
static char *
limits_string(int index, const char *field, JsonbValue *v)
{
	char		what[96];
	char	   *s;

	if (v->type != jbvString)
		limits_error(index, psprintf("%s must be a string", field),
					 psprintf("The value given is a JSON %s.", silo_json_type_name(v)));
	s = pnstrdup(v->val.string.val, v->val.string.len);
	snprintf(what, sizeof(what), "limits[%d].%s", index, field);
	silo_check_length(what, s, 1, SILO_MAX_LIMIT_KEY_LEN);
	if (parse_new)
		silo_check_name(what, s);
	return s;
}

/*
 * limits_metadata: a floating limit's metadata: an object of strings.
 */
static Jsonb *
limits_metadata(int index, JsonbValue *v)
{
	Jsonb	   *j;

	if (v->type != jbvBinary || JsonContainerIsArray(v->val.binary.data))
		limits_error(index, "metadata must be a JSON object of strings", NULL);
	j = JsonbValueToJsonb(v);
	silo_check_metadata(j);
	return j;
}

/*
 * limits_retry_policy: a rate limit's retryPolicy object.
 */
static void
limits_retry_policy(int index, JsonbValue *obj, SiloLimit *l)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *key = NULL;

	if (obj->type != jbvBinary || JsonContainerIsArray(obj->val.binary.data))
		limits_error(index, "retryPolicy must be a JSON object", NULL);
	it = JsonbIteratorInit(obj->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
		{
			key = pnstrdup(v.val.string.val, v.val.string.len);
			continue;
		}
		if (tok != WJB_VALUE)
			continue;
		if (strcmp(key, "initialBackoffMs") == 0)
			l->rl_initial_ms = limits_integer(index, "retryPolicy.initialBackoffMs", &v, 1, LIMITS_MAX_VALUE);
		else if (strcmp(key, "maxBackoffMs") == 0)
			l->rl_max_ms = limits_integer(index, "retryPolicy.maxBackoffMs", &v, 1, LIMITS_MAX_VALUE);
		else if (strcmp(key, "backoffMultiplier") == 0)
		{
			double		d = silo_json_number(psprintf("limits[%d].retryPolicy.backoffMultiplier",
														index), &v);

			if (!(d >= 1.0 && d <= 1000.0))
				limits_error(index, "retryPolicy.backoffMultiplier must be between 1 and 1000", NULL);
			l->rl_multiplier = d;
		}
		else if (strcmp(key, "maxRetries") == 0)
			l->rl_max_retries = (int32) limits_integer(index, "retryPolicy.maxRetries", &v, 0, 1000000);
		else
			limits_error(index, psprintf("retryPolicy has an unknown key \"%s\"", key),
						 "Known keys: initialBackoffMs, maxBackoffMs, backoffMultiplier, maxRetries.");
	}
}

/*
 * limits_field: one key/value of a limit object.  Fields of another limit
 * type are rejected once the type is known (limits_check_fields).
 */
static void
limits_field(int index, const char *key, JsonbValue *v, SiloLimit *l, LimitsSeen *seen)
{
	if (strcmp(key, "type") == 0)
	{
		char	   *t;

		if (v->type != jbvString)
			limits_error(index, "type must be a string", NULL);
		t = pnstrdup(v->val.string.val, v->val.string.len);
		if (strcmp(t, "concurrency") == 0)
			l->type = SILO_LIMIT_CONCURRENCY;
		else if (strcmp(t, "floatingConcurrency") == 0)
			l->type = SILO_LIMIT_FLOATING;
		else if (strcmp(t, "rateLimit") == 0)
			l->type = SILO_LIMIT_RATE;
		else
			limits_error(index, psprintf("unknown limit type \"%s\"", t),
						 "Known types: concurrency, floatingConcurrency, rateLimit.");
		seen->type = true;
	}
	else if (strcmp(key, "key") == 0)
	{
		l->key = limits_string(index, key, v);
		seen->key = true;
	}
	else if (strcmp(key, "maxConcurrency") == 0 || strcmp(key, "defaultMaxConcurrency") == 0)
	{
		l->max = (int32) limits_integer(index, key, v, 1, PG_INT32_MAX);
		seen->max = true;
	}
	else if (strcmp(key, "refreshIntervalMs") == 0)
	{
		l->refresh_interval_ms = limits_integer(index, key, v, 1, LIMITS_MAX_VALUE);
		seen->interval = true;
	}
	else if (strcmp(key, "metadata") == 0)
		l->metadata = limits_metadata(index, v);
	else if (strcmp(key, "name") == 0)
	{
		l->key = limits_string(index, key, v);
		seen->name = true;
	}
	else if (strcmp(key, "uniqueKey") == 0)
	{
		l->unique_key = limits_string(index, key, v);
		seen->unique_key = true;
	}
	else if (strcmp(key, "limit") == 0)
	{
		l->limit = limits_integer(index, key, v, 1, LIMITS_MAX_VALUE);
		seen->limit = true;
	}
	else if (strcmp(key, "durationMs") == 0)
	{
		l->duration_ms = limits_integer(index, key, v, 1, LIMITS_MAX_VALUE);
		seen->duration = true;
	}
	else if (strcmp(key, "hits") == 0)
		l->hits = limits_integer(index, key, v, 1, LIMITS_MAX_VALUE);
	else if (strcmp(key, "algorithm") == 0)
	{
		if (v->type == jbvString && v->val.string.len == 11 &&
			strncmp(v->val.string.val, "tokenBucket", 11) == 0)
			l->leaky = false;
		else if (v->type == jbvString && v->val.string.len == 11 &&
				 strncmp(v->val.string.val, "leakyBucket", 11) == 0)
			l->leaky = true;
		else
			limits_error(index, "algorithm must be \"tokenBucket\" or \"leakyBucket\"", NULL);
	}
	else if (strcmp(key, "behavior") == 0)
		l->behavior = (int32) limits_integer(index, key, v, 0, PG_INT32_MAX);
	else if (strcmp(key, "retryPolicy") == 0)
		limits_retry_policy(index, v, l);
	else
		limits_error(index, psprintf("unknown key \"%s\"", key), NULL);
}

/*
 * limits_check_fields: after one object: its type is known, its required
 * fields are present and it has no field of another type.
 */
static void
limits_check_fields(int index, SiloLimit *l, LimitsSeen *seen, bool has_rate_fields,
					bool has_conc_fields, bool has_floating_fields)
{
	if (!seen->type)
		limits_error(index, "type is required", "Known types: concurrency, floatingConcurrency, rateLimit.");
	switch (l->type)
	{
		case SILO_LIMIT_CONCURRENCY:
			if (has_rate_fields || has_floating_fields || seen->name || seen->unique_key)
				limits_error(index, "a concurrency limit takes only type, key and maxConcurrency", NULL);
			if (!seen->key || !seen->max)
				limits_error(index, "a concurrency limit needs key and maxConcurrency", NULL);
			break;
		case SILO_LIMIT_FLOATING:
			if (has_rate_fields || has_conc_fields || seen->name || seen->unique_key)
				limits_error(index, "a floatingConcurrency limit takes only type, key, defaultMaxConcurrency, refreshIntervalMs and metadata", NULL);
			if (!seen->key || !seen->max || !seen->interval)
				limits_error(index, "a floatingConcurrency limit needs key, defaultMaxConcurrency and refreshIntervalMs", NULL);
			break;
		case SILO_LIMIT_RATE:
			if (has_conc_fields || has_floating_fields || seen->key || seen->max)
				limits_error(index, "a rateLimit takes only type, name, uniqueKey, limit, durationMs, hits, algorithm, behavior and retryPolicy", NULL);
			if (!seen->name || !seen->unique_key || !seen->limit || !seen->duration)
				limits_error(index, "a rateLimit needs name, uniqueKey, limit and durationMs", NULL);
			if (l->hits > l->limit)
				limits_error(index, "hits must not exceed limit",
							 psprintf("A job taking %lld hits from a bucket of %lld could never be admitted.",
									  (long long) l->hits, (long long) l->limit));
			break;
	}
}

/*
 * limits_append_normalized: the normalized JSON object of one limit.
 */
static void
limits_append_normalized(StringInfo buf, SiloLimit *l)
{
	appendStringInfoString(buf, "{\"type\": ");
	switch (l->type)
	{
		case SILO_LIMIT_CONCURRENCY:
			appendStringInfoString(buf, "\"concurrency\", \"key\": ");
			escape_json(buf, l->key);
			appendStringInfo(buf, ", \"maxConcurrency\": %d}", l->max);
			break;
		case SILO_LIMIT_FLOATING:
			appendStringInfoString(buf, "\"floatingConcurrency\", \"key\": ");
			escape_json(buf, l->key);
			appendStringInfo(buf, ", \"defaultMaxConcurrency\": %d, \"refreshIntervalMs\": %lld, \"metadata\": %s}",
							 l->max, (long long) l->refresh_interval_ms,
							 l->metadata ? JsonbToCString(NULL, &l->metadata->root, VARSIZE(l->metadata)) : "{}");
			break;
		case SILO_LIMIT_RATE:
			appendStringInfoString(buf, "\"rateLimit\", \"name\": ");
			escape_json(buf, l->key);
			appendStringInfoString(buf, ", \"uniqueKey\": ");
			escape_json(buf, l->unique_key);
			appendStringInfo(buf, ", \"limit\": %lld, \"durationMs\": %lld, \"hits\": %lld,"
							 " \"algorithm\": \"%s\", \"behavior\": %d, \"retryPolicy\":"
							 " {\"initialBackoffMs\": %lld, \"maxBackoffMs\": %lld,"
							 " \"backoffMultiplier\": %s, \"maxRetries\": %d}}",
							 (long long) l->limit, (long long) l->duration_ms, (long long) l->hits,
							 l->leaky ? "leakyBucket" : "tokenBucket", l->behavior,
							 (long long) l->rl_initial_ms, (long long) l->rl_max_ms,
							 float8out_internal(l->rl_multiplier), l->rl_max_retries);
			break;
	}
}

/*
 * silo_parse_limits: validate a limits array; returns the number of
 * limits, their parsed form in *out and, when normalized is not NULL, the
 * normalized array to store.  Raises 22023 for anything malformed.
 */
int
silo_parse_limits(Jsonb *limits, SiloLimit **out, Jsonb **normalized)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	SiloLimit  *ls;
	StringInfoData buf;
	int			n;
	int			index = 0;
	int			i,
				j;

	parse_new = normalized != NULL;
	if (!JB_ROOT_IS_ARRAY(limits) || JB_ROOT_IS_SCALAR(limits))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("limits must be a JSON array of limit objects"),
				 errhint("Example: '[{\"type\": \"concurrency\", \"key\": \"user:1\", \"maxConcurrency\": 2}]'.")));
	n = JB_ROOT_COUNT(limits);
	if (n > SILO_MAX_LIMITS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a job can have at most %d limits", SILO_MAX_LIMITS),
				 errdetail("The array given has %d.", n)));
	ls = palloc0(sizeof(SiloLimit) * (n + 1));

	it = JsonbIteratorInit(&limits->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		JsonbIterator *oit;
		JsonbValue	ov;
		JsonbIteratorToken otok;
		char	   *key = NULL;
		SiloLimit  *l;
		LimitsSeen	seen;
		bool		rate_fields = false;
		bool		conc_fields = false;
		bool		floating_fields = false;

		if (tok != WJB_ELEM)
			continue;
		if (v.type != jbvBinary || JsonContainerIsArray(v.val.binary.data))
			limits_error(index, "each limit must be a JSON object", NULL);
		l = &ls[index];
		memset(&seen, 0, sizeof(seen));
		l->hits = 1;
		l->rl_initial_ms = 100;
		l->rl_max_ms = 30000;
		l->rl_multiplier = 2.0;
		oit = JsonbIteratorInit(v.val.binary.data);
		while ((otok = JsonbIteratorNext(&oit, &ov, true)) != WJB_DONE)
		{
			if (otok == WJB_KEY)
			{
				key = pnstrdup(ov.val.string.val, ov.val.string.len);
				if (strcmp(key, "limit") == 0 || strcmp(key, "durationMs") == 0 ||
					strcmp(key, "hits") == 0 || strcmp(key, "algorithm") == 0 ||
					strcmp(key, "behavior") == 0 || strcmp(key, "retryPolicy") == 0)
					rate_fields = true;
				else if (strcmp(key, "maxConcurrency") == 0)
					conc_fields = true;
				else if (strcmp(key, "defaultMaxConcurrency") == 0 ||
						 strcmp(key, "refreshIntervalMs") == 0 || strcmp(key, "metadata") == 0)
					floating_fields = true;
				continue;
			}
			if (otok == WJB_VALUE)
			{
				if (ov.type == jbvNull)
					limits_error(index, psprintf("%s must not be null", key), NULL);
				limits_field(index, key, &ov, l, &seen);
			}
		}
		limits_check_fields(index, l, &seen, rate_fields, conc_fields, floating_fields);
		index++;
	}

	/* Holders are keyed (tenant, key, task): a job holds a key once. */
	for (i = 0; i < n; i++)
		for (j = 0; j < i; j++)
			if (ls[i].type != SILO_LIMIT_RATE && ls[j].type != SILO_LIMIT_RATE &&
				strcmp(ls[i].key, ls[j].key) == 0)
				limits_error(i, psprintf("key \"%s\" is already used by limits[%d]", ls[i].key, j),
							 "Concurrency and floating concurrency limits share one key space; a job can hold each key once.");

	if (normalized)
	{
		initStringInfo(&buf);
		appendStringInfoChar(&buf, '[');
		for (i = 0; i < n; i++)
		{
			if (i > 0)
				appendStringInfoString(&buf, ", ");
			limits_append_normalized(&buf, &ls[i]);
		}
		appendStringInfoChar(&buf, ']');
		*normalized = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));
	}
	*out = ls;
	return n;
}
