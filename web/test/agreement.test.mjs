// For every fixture of the Wasm policy (policy/test_data) and every settings file, and for a
// generated corpus: the JS review answers exactly what the Kubewarden module answers, the
// module run now through waPC + wasmtime (`jumppod eval`, as `kwctl run`).

import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { checkSettings, review } from '@jumppod/contract';
import { generate } from './corpus.mjs';
import { ROOT, kubewarden, kubewardenPairs, oracleMissing, pool } from './oracle.mjs';

const missing = oracleMissing();
if (missing) throw new Error(missing);

const DATA = join(ROOT, 'policy/test_data');
const json = (dir) => readdirSync(dir).filter((f) => f.endsWith('.json')).sort().map((f) => join(dir, f));
const fixtures = [...json(DATA), ...json(join(DATA, 'hostile'))];
const settingsFiles = json(join(DATA, 'settings'));
const name = (path) => path.slice(DATA.length + 1);
const valid = settingsFiles.filter((s) => checkSettings(readFileSync(s, 'utf8')).valid);
const invalid = settingsFiles.filter((s) => !valid.includes(s));

/** Applies a JSONPatch of add/replace/remove operations (what a diff produces). */
function applyPatch(object, patch) {
  const out = structuredClone(object);
  for (const { op, path, value } of patch) {
    const keys = path.split('/').slice(1).map((k) => k.replaceAll('~1', '/').replaceAll('~0', '~'));
    const last = keys.pop();
    const parent = keys.reduce((node, key) => node[key], out);
    if (op === 'remove') Array.isArray(parent) ? parent.splice(Number(last), 1) : delete parent[last];
    else if (op === 'add' && Array.isArray(parent)) parent.splice(last === '-' ? parent.length : Number(last), 0, value);
    else if (op === 'add' || op === 'replace') parent[last] = value;
    else throw new Error(`unexpected op ${op}`);
  }
  return out;
}

/** The JS answer agrees with the module's AdmissionResponse, and its views agree with it. */
function assertAgrees(js, kw, label) {
  assert.deepEqual(js.response, kw.response, `${label}: AdmissionResponse`);
  assert.equal(js.allowed, kw.response.allowed, label);
  const patch = kw.response.patch ? JSON.parse(Buffer.from(kw.response.patch, 'base64').toString()) : [];
  assert.deepEqual(js.patch, patch, `${label}: JSONPatch`);
  assert.equal(js.verdict, !kw.response.allowed ? 'rejected' : patch.length ? 'mutated' : 'accepted', label);
  if (patch.length) assert.deepEqual(js.patchedObject, applyPatch(js.object, patch), `${label}: patched object`);
  assert.equal(js.message, kw.response.status?.message, label);
  assert.deepEqual(js.warnings, kw.response.warnings ?? [], label);
}

const agreement = { fixtures: 0, settingsChecks: 0, corpus: 0, corpusVerdicts: {} };

const pairs = fixtures.flatMap((fixture) => valid.map((settings) => ({ fixture, settings })));
const answers = await kubewardenPairs(pairs.map(({ fixture, settings }) => ({ file: fixture, settings })));

for (const [i, { fixture, settings }] of pairs.entries()) {
  test(`${name(fixture)} with ${name(settings)}: the JS review is the module's answer`, () => {
    const kw = answers[i];
    assert.ok(kw.response, `jumppod eval failed: ${kw.error}`);
    const js = review(readFileSync(fixture, 'utf8'), readFileSync(settings, 'utf8'));
    assertAgrees(js, kw, name(fixture));
    agreement.fixtures++;
  });
}

const refusals = await pool(invalid.map((settings) => () => kubewarden(join(DATA, 'conforming_jump_pod_create.json'), settings)));
for (const [i, settings] of invalid.entries()) {
  test(`${name(settings)}: checkSettings refuses them with the module's message`, () => {
    const kw = refusals[i];
    assert.ok(kw.error, 'the module accepted settings that checkSettings refuses');
    const check = checkSettings(readFileSync(settings, 'utf8'));
    assert.equal(check.valid, false);
    assert.ok(kw.error.includes(`Provided settings are not valid: ${check.message}`), `${kw.error}\n!= ${check.message}`);
    agreement.settingsChecks++;
  });
}

const CORPUS = 240;
const corpusDir = join(ROOT, 'target/web/corpus');
mkdirSync(corpusDir, { recursive: true });
const corpus = generate(CORPUS).map((request, i) => {
  const file = join(corpusDir, `case-${String(i).padStart(3, '0')}.json`);
  writeFileSync(file, JSON.stringify(request, null, 1));
  // Every other case with raised minimums or mutation off, so the settings vary too.
  const settings = [null, join(DATA, 'settings/raised_minimums.json'), join(DATA, 'settings/no_mutation.json')][i % 3];
  return { request, file, settings };
});
const corpusAnswers = await kubewardenPairs(corpus);

test(`a generated corpus of ${CORPUS} requests: every JS review is the module's answer`, () => {
  for (const [i, { request, settings }] of corpus.entries()) {
    const kw = corpusAnswers[i];
    assert.ok(kw.response, `case ${i}: jumppod eval failed: ${kw.error}`);
    const js = review(request, settings ? readFileSync(settings, 'utf8') : undefined);
    assertAgrees(js, kw, `corpus case ${i} (${corpus[i].file})`);
    agreement.corpus++;
    agreement.corpusVerdicts[js.verdict] = (agreement.corpusVerdicts[js.verdict] ?? 0) + 1;
  }
  // A corpus that only ever accepts would prove little.
  for (const verdict of ['accepted', 'mutated', 'rejected']) {
    assert.ok(agreement.corpusVerdicts[verdict] > 10, `too few ${verdict}: ${JSON.stringify(agreement.corpusVerdicts)}`);
  }
});

test.after(() => {
  writeFileSync(join(ROOT, 'target/web/agreement.json'), JSON.stringify(agreement, null, 2));
  console.log(`# agreement with the Kubewarden module: ${JSON.stringify(agreement)}`);
});
