"""Helpers of the Python client's tests.  test/run.sh starts a throwaway
cluster with silo and passes its URL in SILO_TEST_URL."""

import asyncio
import itertools
import os
import sys
import time
import urllib.parse

import psycopg
from psycopg.rows import dict_row

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

URL = os.environ.get("SILO_TEST_URL")
if not URL:
    raise RuntimeError("SILO_TEST_URL is not set: run clients/python/test/run.sh")

_admin = None
_seq = itertools.count(1)


def admin() -> psycopg.Connection:
    """A connection for the tests' own SQL (as the superuser postgres)."""
    global _admin
    if _admin is None or _admin.closed or _admin.broken:
        _admin = psycopg.connect(URL, autocommit=True, row_factory=dict_row, application_name="silo-python-test")
    return _admin


def sql(text, params=()):
    cur = admin().execute(text, params)
    return cur.fetchall() if cur.description else []


def value(text, params=()):
    rows = sql(text, params)
    return next(iter(rows[0].values())) if rows else None


def unique(prefix: str) -> str:
    """A name no other test (or run) uses: task groups and job ids stay apart."""
    return f"{prefix}-{os.getpid()}-{int(time.time() * 1000) % 10**8:x}-{next(_seq)}"


def url_as(user: str, application_name: str = None) -> str:
    """The test URL with another user (trust authentication on the socket)."""
    p = urllib.parse.urlsplit(URL)
    netloc = f"{urllib.parse.quote(user)}@{p.netloc.split('@', 1)[-1]}"
    q = p.query
    if application_name:
        q = (q + "&" if q else "") + "application_name=" + urllib.parse.quote(application_name)
    return urllib.parse.urlunsplit((p.scheme, netloc, p.path, q, p.fragment))


def wait_for(fn, timeout=10.0, interval=0.02, message="condition"):
    """Poll fn until it returns a truthy value; AssertionError at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message}")
        time.sleep(interval)


async def await_for(fn, timeout=10.0, interval=0.02, message="condition"):
    """wait_for for asyncio tests: fn may be a coroutine function."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if asyncio.iscoroutine(v):
            v = await v
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message}")
        await asyncio.sleep(interval)


def job_status(id, tenant="-"):
    return value("SELECT status FROM silo.jobs WHERE tenant = %s AND id = %s", (tenant, id))


def statuses(ids, tenant="-"):
    rows = sql("SELECT id, status FROM silo.jobs WHERE tenant = %s AND id = ANY(%s)", (tenant, list(ids)))
    return {r["id"]: r["status"] for r in rows}


def all_status(ids, wanted):
    s = statuses(ids)
    return len(s) == len(ids) and all(v in wanted for v in s.values())


class ErrorSink:
    """Errors a worker passed to on_error, kept for assertions."""

    def __init__(self):
        self.errors = []

    def __call__(self, error, ctx):
        self.errors.append((error, ctx))
