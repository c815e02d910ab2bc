// Helpers of the Node client's tests.  test/run.sh starts a throwaway
// cluster with silo and passes its URL in SILO_TEST_URL.
import pg from 'pg';

export const URL = process.env.SILO_TEST_URL;
if (!URL) throw new Error('SILO_TEST_URL is not set: run clients/node/test/run.sh');

/** A pool for the tests' own SQL (as the superuser postgres). */
export const admin = new pg.Pool({ connectionString: URL, max: 4, application_name: 'silo-node-test' });
admin.on('error', () => undefined);

/** Rows of one statement. */
export async function sql(text, values = []) {
  return (await admin.query(text, values)).rows;
}

/** The value of the first column of the first row. */
export async function value(text, values = []) {
  const rows = await sql(text, values);
  return rows.length ? rows[0][Object.keys(rows[0])[0]] : undefined;
}

let seq = 0;
/** A name no other test (or run) uses: task groups and job ids stay apart. */
export function unique(prefix) {
  seq += 1;
  return `${prefix}-${process.pid}-${Date.now().toString(36)}-${seq}`;
}

/** The test URL with another user (trust authentication on the socket). */
export function urlAs(user, applicationName) {
  const u = URL.replace(/^(postgres(?:ql)?:\/\/)[^@/]*@/, `$1${encodeURIComponent(user)}@`);
  if (!applicationName) return u;
  return `${u}${u.includes('?') ? '&' : '?'}application_name=${encodeURIComponent(applicationName)}`;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Poll fn until it returns a truthy value; throws with message at the deadline. */
export async function waitFor(fn, { timeoutMs = 10000, intervalMs = 20, message = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${message}`);
    await sleep(intervalMs);
  }
}

/** A promise with its resolve function outside. */
export function deferred() {
  let resolve;
  let reject;
  const promise = new Promise((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** The status of a job (silo.jobs). */
export function jobStatus(id, tenant = '-') {
  return value('SELECT status FROM silo.jobs WHERE tenant = $1 AND id = $2', [tenant, id]);
}

/** Errors a worker passed to onError, kept for assertions. */
export function errorSink() {
  const errors = [];
  const onError = (error, ctx) => errors.push({ error, ctx });
  return { errors, onError };
}
