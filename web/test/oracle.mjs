// The Kubewarden module's answer, computed now by the real policy Wasm: `jumppod eval` runs
// it through waPC + wasmtime as policy-server does and prints what `kwctl run` prints (the
// AdmissionResponse, its JSONPatch base64-encoded). Nothing here is a stored answer.

import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const TARGET = process.env.CARGO_TARGET_DIR ? resolve(process.env.CARGO_TARGET_DIR) : join(ROOT, 'target');
export const JUMPPOD = process.env.JUMPPOD_BIN ?? join(TARGET, 'debug/jumppod');
export const POLICY_WASM = process.env.JUMPPOD_POLICY_WASM ?? join(TARGET, 'wasm32-wasip1/release/jumppod_policy.wasm');

export function oracleMissing() {
  for (const [path, how] of [
    [JUMPPOD, 'cargo build -p jumppod-host'],
    [POLICY_WASM, 'make policy'],
  ]) {
    if (!existsSync(path)) return `${path} is missing: run \`${how}\` (make web-test does)`;
  }
  return null;
}

/** `jumppod eval REQUEST --settings @SETTINGS --policy policy.wasm`: {response} or {error}. */
export function kubewarden(requestFile, settingsFile) {
  const args = ['eval', requestFile, '--policy', POLICY_WASM];
  if (settingsFile) args.push('--settings', `@${settingsFile}`);
  return new Promise((done, fail) => {
    execFile(JUMPPOD, args, { maxBuffer: 64 << 20 }, (error, stdout, stderr) => {
      if (!error) return done({ response: JSON.parse(stdout) });
      if (typeof error.code === 'number') return done({ error: stderr.trim(), exitCode: error.code });
      fail(error);
    });
  });
}

/** Runs `jobs` (functions returning promises) `width` at a time, keeping their order. */
export async function pool(jobs, width = 2) {
  const results = new Array(jobs.length);
  let next = 0;
  const worker = async () => {
    while (next < jobs.length) {
      const i = next++;
      results[i] = await jobs[i]();
    }
  };
  await Promise.all(Array.from({ length: width }, worker));
  return results;
}
