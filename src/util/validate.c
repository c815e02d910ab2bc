/*-------------------------------------------------------------------------
 *
 * validate.c
 *	  Checks of user-supplied arguments.  Each failure raises 22004 (a
 *	  required value is NULL) or 22023 (a value is out of range or of the
 *	  wrong shape) with a message that names the argument and says what to
 *	  fix.  Checks run before anything is written.
 *
 *-------------------------------------------------------------------------
 */
#include "silo_util.h"

#include <math.h>

#include "access/xact.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/float.h"
#include "utils/fmgrprotos.h"
#include "utils/numeric.h"


/*
 * silo_require_arg: raise 22004 when a required argument is NULL.
 */
void
silo_require_arg(FunctionCallInfo fcinfo, int argno, const char *name)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", name)));
}

/*
 * silo_require_read_committed: fn locks a row and then reads what a
 * concurrent transaction committed while it waited (a cancel flag, a
 * lease); only READ COMMITTED gives it a fresh snapshot for that read.
 */
void
silo_require_read_committed(const char *fn)
{
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("%s requires the READ COMMITTED isolation level", fn),
				 errdetail("Under %s it could miss work that another transaction committed while it waited for a lock.",
						   IsolationIsSerializable() ? "SERIALIZABLE" : "REPEATABLE READ"),
				 errhint("Call %s outside an explicit transaction, or in a READ COMMITTED one.", fn)));
}

/*
 * silo_check_length: value must have between min and max characters.
 */
void
silo_check_length(const char *name, const char *value, int min, int max)
{
	int			len = pg_mbstrlen_with_len(value, strlen(value));

	if (len < min || len > max)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be between %d and %d characters long", name, min, max),
				 errdetail("The value given has %d characters.", len)));
}

/*
 * validate_invisible: whether code point c is one a name must not hold:
 * a control character (C0, DEL, C1), a line or paragraph separator, or a
 * format character that changes how text around it is shown (zero-width
 * characters, bidirectional embeddings, overrides and isolates, the word
 * joiner, the byte-order mark, soft hyphen).  Such a character in a name
 * reaches logs and NOTIFY payloads verbatim: a newline forges a log line,
 * U+202E reverses what a reader sees.
 */
static bool
validate_invisible(pg_wchar c)
{
	return c < 0x20 || (c >= 0x7f && c <= 0x9f) || c == 0xad ||
		(c >= 0x200b && c <= 0x200f) || (c >= 0x2028 && c <= 0x202e) ||
		(c >= 0x2060 && c <= 0x2064) || (c >= 0x2066 && c <= 0x206f) ||
		c == 0xfeff || (c >= 0xfff9 && c <= 0xfffb);
}

/*
 * silo_check_name: a name silo creates something under (a tenant, a job
 * id, a task group, a limit key) must not hold a control or format
 * character (22023; validate_invisible says which).  Only new names are
 * checked: existing rows with such names can still be looked up,
 * cancelled and deleted.
 */
void
silo_check_name(const char *name, const char *value)
{
	int			len = strlen(value);
	pg_wchar   *chars = palloc(sizeof(pg_wchar) * (len + 1));
	int			n;
	int			i;

	if (GetDatabaseEncoding() == PG_UTF8)
		n = pg_mb2wchar_with_len(value, chars, len);
	else
	{
		/* other encodings: their ASCII control bytes */
		for (i = 0; i < len; i++)
			chars[i] = (unsigned char) value[i] < 0x80 ? (unsigned char) value[i] : 0x80 + 0x20;
		n = len;
	}
	for (i = 0; i < n; i++)
		if (validate_invisible(chars[i]))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s must not contain control or format characters", name),
					 errdetail("Character %d is U+%04X.", i + 1, (unsigned int) chars[i]),
					 errhint("Names reach logs and notifications as they are; use visible characters.")));
	pfree(chars);
}

/*
 * silo_check_range: value must lie in [min, max].
 */
void
silo_check_range(const char *name, int64 value, int64 min, int64 max)
{
	if (value < min || value > max)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be between " INT64_FORMAT " and " INT64_FORMAT, name, min, max),
				 errdetail("The value given is " INT64_FORMAT ".", value)));
}

/*
 * silo_text_arg: a required text argument, length-checked, as a C string.
 */
char *
silo_text_arg(FunctionCallInfo fcinfo, int argno, const char *name,
			  int minlen, int maxlen)
{
	char	   *s;

	silo_require_arg(fcinfo, argno, name);
	s = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	silo_check_length(name, s, minlen, maxlen);
	return s;
}

/*
 * silo_json_type_name: the JSON type of a value, for error messages.
 */
const char *
silo_json_type_name(JsonbValue *v)
{
	switch (v->type)
	{
		case jbvNull:
			return "null";
		case jbvString:
			return "string";
		case jbvNumeric:
			return "number";
		case jbvBool:
			return "boolean";
		case jbvBinary:
			return JsonContainerIsArray(v->val.binary.data) ? "array" : "object";
		default:
			return "value";
	}
}

/*
 * silo_json_number: a JSON number as a double, or 22023 naming what.
 */
