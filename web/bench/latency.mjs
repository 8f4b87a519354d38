// Review latency of @jumppod/contract in Node: the first review after the module loads (in a
// fresh process each time) and the steady state, for a conforming jump pod and an ordinary
// pod (policy/test_data). Prints a table and writes target/web/node-latency.json.

import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from '../test/oracle.mjs';

const CASES = {
  'conforming jump pod': 'policy/test_data/dstack_0_22_5_bare_jump_pod_with_kit_create.json',
  'ordinary pod': 'policy/test_data/ordinary_pod_create.json',
};

if (process.argv[2] === '--one') {
  const t0 = performance.now();
  const { review } = await import('@jumppod/contract');
  const load = performance.now() - t0;
  const request = JSON.parse(readFileSync(join(ROOT, process.argv[3]), 'utf8'));
  let t = performance.now();
  review(request, {});
  const first = performance.now() - t;
  for (let i = 0; i < 500; i++) review(request, {});
  const times = [];
  for (let i = 0; i < 2000; i++) {
    t = performance.now();
    review(request, {});
    times.push(performance.now() - t);
  }
  times.sort((a, b) => a - b);
  console.log(JSON.stringify({ moduleLoadMs: load, firstMs: first, steadyMedianMs: times[1000], steadyP90Ms: times[1800] }));
} else {
  const results = {};
  for (const [name, file] of Object.entries(CASES)) {
    const runs = Array.from({ length: 5 }, () =>
      JSON.parse(execFileSync(process.execPath, [process.argv[1], '--one', file], { encoding: 'utf8' })),
    );
    const median = (key) => runs.map((r) => r[key]).sort((a, b) => a - b)[2];
    results[name] = Object.fromEntries(['moduleLoadMs', 'firstMs', 'steadyMedianMs', 'steadyP90Ms'].map((k) => [k, median(k)]));
  }
  mkdirSync(join(ROOT, 'target/web'), { recursive: true });
  writeFileSync(join(ROOT, 'target/web/node-latency.json'), JSON.stringify({ node: process.version, results }, null, 2));
  console.log(`node ${process.version} (median of 5 processes; steady = median of 2000 reviews after 500 to warm up)`);
  for (const [name, r] of Object.entries(results)) {
    console.log(`${name.padEnd(20)} load ${r.moduleLoadMs.toFixed(1)} ms  first ${r.firstMs.toFixed(3)} ms  steady ${r.steadyMedianMs.toFixed(3)} ms (p90 ${r.steadyP90Ms.toFixed(3)})`);
  }
}
