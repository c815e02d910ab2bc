// bench/node-await.mjs: the Node client's side of bench/wait_result.sh's
// mode "node": N concurrent awaitResult calls on the jobs PREFIX1 ..
// PREFIXn, made through one SiloClient (clients/node, built; its default
// pool), then nothing until they have all returned.  Prints "waiting" once
// every call has been made and "returned N" when all are back, then exits.
//
//   node bench/node-await.mjs URL PREFIX N
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const { SiloClient } = require(path.join(here, '../clients/node/dist/index.js'));

const [url, prefix, n] = process.argv.slice(2);
if (!url || !prefix || !n) {
  console.error('usage: node bench/node-await.mjs URL PREFIX N');
  process.exit(2);
}
const client = new SiloClient({ connectionString: url, application_name: 'bench-await' });
const calls = [];
for (let i = 1; i <= Number(n); i++) calls.push(client.awaitResult(`${prefix}${i}`, { timeoutMs: 3_600_000 }));
console.log('waiting');
const results = await Promise.all(calls);
console.log(`returned ${results.length}`);
await client.close();
