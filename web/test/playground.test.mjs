// The playground in a real browser: Debian's chromium driven by playwright-core. It loads the
// page from a static server on 127.0.0.1, pastes each example, checks the verdict and the
// diff, feeds it bad input, restores a shared link, goes offline, and saves screenshots.

import assert from 'node:assert/strict';
import { createReadStream, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { extname, join, normalize } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { chromium } from 'playwright-core';
import { EXAMPLES } from '../playground/examples.js';
import { ROOT } from './oracle.mjs';

const SITE = join(ROOT, 'target/web/playground');
const SHOTS = join(ROOT, 'target/web/screenshots');
const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css', '.wasm': 'application/wasm', '.json': 'application/json' };

let server;
let browser;
let context;
let page;
let base;
let profile;

/** A static file server on 127.0.0.1, like `make playground`'s. */
function serve() {
  return new Promise((ready) => {
    const s = createServer((req, res) => {
      const path = normalize(decodeURIComponent(new URL(req.url, 'http://x').pathname)).replace(/^(\.\.[/\\])+/, '');
      let file = join(SITE, path);
      if (existsSync(file) && statSync(file).isDirectory()) file = join(file, 'index.html');
      if (!file.startsWith(SITE) || !existsSync(file)) {
        res.writeHead(404).end('not found');
        return;
      }
      res.writeHead(200, { 'content-type': TYPES[extname(file)] ?? 'application/octet-stream' });
      createReadStream(file).pipe(res);
    });
    s.listen(0, '127.0.0.1', () => ready(s));
  });
}

/** Waits until the page has reviewed once more than `seen` times. */
async function reviewed(seen) {
  await page.waitForFunction((n) => Number(document.body.dataset.reviews ?? 0) > n, seen);
}
const reviews = () => page.evaluate(() => Number(document.body.dataset.reviews ?? 0));

async function paste(text) {
  const seen = await reviews();
  await page.fill('#manifest', text);
  await reviewed(seen);
}

before(async () => {
  assert.ok(existsSync(join(SITE, 'pkg/jumppod_web_bg.wasm')), `${SITE} is not built: run make web`);
  const executablePath = process.env.CHROMIUM ?? '/usr/bin/chromium';
  assert.ok(existsSync(executablePath), `${executablePath} is missing: apt-get install chromium (make web-test does)`);
  server = await serve();
  base = `http://127.0.0.1:${server.address().port}/`;
  profile = mkdtempSync(join(tmpdir(), 'jumppod-chromium-'));
  mkdirSync(SHOTS, { recursive: true });
  // A fresh profile each run; playwright passes it as --user-data-dir.
  context = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    viewport: { width: 1400, height: 1100 },
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  browser = context.browser();
  page = await context.newPage();
  page.on('pageerror', (e) => console.log(`# page error: ${e.message}`));
  await page.goto(base);
  await page.waitForFunction(() => document.body.dataset.ready === 'true');
});

after(async () => {
  await context?.close();
  server?.close();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

describe('the examples', () => {
  const HEADLINE = { accepted: 'Accepted', mutated: 'Accepted after mutation', rejected: 'Rejected' };
  for (const example of EXAMPLES) {
    test(`the ${example.id} example shows "${HEADLINE[example.verdict]}"`, async () => {
      const seen = await reviews();
      await page.click(`button[data-example="${example.id}"]`);
      await reviewed(seen);
      assert.equal(await page.inputValue('#manifest'), example.manifest);
      assert.equal((await page.textContent('[data-testid=verdict]')).trim(), HEADLINE[example.verdict]);
      assert.equal(await page.getAttribute('[data-testid=verdict]', 'class'), example.verdict);
      assert.equal(await page.isVisible('[data-testid=error]'), false);
      await page.screenshot({ path: join(SHOTS, `${example.id}.png`), fullPage: false });
    });
  }

  test('pasting the legacy pod shows the filled-in resources and labels as added lines', async () => {
    await paste(EXAMPLES.find((e) => e.id === 'legacy').manifest);
    const added = await page.$$eval('#diff span.add', (spans) => spans.map((s) => s.textContent));
    for (const line of ['+       limits:', '+         cpu: 500m', '+         memory: 1Gi', '+         ephemeral-storage: 64Mi', '+     k8s.dstack.ai/project: main']) {
      assert.ok(added.includes(line), `${line} not among the added lines:\n${added.join('\n')}`);
    }
    assert.equal(await page.$$eval('#diff span.del', (s) => s.length), 0);
    assert.match(await page.textContent('[data-testid=patch]'), /"op": "add"/);
  });

  test('the under-sized pod shows one violation a line, pointing at container and resource', async () => {
    await paste(EXAMPLES.find((e) => e.id === 'undersized').manifest);
    const lines = await page.$$eval('#violations li', (items) => items.map((li) => li.textContent));
    assert.deepEqual(lines, [
      'container dstack-main-ssh-jump-pod-container › cpu: cpu request 50m is below the minimum 100m',
      'container dstack-main-ssh-jump-pod-container › memory: memory request 16Mi is below the minimum 32Mi',
    ]);
    assert.match(await page.textContent('#diff-note'), /unchanged/);
  });

  test('raising the cpu minimum in the form rejects the conforming pod, and the hint shows the new floor of the default', async () => {
    await paste(EXAMPLES[0].manifest);
    const seen = await reviews();
    await page.fill('#s-cpu\\.minimum', '750m');
    await page.fill('#s-cpu\\.default', '1');
    await reviewed(seen);
    await page.waitForFunction(() => document.getElementById('verdict').className === 'rejected');
    assert.match(await page.textContent('#violations'), /cpu request 500m is below the minimum 750m/);
    assert.equal(await page.textContent('#h-cpu\\.default'), 'default 500m · floor 750m');
    const seen2 = await reviews();
    await page.fill('#s-cpu\\.minimum', '');
    await page.fill('#s-cpu\\.default', '');
    await reviewed(seen2);
    await page.waitForFunction(() => document.getElementById('verdict').className === 'accepted');
  });

  test('an UPDATE that keeps a legacy pod`s resources is accepted with a warning', async () => {
    const legacy = EXAMPLES.find((e) => e.id === 'legacy').manifest;
    await page.check('input[name=operation][value=UPDATE]');
    await page.fill('#old', legacy);
    await paste(legacy.replace('namespace: dstack', 'namespace: dstack\n  annotations: {adopted: "yes"}'));
    assert.equal((await page.textContent('[data-testid=verdict]')).trim(), 'Accepted, with warnings');
    assert.match(await page.textContent('#warnings'), /accepted: its resources did not change/);
    await page.check('input[name=operation][value=CREATE]');
  });
});

describe('bad input gets a readable message and leaves the page usable', () => {
  const cases = [
    ['invalid YAML', 'kind: Pod\nmetadata:\n  name: [unclosed\n', /the input is not valid YAML/],
    ['a JSON array', '[{"kind": "Pod"}, {"kind": "Pod"}]', /must be one Pod, ReplicaSet, AdmissionRequest or AdmissionReview object, not an array of 2 items/],
    ['a 2 MB manifest', null, /The object is 2\.\d MB\. The API server refuses a request over 1\.5 MiB/],
  ];
  for (const [what, text, message] of cases) {
    test(what, async () => {
      const input =
        text ?? EXAMPLES[0].manifest.replace('namespace: dstack', `namespace: dstack\n  annotations:\n    padding: ${'x'.repeat(2_100_000)}`);
      await paste(input);
      assert.equal(await page.isVisible('[data-testid=error]'), true);
      assert.match(await page.textContent('[data-testid=error]'), message);
      assert.equal(await page.getAttribute('#result', 'class'), 'stale');
      if (what === 'invalid YAML') await page.screenshot({ path: join(SHOTS, 'invalid-yaml.png') });
      // Still usable: an example brings a verdict back.
      await paste(EXAMPLES[0].manifest);
      assert.equal(await page.isVisible('[data-testid=error]'), false);
      assert.equal((await page.textContent('[data-testid=verdict]')).trim(), 'Accepted');
    });
  }

  test('a quantity like 1.1.M is the policy`s rejection, naming the field', async () => {
    await paste(EXAMPLES[0].manifest.replace('cpu: 500m', 'cpu: 1.1.M'));
    assert.equal((await page.textContent('[data-testid=verdict]')).trim(), 'Rejected');
    assert.match(await page.textContent('#violations'), /› cpu: resources\.requests\.cpu "1\.1\.M" is not a valid quantity/);
  });

  test('a settings value that is not a quantity names the key and marks the field', async () => {
    await paste(EXAMPLES[0].manifest);
    const seen = await reviews();
    await page.fill('#s-memory\\.minimum', '1.1.M');
    await reviewed(seen);
    assert.match(await page.textContent('#settings-error'), /invalid setting `memory.minimum`: "1.1.M" is not a quantity/);
    assert.equal(await page.getAttribute('#s-memory\\.minimum', 'class'), 'invalid');
    const seen2 = await reviews();
    await page.fill('#s-memory\\.minimum', '');
    await reviewed(seen2);
    assert.equal(await page.isVisible('#settings-error'), false);
  });
});

describe('a whole AdmissionReview', () => {
  test('is reviewed with its own operation, as the module answers it', async () => {
    const text = readFileSync(join(ROOT, 'policy/test_data/admission_review_legacy_bare_pod_create.json'), 'utf8');
    await paste(text);
    assert.equal((await page.textContent('[data-testid=verdict]')).trim(), 'Accepted after mutation');
    assert.equal(await page.$eval('#operation-set', (f) => f.disabled), true);
    const response = JSON.parse(await page.textContent('[data-testid=response]'));
    assert.equal(response.patchType, 'JSONPatch');
  });
});

describe('the URL', () => {
  test('carries the state: a new tab opened on it shows the same verdict and settings', async () => {
    await paste(EXAMPLES.find((e) => e.id === 'request-not-limit').manifest);
    const seen = await reviews();
    await page.uncheck('#mutate');
    await reviewed(seen);
    await page.waitForFunction(() => location.hash.startsWith('#v1='));
    await page.waitForTimeout(200); // the fragment is written after compression, asynchronously
    const url = page.url();
    const other = await context.newPage();
    await other.goto(url);
    await other.waitForFunction(() => document.body.dataset.ready === 'true');
    assert.equal(await other.inputValue('#manifest'), await page.inputValue('#manifest'));
    assert.equal(await other.isChecked('#mutate'), false);
    assert.equal((await other.textContent('[data-testid=verdict]')).trim(), 'Rejected');
    assert.match(await other.textContent('#violations'), /cpu request 250m is not equal to its limit 1/);
    await other.close();
    await page.check('#mutate');
  });

  test('works offline once loaded: a reload with the network gone still reviews', async () => {
    // The service worker has kept the files since the first load.
    await page.evaluate(() => navigator.serviceWorker.ready);
    await context.setOffline(true);
    try {
      await page.reload();
      await page.waitForFunction(() => document.body.dataset.ready === 'true');
      await page.click('button[data-example="ephemeral-limit"]');
      await page.waitForFunction(() => document.getElementById('verdict').className === 'rejected');
      assert.match(await page.textContent('#violations'), /ephemeral-storage limit 1Gi must not be set/);
    } finally {
      await context.setOffline(false);
    }
  });
});

test('review latency in Chromium (recorded, not asserted)', async () => {
  const requests = {
    'conforming jump pod': readFileSync(join(ROOT, 'policy/test_data/conforming_jump_pod_create.json'), 'utf8'),
    'ordinary pod': readFileSync(join(ROOT, 'policy/test_data/ordinary_pod_create.json'), 'utf8'),
  };
  const results = {};
  for (const [name, text] of Object.entries(requests)) {
    // A fresh page each, so "first" is the first review after the module loads.
    const fresh = await context.newPage();
    await fresh.goto(`${base}#measure`);
    await fresh.waitForFunction(() => document.body.dataset.ready === 'true');
    results[name] = await fresh.evaluate((json) => {
      const request = JSON.parse(json);
      const { review } = window.playground;
      let t = performance.now();
      review(request, {});
      const first = performance.now() - t;
      // Steady: after V8 has tiered the module up. The page's clock ticks in 0.1 ms, so
      // batches of 20 reviews are timed and the median batch is taken.
      for (let i = 0; i < 500; i++) review(request, {});
      const batches = [];
      for (let b = 0; b < 25; b++) {
        t = performance.now();
        for (let i = 0; i < 20; i++) review(request, {});
        batches.push((performance.now() - t) / 20);
      }
      batches.sort((a, b) => a - b);
      return { firstMs: first, steadyMedianMs: batches[12], steadyP90Ms: batches[22], moduleLoadMs: window.playground.loadMs };
    }, text);
    await fresh.close();
  }
  const build = JSON.parse(readFileSync(join(SITE, 'build.json'), 'utf8'));
  const version = browser?.version() ?? (await context.pages()[0].evaluate(() => navigator.userAgent));
  writeFileSync(join(ROOT, 'target/web/browser-latency.json'), JSON.stringify({ chromium: version, build, results }, null, 2));
  console.log(`# chromium ${version}: ${JSON.stringify(results)}`);
  for (const r of Object.values(results)) assert.ok(r.firstMs >= 0 && r.steadyMedianMs >= 0);
});
