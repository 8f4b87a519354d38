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

/**
 * `jumppod eval FILE... --settings @SETTINGS --policy policy.wasm`: the module's answers for
 * many requests, one per line, in order, from one compilation of the module (compiling it with
 * cranelift costs seconds, evaluating a request in a fresh instance microseconds).
 */
export function kubewardenAll(requestFiles, settingsFile) {
  const args = ['eval', ...requestFiles, '--policy', POLICY_WASM];
  if (settingsFile) args.push('--settings', `@${settingsFile}`);
  return new Promise((done, fail) => {
    execFile(JUMPPOD, args, { maxBuffer: 256 << 20 }, (error, stdout, stderr) => {
      if (error) return fail(new Error(`jumppod eval failed (${error.code}): ${stderr}`));
      const lines = stdout.split('\n').filter((l) => l.trim());
      if (requestFiles.length === 1) return done([{ response: JSON.parse(stdout) }]);
      if (lines.length !== requestFiles.length) {
        return fail(new Error(`jumppod eval answered ${lines.length} times for ${requestFiles.length} requests`));
      }
      done(lines.map((line) => ({ response: JSON.parse(line) })));
    });
  });
}

/** The module's answers for `pairs` of {file, settings}: one `jumppod eval` per settings. */
export async function kubewardenPairs(pairs) {
  const groups = new Map();
  for (const [i, { file, settings }] of pairs.entries()) {
    const key = settings ?? '';
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(i);
  }
  const answers = new Array(pairs.length);
  for (const [settings, indexes] of groups) {
    const got = await kubewardenAll(indexes.map((i) => pairs[i].file), settings || null);
    indexes.forEach((i, k) => { answers[i] = got[k]; });
  }
  return answers;
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
