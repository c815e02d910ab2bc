// Compiled (not run) by test/run.sh: the package's declarations serve a
// TypeScript user, and they refuse what silo would refuse.
import {
  FeatureNotSupportedError, JobResult, NotOwnerError, QueryCanceledError, RefreshHandler, RouteStats, SiloClient,
  SiloClusterClient, SiloError, SiloWorker, Task, TaskFailure, TaskHandler, UndefinedFunctionError, toSiloError,
} from '../dist/index';

interface Email { to: string; subject?: string }
interface Sent { messageId: string }

async function producer(client: SiloClient): Promise<void> {
  const id: string = await client.enqueue<Email>('emails', { to: 'ada@example.com' }, {
    tenant: 'acme',
    priority: 0,
    startAt: new Date(),
    retryPolicy: { retryCount: 3, initialIntervalMs: 1000, backoffFactor: 2, randomizeInterval: true },
    limits: [
      { type: 'concurrency', key: 'user:1', maxConcurrency: 2 },
      { type: 'floatingConcurrency', key: 'api', defaultMaxConcurrency: 4, refreshIntervalMs: 30_000, metadata: { api: 'x' } },
      { type: 'rateLimit', name: 'smtp', uniqueKey: 'acme', limit: 10, durationMs: 1000, algorithm: 'leakyBucket' },
    ],
    metadata: { customer: 'globex' },
    onConflict: 'ignore',
  });
  const ids: string[] = await client.enqueueMany([{ taskGroup: 'emails', payload: { to: 'b@example.com' } }]);
  const job = await client.getJob<Email>(id, { tenant: 'acme' });
  if (job) {
    const to: string = job.payload.to;
    const when: Date | null = job.nextAttemptAt;
    void to; void when;
  }
  const r: JobResult<Sent> = await client.awaitResult<Sent>(ids[0], { timeoutMs: 5000, signal: AbortSignal.timeout(1000) });
  const m: string | undefined = r.result?.messageId;
  void m;
  await client.cancel(id, { tenant: 'acme' });
  await client.restart(id, { tenant: 'acme' });
  await client.expedite(id);
  const deleted: boolean = await client.deleteJob(id);
  void deleted;

  // @ts-expect-error: onConflict is 'error' or 'ignore'
  await client.enqueue('emails', {}, { onConflict: 'replace' });
  // @ts-expect-error: a concurrency limit needs maxConcurrency
  await client.enqueue('emails', {}, { limits: [{ type: 'concurrency', key: 'k' }] });
  await client.enqueue('emails', {}, { startAt: '2030-01-01T09:00:00Z' });
  // @ts-expect-error: startAt is a Date or a string
  await client.enqueue('emails', {}, { startAt: 1_900_000_000_000 });
  // @ts-expect-error: metadata values are strings
  await client.enqueue('emails', {}, { metadata: { n: 1 } });
}

const handler: TaskHandler<Email, Sent> = async (task: Task<Email>, { signal, workerId }) => {
  if (signal.aborted) throw signal.reason;
  if (!task.payload.to) throw new TaskFailure('NO_ADDRESS', { workerId });
  // the job's limits and retry policy (silo 1.8): enqueue's shapes, so they can be passed back
  const retries: number = task.retryPolicy === null ? 0 : task.retryPolicy.retryCount;
  const keys: string[] = task.limits.map((l) => (l.type === 'rateLimit' ? l.name : l.key));
  if (retries < 0 || keys.length < 0) throw new TaskFailure('NEVER', { workerId });
  return { messageId: `${task.jobId}-${task.attempt}` };
};

const refreshHandler: RefreshHandler = async (task) => Number(task.metadata.max ?? task.currentMaxConcurrency);

function errors(e: unknown): string | null {
  const err = toSiloError(e);
  if (err instanceof NotOwnerError) return err.ownerConninfo;
  if (err instanceof FeatureNotSupportedError || err instanceof QueryCanceledError
    || err instanceof UndefinedFunctionError) return err.code ?? null;
  if (err instanceof SiloError && err.retryable) return err.code ?? null;
  return null;
}

export async function main(): Promise<void> {
  const client = new SiloClient({ connectionString: 'postgresql://localhost/app', max: 4 });
  await producer(client);
  const worker = new SiloWorker<Email, Sent>({
    connection: 'postgresql://localhost/app',
    taskGroup: 'emails',
    handler,
    refreshHandler,
    concurrency: 8,
    batchSize: 8,
    leaseMs: 30_000,
    stopTimeoutMs: 5000,
    tenants: ['acme'],
    onError: (error, ctx) => console.error(ctx.phase, error.message),
  });
  await worker.start();
  const succeeded: number = worker.stats.succeeded;
  const followed: number = worker.stats.followed;
  void succeeded;
  void followed;
  const cluster = new SiloClusterClient('postgresql://localhost/app');
  const route: RouteStats = cluster.routeStats;
  void route.followed;
  void route.retried;
  await cluster.close();
  await worker.stop({ graceMs: 5000 });
  // @ts-expect-error: the handler must return the result type
  new SiloWorker<Email, Sent>({ taskGroup: 'x', handler: async () => 42 });
  void errors;
}
