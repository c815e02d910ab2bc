/*-------------------------------------------------------------------------
 *
 * schema.c
 *	  What the installed extension's schema has, in one place: its version
 *	  and what that version brought, read once and kept until a relcache
 *	  invalidation.
 *
 * The library runs against the schema of the version it was built for.
 * Between installing a new library (and restarting) and ALTER EXTENSION
 * silo UPDATE, the schema is older: enqueue keeps working on it (the
 * promise of docs/operations.md, "Upgrades"), every other entry point
 * refuses with 55000 and the update as the hint (api/prologue.c), and
 * the broker waits.
 *
 * The record is dropped on any relcache invalidation: an update that
 * changes a table of silo's sends one, and so does DROP EXTENSION.  An
 * update that changes no table sends none (pg_extension has no catalog
 * cache), so a record that says "older" is read again before anyone is
 * refused on its word (silo_schema_current).
 *
 *-------------------------------------------------------------------------
 */
#include "silo_storage.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/pg_extension.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/rel.h"

static SiloSchema schema_record;
static bool schema_valid = false;
static bool schema_callback_registered = false;

/*
 * schema_invalidate: relcache callback: forget the record.
 */
static void
schema_invalidate(Datum arg, Oid relid)
{
	schema_valid = false;
}

/*
 * schema_version_num: "1.6" as 106; 0 when it is not of that form.
 */
static int
schema_version_num(const char *v)
{
	int			major;
	int			minor;
	char		tail;

	if (sscanf(v, "%d.%d%c", &major, &minor, &tail) != 2)
		return 0;
	return major * 100 + minor;
}

/*
 * schema_read: fill the record from pg_extension's row of silo.
 */
static void
schema_read(void)
{
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tup;
	SiloSchema	s;

	if (!schema_callback_registered)
	{
		CacheRegisterRelcacheCallback(schema_invalidate, (Datum) 0);
		schema_callback_registered = true;
	}
	memset(&s, 0, sizeof(s));
	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber, F_NAMEEQ,
				CStringGetDatum("silo"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, Anum_pg_extension_extversion,
									 RelationGetDescr(rel), &isnull);

		s.installed = true;
		if (!isnull)
			strlcpy(s.version, TextDatumGetCString(d), sizeof(s.version));
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);

	s.version_num = schema_version_num(s.version);
	s.current = s.installed && strcmp(s.version, SILO_EXTENSION_VERSION) == 0;
	s.has_status_index = s.version_num >= 105;
	schema_record = s;
	schema_valid = true;
}

/*
 * silo_schema: the installed schema, as last read.  Needs a transaction.
 */
const SiloSchema *
silo_schema(void)
{
	if (!schema_valid)
		schema_read();
	return &schema_record;
}

/*
 * silo_schema_current: whether the installed schema is this library's
 * version, read again when the record says it is not (see the header).
 */
bool
silo_schema_current(void)
{
	if (silo_schema()->current)
		return true;
	schema_read();
	return schema_record.current;
}

/*
 * silo_schema_require_current: refuse fn on an older (or newer) schema,
 * with the update as the hint.
 */
void
silo_schema_require_current(const char *fn)
{
	if (silo_schema_current())
		return;
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("%s cannot run: extension silo is at version %s, the silo library at %s",
					fn, schema_record.installed ? schema_record.version : "(none)",
					SILO_EXTENSION_VERSION),
			 errdetail("Until the update, only enqueueing works."),
			 errhint("Run ALTER EXTENSION silo UPDATE in this database.")));
}