double
silo_json_number(const char *what, JsonbValue *v)
{
	if (v->type != jbvNumeric)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a number", what),
				 errdetail("The value given is a JSON %s.", silo_json_type_name(v))));
	return DatumGetFloat8(DirectFunctionCall1(numeric_float8_no_overflow,
											  NumericGetDatum(v->val.numeric)));
}

/*
 * silo_parse_retry_policy: validate a retry_policy object (Silo's client
 * key names) and fill in the defaults.  NULL means "no policy": the first
 * failure is final.
 */
void
silo_parse_retry_policy(Jsonb *policy, SiloRetryPolicy *out)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *key = NULL;

	out->count = -1;
	out->initial_ms = 1000;
	out->max_ms = 3600000;
	out->factor = 2.0;
	out->randomize = false;
	if (policy == NULL)
		return;

	if (!JB_ROOT_IS_OBJECT(policy) || JB_ROOT_IS_SCALAR(policy))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("retry_policy must be a JSON object"),
				 errhint("Example: '{\"retryCount\": 3, \"initialIntervalMs\": 1000}'.")));

	out->count = 0;
	it = JsonbIteratorInit(&policy->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		double		d;

		if (tok == WJB_KEY)
		{
			key = pnstrdup(v.val.string.val, v.val.string.len);
			continue;
		}
		if (tok != WJB_VALUE)
			continue;

		if (strcmp(key, "retryCount") == 0)
		{
			d = silo_json_number("retry_policy.retryCount", &v);
			if (d != floor(d) || d < 0 || d > 1000000)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("retry_policy.retryCount must be an integer between 0 and 1000000")));
			out->count = (int32) d;
		}
		else if (strcmp(key, "initialIntervalMs") == 0 || strcmp(key, "maxIntervalMs") == 0)
		{
			char		what[64];

			snprintf(what, sizeof(what), "retry_policy.%s", key);
			d = silo_json_number(what, &v);
			if (d != floor(d) || d < 0 || d > 31536000000.0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("%s must be an integer between 0 and 31536000000 (one year)", what)));
			if (key[0] == 'i')
				out->initial_ms = (int64) d;
			else
				out->max_ms = (int64) d;
		}
		else if (strcmp(key, "backoffFactor") == 0)
		{
			d = silo_json_number("retry_policy.backoffFactor", &v);
			if (!(d >= 1.0 && d <= 1000.0))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("retry_policy.backoffFactor must be between 1 and 1000"),
						 errdetail("A factor below 1 would shrink the delay with every retry.")));
			out->factor = d;
		}
		else if (strcmp(key, "randomizeInterval") == 0)
		{
			if (v.type != jbvBool)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("retry_policy.randomizeInterval must be a boolean"),
						 errdetail("The value given is a JSON %s.", silo_json_type_name(&v))));
			out->randomize = v.val.boolean;
		}
		else
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("retry_policy has an unknown key \"%s\"", key),
					 errhint("Known keys: retryCount, initialIntervalMs, maxIntervalMs, backoffFactor, randomizeInterval.")));
	}
}

/*
 * silo_retry_policy_jsonb: a normalized policy (count >= 0) as the object
 * silo_parse_retry_policy reads, every key given, so that a policy read
 * back from a job (a leased task, silo.jobs) can be passed to enqueue as
 * it is.  The factor is written as float8out writes it, as SQL's
 * jsonb_build_object does from the float8 column.
 */
Jsonb *
silo_retry_policy_jsonb(const SiloRetryPolicy *p)
{
	char	   *s;

	s = psprintf("{\"retryCount\": %d, \"initialIntervalMs\": " INT64_FORMAT
				 ", \"maxIntervalMs\": " INT64_FORMAT ", \"backoffFactor\": %s,"
				 " \"randomizeInterval\": %s}",
				 p->count, p->initial_ms, p->max_ms, float8out_internal(p->factor),
				 p->randomize ? "true" : "false");
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(s)));
}

/*
 * silo_check_metadata: an object of at most 16 string values; keys of at
 * most 64 characters, values of at most 1024 bytes.
 */
void
silo_check_metadata(Jsonb *metadata)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *key = NULL;

	if (!JB_ROOT_IS_OBJECT(metadata) || JB_ROOT_IS_SCALAR(metadata))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("metadata must be a JSON object of strings"),
				 errhint("Example: '{\"customer\": \"acme\"}'.")));
	if (JB_ROOT_COUNT(metadata) > SILO_MAX_METADATA)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("metadata must have at most %d entries", SILO_MAX_METADATA),
				 errdetail("The object given has %u entries.", JB_ROOT_COUNT(metadata))));

	it = JsonbIteratorInit(&metadata->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
		{
			key = pnstrdup(v.val.string.val, v.val.string.len);
			silo_check_length("a metadata key", key, 1, SILO_MAX_META_KEY_LEN);
		}
		else if (tok == WJB_VALUE)
		{
			if (v.type != jbvString)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("metadata value for key \"%s\" must be a string", key),
						 errdetail("The value given is a JSON %s.", silo_json_type_name(&v))));
			if (v.val.string.len > SILO_MAX_META_VALUE_LEN)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("metadata value for key \"%s\" must be at most %d bytes",
								key, SILO_MAX_META_VALUE_LEN),
						 errdetail("The value given has %d bytes.", v.val.string.len)));
		}
	}
}
