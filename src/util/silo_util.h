/*-------------------------------------------------------------------------
 *
 * silo_util.h
 *	  The bottom layer: the bounds of silo's SQL API, checks of values,
 *	  silo's clock and its ids.  Calls nothing else of silo
 *	  (src/README.md has the layers).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SILO_UTIL_H
#define SILO_UTIL_H

#include "postgres.h"

#include "fmgr.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "silo_errcodes.h"

/* The extension version this library implements (silo.control). */
#define SILO_EXTENSION_VERSION	"1.9"

/* Bounds of the SQL API, documented in docs/api.md */
#define SILO_MAX_TENANT_LEN		64
#define SILO_MAX_GROUP_LEN		64
#define SILO_MAX_ID_LEN			128
#define SILO_MAX_WORKER_LEN		256
#define SILO_MAX_ERROR_CODE_LEN 256
#define SILO_MAX_METADATA		16
#define SILO_MAX_META_KEY_LEN	64
#define SILO_MAX_META_VALUE_LEN 1024
#define SILO_MAX_LEASE_BATCH	1000
#define SILO_MIN_LEASE_MS		100
#define SILO_MAX_LEASE_MS		3600000
#define SILO_MAX_LIMITS			16
#define SILO_MAX_LIMIT_KEY_LEN	256

/* A normalized retry policy; count < 0 means "no policy". */
typedef struct SiloRetryPolicy
{
	int32		count;
	int64		initial_ms;
	int64		max_ms;
	double		factor;
	bool		randomize;
} SiloRetryPolicy;

/* cron.c: what a cron expression matches (GMT) */
typedef struct SiloCron
{
	uint64		minute;			/* bit i: minute i */
	uint32		hour;
	uint32		dom;			/* bits 1..31 */
	uint16		month;			/* bits 1..12 */
	uint8		dow;			/* bits 0..6, 0 = Sunday */
	bool		dom_star;		/* the field started with '*' */
	bool		dow_star;
} SiloCron;

#define SILO_MAX_CRON_LEN		100
#define SILO_MAX_SCHEDULE_NAME_LEN 100	/* 'cron:' name ':' minute fits an id */

extern void silo_cron_parse(const char *expr, SiloCron *out);
extern bool silo_cron_next(const SiloCron *c, TimestampTz after, TimestampTz *next);
extern char *silo_minute_text(TimestampTz t);
extern TimestampTz silo_minute_floor(TimestampTz t);

/* clock.c */
extern int	silo_clock_offset_ms;	/* GUC silo.clock_offset_ms */
extern TimestampTz silo_now_ts(void);
extern Datum silo_new_uuid(void);
extern char *silo_uuid_to_cstring(Datum uuid);

/* validate.c */
extern void silo_require_arg(FunctionCallInfo fcinfo, int argno, const char *name);
extern char *silo_text_arg(FunctionCallInfo fcinfo, int argno, const char *name,
						   int minlen, int maxlen);
extern void silo_require_read_committed(const char *fn);
extern void silo_check_length(const char *name, const char *value, int min, int max);
extern void silo_check_name(const char *name, const char *value);
extern void silo_check_range(const char *name, int64 value, int64 min, int64 max);
extern void silo_parse_retry_policy(Jsonb *policy, SiloRetryPolicy *out);
extern Jsonb *silo_retry_policy_jsonb(const SiloRetryPolicy *p);
extern void silo_check_metadata(Jsonb *metadata);
extern const char *silo_json_type_name(JsonbValue *v);
extern double silo_json_number(const char *what, JsonbValue *v);

#endif							/* SILO_UTIL_H */
