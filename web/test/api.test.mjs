// The package's API as a Node user meets it: judge a bare manifest, the rules, settings,
// and input that is not a Kubernetes object.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { checkSettings, judge, review, rules, toYaml } from '@jumppod/contract';
import { EXAMPLES } from '../playground/examples.js';
import { ROOT } from './oracle.mjs';

describe('judging the playground examples as created pods', () => {
  for (const example of EXAMPLES) {
    test(`the ${example.id} example is ${example.verdict}`, () => {
      const answer = judge(example.manifest);
      assert.equal(answer.verdict, example.verdict, answer.message);
      assert.equal(answer.response.uid, '00000000-0000-0000-0000-000000000000');
    });
  }

  test('the legacy pod gets the defaults and the current labels, and keeps its name label', () => {
    const answer = judge(EXAMPLES.find((e) => e.id === 'legacy').manifest);
    const pod = answer.patchedObject;
    assert.deepEqual(pod.spec.containers[0].resources, {
      requests: { cpu: '500m', memory: '1Gi', 'ephemeral-storage': '64Mi' },
      limits: { cpu: '500m', memory: '1Gi' },
    });
    assert.equal(pod.metadata.labels['app.kubernetes.io/name'], 'dstack-main-ssh-jump-pod');
    assert.equal(pod.metadata.labels['k8s.dstack.ai/project'], 'main');
    assert.ok(answer.patch.every((op) => op.op === 'add'), JSON.stringify(answer.patch));
  });

  test('the under-sized pod gets one violation per resource, naming the container', () => {
    const answer = judge(EXAMPLES.find((e) => e.id === 'undersized').manifest);
    assert.deepEqual(
      answer.violations.map((v) => [v.container, v.resource]),
      [
        ['dstack-main-ssh-jump-pod-container', 'cpu'],
        ['dstack-main-ssh-jump-pod-container', 'memory'],
      ],
    );
    assert.match(answer.violations[0].text, /cpu request 50m is below the minimum 100m/);
  });

  test('raised minimums in the settings reject the conforming pod', () => {
    const answer = judge(EXAMPLES[0].manifest, { cpu: { minimum: '1', default: '1' } });
    assert.equal(answer.verdict, 'rejected');
    assert.match(answer.message, /cpu request 500m is below the minimum 1\b/);
  });

  test('an update that keeps the legacy pod`s resources is accepted with a warning', () => {
    const legacy = EXAMPLES.find((e) => e.id === 'legacy').manifest;
    const answer = judge(legacy.replace('namespace: dstack', 'namespace: dstack\n  annotations: {adopted: "yes"}'), undefined, {
      operation: 'UPDATE',
      oldObject: legacy,
    });
    assert.equal(answer.verdict, 'accepted');
    // The pod still breaks the contract on every resource it lacks: the warning says so.
    const container = 'dstack-main-ssh-jump-pod-container';
    assert.deepEqual(
      answer.violations.map((v) => [v.container, v.resource]),
      ['cpu', 'memory', 'ephemeral-storage'].map((resource) => [container, resource]),
    );
    assert.equal(answer.warnings.length, 1);
    assert.match(answer.warnings[0], /\(accepted: its resources did not change\)/);
    for (const v of answer.violations) assert.ok(answer.warnings[0].includes(v.text), `${v.text} not in ${answer.warnings[0]}`);
  });

  test('a quantity written as a YAML number is read as the API server reads it', () => {
    const answer = judge(EXAMPLES[0].manifest.replaceAll('500m', '1'));
    assert.equal(answer.verdict, 'accepted', answer.message);
    assert.equal(answer.object.spec.containers[0].resources.limits.cpu, '1');
  });
});

describe('input that is not a Kubernetes object', () => {
  const refusals = [
    ['invalid YAML', 'kind: Pod\n  metadata: [', /the manifest is not valid YAML/],
    ['a JSON array', '[{"kind": "Pod"}]', /the manifest must be a Pod or ReplicaSet object, not an array of 1 items/],
    ['an empty text', '', /the manifest is empty/],
    ['a manifest without kind', 'metadata: {name: x}', /has no `kind`/],
  ];
  for (const [what, text, message] of refusals) {
    test(`${what} throws an Error with a readable message`, () => {
      assert.throws(() => judge(text), (e) => e instanceof Error && message.test(e.message));
    });
  }

  test('an UPDATE without the old object is refused', () => {
    assert.throws(() => judge(EXAMPLES[0].manifest, undefined, { operation: 'UPDATE' }), /needs the old object/);
  });

  test('a quantity like 1.1.M is the module`s rejection, naming the field', () => {
    const answer = judge(EXAMPLES[0].manifest.replaceAll('cpu: 500m', 'cpu: 1.1.M'));
    assert.equal(answer.verdict, 'rejected');
    assert.match(answer.message, /resources\.requests\.cpu "1\.1\.M" is not a valid quantity/);
    assert.equal(answer.violations[0].resource, 'cpu');
  });

  test('a 2 MB manifest is reviewed like any other', () => {
    const big = JSON.parse(JSON.stringify(judge(EXAMPLES[0].manifest).object));
    big.metadata.annotations = { padding: 'x'.repeat(2 << 20) };
    assert.equal(judge(big).verdict, 'accepted');
  });

  test('a review of something that is not an object throws', () => {
    assert.throws(() => review('[]'), /the admission review must be an AdmissionReview or an AdmissionRequest object/);
    assert.throws(() => review(42), /not a number/);
  });
});

describe('settings and rules', () => {
  test('valid settings pass, invalid ones name the key', () => {
    assert.deepEqual(checkSettings({ mutate: false }), { valid: true });
    assert.deepEqual(checkSettings(undefined), { valid: true });
    const check = checkSettings('cpu: {minimum: 50m}');
    assert.equal(check.valid, false);
    assert.match(check.message, /invalid setting `cpu.minimum`: 50m is below the floor 100m/);
    assert.equal(checkSettings('{"cpu": ').valid, false);
  });

  test('the rules show the values in force with their defaults and floors', () => {
    const listed = rules({ memory: { minimum: '64Mi' } });
    const memory = listed.find((r) => r.id === 'memory-minimum');
    assert.deepEqual([memory.value, memory.default, memory.floor], ['64Mi', '32Mi', '32Mi']);
    assert.equal(listed.find((r) => r.id === 'cpu-default').value, '500m');
    assert.throws(() => rules({ cpu: { minimum: '1m' } }), /`cpu.minimum`/);
  });

  test('toYaml writes what judge reads back', () => {
    const object = judge(EXAMPLES[1].manifest).patchedObject;
    assert.deepEqual(judge(toYaml(object)).object, object);
  });
});

test('the generated TypeScript types compile, and a consumer type-checks against them', () => {
  const tsc = join(ROOT, 'web/node_modules/typescript/bin/tsc');
  const out = execFileSync(process.execPath, [tsc, '-p', join(ROOT, 'web/test/types')], { encoding: 'utf8' });
  assert.equal(out, '');
  assert.match(readFileSync(join(ROOT, 'web/pkg/bundler/jumppod_web.d.ts'), 'utf8'), /export function judge\(manifest: Document/);
});
