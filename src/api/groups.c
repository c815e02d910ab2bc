/*-------------------------------------------------------------------------
 *
 * groups.c
 *	  SQL entry point of task group settings: silo.configure_task_group
 *	  (for silo_admin), and the trigger that makes every session see a
 *	  change of silo.task_group_setting (docs/api.md, "Fair dispatch").
 *
 *-------------------------------------------------------------------------
 */
#include "silo_api.h"

#include "commands/trigger.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(silo_configure_task_group);
PG_FUNCTION_INFO_V1(silo_task_group_setting_changed);

/*
 * silo_configure_task_group: SQL entry point
 * silo.configure_task_group(task_group, fairness): set how the group's
 * due tasks are dispatched -- 'none' (ready order) or 'round_robin'
 * (turns across tenants).  Returns the fairness the group had.  Leases
 * that start after the commit follow it.
 */
Datum
silo_configure_task_group(PG_FUNCTION_ARGS)
{
	char	   *task_group;
	char	   *fairness;

	task_group = silo_text_arg(fcinfo, 0, "task_group", 1, SILO_MAX_GROUP_LEN);
	silo_check_name("task_group", task_group);
	fairness = silo_text_arg(fcinfo, 1, "fairness", 1, 32);
	if (strcmp(fairness, "none") != 0 && strcmp(fairness, "round_robin") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("fairness must be \"none\" or \"round_robin\""),
				 errdetail("The value given was \"%s\".", fairness)));
	silo_api_begin("silo.configure_task_group", SILO_API_WRITES);
	PG_RETURN_TEXT_P(cstring_to_text(silo_group_configure(task_group, fairness)));
}

/*
 * silo_task_group_setting_changed: the AFTER ... FOR EACH STATEMENT
 * trigger of silo.task_group_setting (any change: the function above, a
 * restore, a superuser's edit): every session drops what it cached of
 * the settings once this transaction commits.
 */
Datum
silo_task_group_setting_changed(PG_FUNCTION_ARGS)
{
	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("silo.task_group_setting_changed must be called as a trigger")));
	silo_group_settings_changed(RelationGetRelid(((TriggerData *) fcinfo->context)->tg_relation));
	return PointerGetDatum(NULL);
}
