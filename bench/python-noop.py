"""bench/python-noop.py: the Python side of bench/clients_python.sh.  Drains a
task group with clients/python's worker and a no-op handler, then exits.

    /usr/bin/python3 bench/python-noop.py URL GROUP JOBS CONCURRENCY BATCH async|sync

async: AsyncSiloWorker with a coroutine handler (runs on the loop); sync:
SiloWorker with a plain function handler (each task hops to a handler
thread).  Exits once JOBS tasks have been reported (or nothing was leased
for 2 s after the first task), printing one JSON line: {"jobs", "seconds",
"rate", "stats"} as this process saw them; bench/clients_python.sh takes its
figures from the database instead.
"""

import asyncio
import dataclasses
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python"))

from silo_client import AsyncSiloWorker, SiloWorker  # noqa: E402


def main():
    if len(sys.argv) != 7 or sys.argv[6] not in ("async", "sync"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    url, group, jobs, conc, batch, mode = sys.argv[1:]
    jobs, conc, batch = int(jobs), int(conc), int(batch)
    opts = dict(task_group=group, concurrency=conc, batch_size=batch, lease_seconds=30,
                on_error=lambda e, c: print(f"python-noop: {c.phase}: {e}", file=sys.stderr))

    def done(stats):
        return stats.succeeded + stats.failed + stats.lost >= jobs

    t0 = time.monotonic()
    if mode == "async":
        async def run():
            async def noop(task, ctx):
                return None
            w = AsyncSiloWorker(url, handler=noop, **opts)
            await w.start()
            last, last_n = time.monotonic(), 0
            while not done(w.stats):
                await asyncio.sleep(0.01)
                if w.stats.leased != last_n:
                    last, last_n = time.monotonic(), w.stats.leased
                elif last_n and time.monotonic() - last > 2:
                    break
            await w.stop()
            return w.stats
        stats = asyncio.run(run())
    else:
        w = SiloWorker(url, handler=lambda task, ctx: None, **opts)
        w.start()
        last, last_n = time.monotonic(), 0
        while not done(w.stats):
            time.sleep(0.01)
            if w.stats.leased != last_n:
                last, last_n = time.monotonic(), w.stats.leased
            elif last_n and time.monotonic() - last > 2:
                break
        w.stop()
        stats = w.stats
    secs = time.monotonic() - t0
    print(json.dumps({"jobs": stats.succeeded, "seconds": round(secs, 3), "rate": round(stats.succeeded / secs, 1),
                      "stats": dataclasses.asdict(stats)}))


if __name__ == "__main__":
    main()
