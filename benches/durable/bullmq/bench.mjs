// BullMQ delayed jobs, driven by benches/durable.rs: one measurement per run, against the redis-server the
// Rust side started, with the inputs it wrote (the same keys, payload and delays as every implementation).
//
//   node bench.mjs schedule <port> <inputs.json> one|batch   D1: queue.add per job (64 in flight) or addBulk
//   node bench.mjs cancel   <port> <inputs.json>             D4: queue.remove per job, 64 in flight
//   node bench.mjs fire     <port> <inputs.json>             D3: 4 workers x concurrency 16, jobs via addBulk
//   node bench.mjs drain    <port> <inputs.json>             D7: n jobs waiting, then the workers start
//   node bench.mjs idle     <port> <inputs.json>             D5: n jobs an hour away, 4 workers; prints "ready",
//                                                            runs until stdin closes
// Prints one flat JSON object on stdout (the field names of the durable workloads). `schedule`, `cancel` and `fire` also
// print `start` just before they start their clock and `stop` just after they stop it, and wait for a line on stdin
// each time: the Rust side reads Redis's work (CPU time, script calls) there, as it does around the other
// implementations' timed phases, so that the readings bracket this timed phase and nothing else.
//
// Best normal configuration: job id = the key (BullMQ's unique key; a second add with the same id is ignored),
// `removeOnComplete: true` (completed jobs would otherwise stay in Redis), workers with `concurrency: 16`
// (the default of 1 cannot keep up with 10,000 jobs/s), the rest BullMQ's defaults (workers promote delayed jobs
// themselves and block on the queue's marker until the next one is due).
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { Queue, Worker } from 'bullmq';

const [mode, port, inputsPath, variant] = process.argv.slice(2);
const inputs = JSON.parse(readFileSync(inputsPath, 'utf8'));
const connection = { host: '127.0.0.1', port: Number(port), maxRetriesPerRequest: null };
const QUEUE = 'bench';
const jobOpts = { removeOnComplete: true, removeOnFail: true };
const key = (i) => `order-${i}`;
const nowMs = () => performance.timeOrigin + performance.now();

function emit(fields) {
  process.stdout.write(JSON.stringify(fields) + '\n');
}

// Says `name` (`start` or `stop`) and waits for the Rust side's line back: it has read Redis's work.
let stdinLines;
async function phase(name) {
  stdinLines ??= createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  process.stdout.write(name + '\n');
  const { done } = await stdinLines.next();
  if (done) throw new Error(`bench.mjs: stdin closed at ${name}`);
}

// Runs f(0..n) with at most `limit` promises in flight.
async function inFlight(n, limit, f) {
  let next = 0;
  async function lane() {
    while (next < n) {
      const i = next++;
      await f(i);
    }
  }
  await Promise.all(Array.from({ length: Math.min(limit, n) }, lane));
}

async function addAll(queue, delayOf) {
  for (let start = 0; start < inputs.n; start += inputs.batch) {
    const jobs = [];
    for (let i = start; i < Math.min(start + inputs.batch, inputs.n); i++) {
      jobs.push({ name: 'review', data: { p: inputs.payload }, opts: { ...jobOpts, jobId: key(i), delay: delayOf(i) } });
    }
    await queue.addBulk(jobs);
  }
}

async function schedule() {
  const queue = new Queue(QUEUE, { connection });
  await queue.waitUntilReady();
  await phase('start');
  const started = nowMs();
  if (variant === 'batch') {
    await addAll(queue, (i) => inputs.d1_delays_ms[i]);
  } else {
    await inFlight(inputs.n, inputs.in_flight, (i) =>
      queue.add('review', { p: inputs.payload }, { ...jobOpts, jobId: key(i), delay: inputs.d1_delays_ms[i] }));
  }
  const s = (nowMs() - started) / 1e3;
  await phase('stop');
  await queue.close();
  emit({ tasks_per_s: inputs.n / s });
}

async function cancel() {
  const queue = new Queue(QUEUE, { connection });
  await queue.waitUntilReady();
  let removed = 0;
  await phase('start');
  const started = nowMs();
  await inFlight(inputs.n, inputs.in_flight, async (k) => {
    const r = await queue.remove(key(inputs.cancel_order[k])); // not `removed += await ...`: that reads first
    removed += r;
  });
  const s = (nowMs() - started) / 1e3;
  await phase('stop');
  await queue.close();
  emit({ cancels_per_s: inputs.n / s, cancelled: removed });
}

function startWorkers(processor) {
  return Array.from({ length: inputs.workers }, () =>
    new Worker(QUEUE, processor, { connection, concurrency: inputs.concurrency }));
}

function quantile(sorted, q) {
  if (sorted.length === 0) return -1;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
}

