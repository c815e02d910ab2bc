"""The statements of the client, shared by the sync and the asyncio client.

Each builder returns (query, params, prepare).  prepare=False for statements
whose result columns a later silo may change (SELECT * of a view, the
columns of silo.lease or job_result): psycopg would otherwise prepare them
under a name after a few runs, and ALTER EXTENSION silo UPDATE would make
such a plan fail with 0A000 "cached plan must not change result type".
"""

from __future__ import annotations

import json
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

from .errors import InvalidArgumentError
from .types import UNSET, JobSpec, _to_json, import_object, job_object, start_at_param

Stmt = Tuple[str, List[Any], Optional[bool]]

WAIT_RESULT_SIGNATURE = "silo.wait_result(text,text,interval,text,jsonb,text,jsonb,timestamptz)"
#: silo.wait_result waits at most a day per call.
WAIT_RESULT_MAX_S = 86400.0


def dumps(value: Any) -> str:
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"not a JSON value: {e}", code="22023") from e


def enqueue(task_group: str, payload: Any, tenant: Optional[str], id: Optional[str], priority: Optional[int],
            start_at: Any, retry_policy: Any, limits: Any, metadata: Any, on_conflict: Optional[str]) -> Stmt:
    args = ["task_group => %s::text", "payload => %s::jsonb"]
    params: List[Any] = [task_group, dumps({} if payload is UNSET else payload)]

    def add(name: str, cast: str, value: Any) -> None:
        if value is None:
            return
        params.append(value)
        args.append(f"{name} => %s::{cast}")

    add("tenant", "text", tenant)
    add("id", "text", id)
    add("priority", "int", priority)
    add("start_at", "timestamptz", None if start_at is None else start_at_param(start_at))
    add("retry_policy", "jsonb", None if retry_policy is None else dumps(_to_json(retry_policy)))
    add("limits", "jsonb", None if limits is None else dumps(_to_json(list(limits))))
    add("metadata", "jsonb", None if metadata is None else dumps(dict(metadata)))
    add("on_conflict", "text", on_conflict)
    return f"SELECT silo.enqueue({', '.join(args)}) AS id", params, None


def enqueue_many(jobs: Sequence[Union[JobSpec, Mapping[str, Any]]]) -> Stmt:
    return ("SELECT e.id FROM silo.enqueue_many(%s::jsonb) WITH ORDINALITY AS e(id, n) ORDER BY e.n",
            [dumps([job_object(j) for j in jobs])], None)


def import_jobs(jobs: Sequence[Mapping[str, Any]]) -> Stmt:
    return ("SELECT r.id, r.tenant, r.success, r.status, r.error, r.sqlstate"
            " FROM silo.import_jobs(%s::jsonb) WITH ORDINALITY"
            " AS r(id, tenant, success, status, error, sqlstate, n) ORDER BY r.n",
            [dumps([import_object(j) for j in jobs])], None)


def get_job(id: str, tenant: str) -> Stmt:
    return "SELECT * FROM silo.jobs WHERE tenant = %s AND id = %s", [tenant, id], False


def job_op(fn: str, id: str, tenant: str) -> Stmt:
    return f"SELECT silo.{fn}(%s::text, %s::text) AS r", [id, tenant], None


def job_result(id: str, tenant: str) -> Stmt:
    return ("SELECT status, result, error_code, error_data, finished_at FROM silo.job_result(%s::text, %s::text)",
            [id, tenant], False)


def wait_result(id: str, tenant: str, seconds: float) -> Stmt:
    ms = max(1, min(int(seconds * 1000 + 0.999), int(WAIT_RESULT_MAX_S * 1000)))
    return "CALL silo.wait_result(%s::text, %s::text, %s::interval)", [id, tenant, f"{ms} milliseconds"], False


WAIT_ANY_SIGNATURE = "silo.wait_any(text[],text,interval,text[])"
#: The most job ids one gathered silo.wait_any call names (beyond: silo.wait_result per await).
WAIT_ANY_MAX_IDS = 4096


def has_wait_any() -> Stmt:
    """Whether silo.wait_any is there and may be called, and silo.max_wait_any_jobs."""
    return ("SELECT coalesce(has_function_privilege(to_regprocedure(%s), 'EXECUTE'), false) AS ok,"
            " current_setting('silo.max_wait_any_jobs', true)::int AS max_ids", [WAIT_ANY_SIGNATURE], None)


def wait_any_ids(row: Mapping[str, Any]) -> int:
    """From has_wait_any's row: how many ids a gathered call may name; 0 when silo.wait_any is not usable."""
    return min(row["max_ids"] or 0, WAIT_ANY_MAX_IDS) if row["ok"] else 0


def has_wait_result() -> Stmt:
    return "SELECT to_regprocedure(%s) IS NOT NULL AS ok", [WAIT_RESULT_SIGNATURE], None


def check_timeout(timeout: float) -> None:
    if not isinstance(timeout, (int, float)) or not timeout > 0:
        raise InvalidArgumentError("timeout must be a positive number of seconds", code="22023")
