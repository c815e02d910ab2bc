/*-------------------------------------------------------------------------
 *
 * silo_bgw.h
 *	  The broker background worker.  Registered by module/; calls core/,
 *	  limits/, ipc/, storage/ and util/ (src/README.md has the layers).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SILO_BGW_H
#define SILO_BGW_H

#include "silo_core.h"

/* The pg_cron job that runs the retention purge. */
#define SILO_PURGE_JOB_NAME		"silo-purge-terminal-jobs"

/*
 * Its command.  pg_cron runs it as the superuser that scheduled it (the
 * broker's role), in a session that takes the database's settings, so its
 * search_path is whatever the database owner chose: every name in it is
 * schema-qualified, and the only operator is pg_catalog's, named as such
 * (docs/security.md).  It does nothing once silo is dropped.  The 1.6
 * update script writes the same text, and the broker rewrites any other
 * (a restore of an older dump brings the old command back).
 */
#define SILO_PURGE_COMMAND \
	"DO $purge$ BEGIN" \
	" IF EXISTS (SELECT FROM pg_catalog.pg_extension" \
	" WHERE extname OPERATOR(pg_catalog.=) 'silo') THEN" \
	" PERFORM silo.purge_terminal_jobs(); END IF; END $purge$"

/* GUCs (registered by module.c) */
extern char *silo_database;
extern bool silo_broker_paused;

/* broker.c */
extern PGDLLEXPORT void silo_broker_main(Datum main_arg);

#endif							/* SILO_BGW_H */