async function fire() {
  const n = inputs.n;
  const handled = new Uint32Array(n);
  const lateMs = new Float64Array(n);
  const dueMs = new Float64Array(n);
  let distinct = 0, duplicates = 0, early = 0, completed = 0, lastCompleted = 0;
  let started = 0;
  let resolveDone;
  const done = new Promise((r) => { resolveDone = r; });
  const workers = startWorkers(async (job) => {
    const start = nowMs();
    const i = Number(job.id.slice('order-'.length));
    // Due = when the job was created (BullMQ's `timestamp`, this process's clock) + its delay.
    const late = start - (job.timestamp + inputs.d3_delays_ms[i]);
    if (handled[i]++ > 0) { duplicates++; return; }
    if (late < 0) early++;
    lateMs[i] = late;
    dueMs[i] = job.timestamp + inputs.d3_delays_ms[i];
    distinct++;
  });
  for (const w of workers) {
    // `completed` is emitted once the job is moved to completed in Redis: the acknowledgement.
    w.on('completed', () => {
      completed++;
      if (completed === n) { lastCompleted = nowMs(); resolveDone(); }
    });
  }
  await Promise.all(workers.map((w) => w.waitUntilReady()));
  const queue = new Queue(QUEUE, { connection });
  await queue.waitUntilReady();
  await phase('start');
  started = nowMs();
  await addAll(queue, (i) => inputs.d3_delays_ms[i]);
  const insertEnd = nowMs();
  const limit = setTimeout(() => resolveDone(), (10 + 60) * 1000);
  await done;
  clearTimeout(limit);
  const wall = completed >= n ? lastCompleted - started : -1;
  await phase('stop');
  await new Promise((r) => setTimeout(r, 2000)); // watch for duplicates a little longer
  await Promise.all(workers.map((w) => w.close()));
  await queue.close();
  const sorted = Float64Array.from(lateMs.filter((_, i) => handled[i] > 0)).sort();
  // The jobs due after the insert phase ended, as the Rust side reports them too.
  const after = Float64Array.from(lateMs.filter((_, i) => handled[i] > 0 && dueMs[i] > insertEnd)).sort();
  emit({
    late_p50_after_insert_ms: Math.max(0, quantile(after, 0.5)),
    late_p99_after_insert_ms: Math.max(0, quantile(after, 0.99)),
    due_after_insert: after.length,
    late_p50_ms: Math.max(0, quantile(sorted, 0.5)),
    late_p99_ms: Math.max(0, quantile(sorted, 0.99)),
    late_max_ms: Math.max(0, sorted.length ? sorted[sorted.length - 1] : -1),
    duplicates, early, handled: distinct, wall_ms: wall,
  });
}

// D7: n jobs waiting (no delay) before any worker runs; then the workers start and drain them.
async function drain() {
  const n = inputs.n;
  const queue = new Queue(QUEUE, { connection });
  await queue.waitUntilReady();
  await addAll(queue, () => 0);
  const handled = new Uint32Array(n);
  let distinct = 0, duplicates = 0, completed = 0, lastCompleted = 0;
  let resolveDone;
  const done = new Promise((r) => { resolveDone = r; });
  await phase('start');
  const started = nowMs();
  const workers = startWorkers(async (job) => {
    const i = Number(job.id.slice('order-'.length));
    if (handled[i]++ > 0) { duplicates++; return; }
    distinct++;
  });
  for (const w of workers) {
    w.on('completed', () => {
      completed++;
      if (completed === n) { lastCompleted = nowMs(); resolveDone(); }
    });
  }
  const limit = setTimeout(() => resolveDone(), (10 + 60) * 1000);
  await done;
  clearTimeout(limit);
  const wall = completed >= n ? lastCompleted - started : -1;
  await phase('stop');
  await Promise.all(workers.map((w) => w.close()));
  await queue.close();
  emit({ acks_per_s: wall > 0 ? n / (wall / 1e3) : -1, wall_ms: wall, duplicates, handled: distinct });
}

async function idle() {
  const queue = new Queue(QUEUE, { connection });
  await queue.waitUntilReady();
  await addAll(queue, () => inputs.d5_delay_ms);
  const workers = startWorkers(async () => {});
  await Promise.all(workers.map((w) => w.waitUntilReady()));
  emit({ ready: 1 });
  process.stdin.resume();
  await new Promise((r) => process.stdin.on('end', r));
  await Promise.all(workers.map((w) => w.close(true)));
  await queue.close();
}

const modes = { schedule, cancel, fire, drain, idle };
if (!modes[mode]) {
  console.error(`bench.mjs: unknown mode ${mode}`);
  process.exit(2);
}
await modes[mode]();
process.exit(0);
