/*-------------------------------------------------------------------------
 *
 * silo_api.h
 *	  SQL entry points.  Each parses and checks its arguments, calls the
 *	  one prologue (silo_api_begin) and calls into core/ or limits/.
 *	  Nothing below api/ knows of fcinfo (src/README.md has the layers).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SILO_API_H
#define SILO_API_H

#include "silo_core.h"

/* What an entry point needs of the transaction it runs in. */
#define SILO_API_WRITES			0x01	/* refuses a read-only transaction (25006) */
#define SILO_API_READ_COMMITTED 0x02	/* refuses REPEATABLE READ and SERIALIZABLE
										 * (25000) */
#define SILO_API_ANY_SCHEMA		0x04	/* runs on the schema of an older version
										 * too (enqueue); others refuse (55000) */

/* prologue.c */
extern void silo_api_begin(const char *fn, int flags);
extern void silo_api_require_writable(const char *fn);
extern void silo_api_tenant(const char *tenant);

/* enqueue.c: job objects, shared by enqueue_many and import_jobs */
typedef bool (*SiloJobKeyFn) (const char *key, JsonbValue *v, void *arg);

extern void silo_enqueue_from_json(JsonbValue *obj, SiloEnqueueArgs *args, SiloJobKeyFn extra,
								   void *extra_arg, const char *hint);
extern char *silo_json_string_field(const char *key, JsonbValue *v);
extern TimestampTz silo_json_timestamp_field(const char *key, JsonbValue *v);

#endif							/* SILO_API_H */
