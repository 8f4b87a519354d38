// The playground in a real browser: Debian's chromium driven by playwright-core. It loads the
// page from a static server on 127.0.0.1, pastes each example, checks the verdict and the
// diff, feeds it bad input, restores a shared link, goes offline, and saves screenshots.

import assert from 'node:assert/strict';
import { createReadStream, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { extname, join, normalize } from 'node:path';
import { after, afterEach, before, beforeEach, describe, test } from 'node:test';
import { inflateRawSync } from 'node:zlib';
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

/** How long one wait for the page may take before it fails, naming what it waited for. */
const WAIT_MS = 30_000;

/** Waits until `predicate(arg)` holds in `on` (the test's page unless given); fails naming `what`. */
async function until(what, predicate, arg, on = page) {
  try {
    await on.waitForFunction(predicate, arg, { timeout: WAIT_MS });
  } catch (e) {
    throw new Error(`waiting for ${what}: ${e.message}`);
  }
}

/** Waits until the page has reviewed once more than `seen` times. */
async function reviewed(seen) {
  await until(`review ${seen + 1}`, (n) => Number(document.body.dataset.reviews ?? 0) > n, seen);
}

/** A page of the playground, loaded and ready. */
async function open(url = base) {
  const fresh = await context.newPage();
  fresh.on('pageerror', (e) => console.log(`# page error: ${e.message}`));
  await fresh.goto(url);
  await until(`the page at ${url} to be ready`, () => document.body.dataset.ready === 'true', undefined, fresh);
  return fresh;
}

/** The state a playground URL holds: `#v1=` and the base64url of deflate-raw JSON. */
function stateIn(url) {
  const fragment = new URL(url).hash.match(/^#v1=(.+)$/)?.[1];
  if (!fragment) return null;
  return JSON.parse(inflateRawSync(Buffer.from(fragment, 'base64url')).toString());
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
});

// Every test starts from a page of its own, so one that fails halfway leaves nothing behind.
beforeEach(async () => {
  page = await open();
});

afterEach(async () => {
  await page?.close();
  page = undefined;
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
    await until('the verdict rejected', () => document.getElementById('verdict').className === 'rejected');
    assert.match(await page.textContent('#violations'), /cpu request 500m is below the minimum 750m/);
    assert.equal(await page.textContent('#h-cpu\\.default'), 'default 500m · floor 750m');
    const seen2 = await reviews();
    await page.fill('#s-cpu\\.minimum', '');
    await page.fill('#s-cpu\\.default', '');
    await reviewed(seen2);
    await until('the verdict accepted', () => document.getElementById('verdict').className === 'accepted');
  });

  test('an UPDATE that keeps a legacy pod`s resources is accepted with a warning', async () => {
    const legacy = EXAMPLES.find((e) => e.id === 'legacy').manifest;
    await page.check('input[name=operation][value=UPDATE]');
    await page.fill('#old', legacy);
    await paste(legacy.replace('namespace: dstack', 'namespace: dstack\n  annotations: {adopted: "yes"}'));
    assert.equal((await page.textContent('[data-testid=verdict]')).trim(), 'Accepted, with warnings');
    assert.match(await page.textContent('#warnings'), /accepted: its resources did not change/);
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
  /** Pastes `manifest`, unchecks mutate, and waits until the URL holds that state. */
  async function urlHolding(manifest) {
    await paste(manifest);
    const seen = await reviews();
    await page.uncheck('#mutate');
    await reviewed(seen);
    // The fragment is written after compression, asynchronously: wait until it holds this state.
    const holds = (url) => {
      const state = stateIn(url);
      return state?.m === manifest && state.s?.mutate === false;
    };
    let url = await page.evaluate(() => location.href);
    for (let changes = 0; !holds(url); changes++) {
      assert.ok(changes < 10, `the URL changed ${changes} times and never held the state: ${JSON.stringify(stateIn(url))}`);
      await until('the URL to change', (before) => location.href !== before, url);
      url = await page.evaluate(() => location.href);
    }
    return url;
  }

  /** Opens `url` in a new tab and checks it shows `manifest` rejected with mutate unchecked. */
  async function restores(url, manifest) {
    const other = await open(url);
    try {
      assert.equal(await other.inputValue('#manifest'), manifest);
      assert.equal(await other.isChecked('#mutate'), false);
      assert.equal((await other.textContent('[data-testid=verdict]')).trim(), 'Rejected');
      assert.match(await other.textContent('#violations'), /cpu request 250m is not equal to its limit 1/);
    } finally {
      await other.close();
    }
  }

  test('carries the state: a new tab opened on it shows the same verdict and settings', async () => {
    const manifest = EXAMPLES.find((e) => e.id === 'request-not-limit').manifest;
    await restores(await urlHolding(manifest), manifest);
  });

  test('carries a state that compresses to more than one 32 KiB block', async () => {
    // 48,000 random base64 characters in a comment: about 36 KB deflated, 48 K characters of
    // URL, past one 0x8000-byte block (43,691 characters), where the decoder once split wrongly.
    const noise = randomBytes(36000).toString('base64');
    const manifest = `${EXAMPLES.find((e) => e.id === 'request-not-limit').manifest}\n# ${noise}\n`;
    const url = await urlHolding(manifest);
    assert.ok(new URL(url).hash.length > 43691, `the URL is only ${new URL(url).hash.length} characters`);
    await restores(url, manifest);
  });

  test('works offline once loaded: a reload with the network gone still reviews', async () => {
    // The service worker has kept the files since the first load.
    await page.evaluate(() => navigator.serviceWorker.ready);
    await context.setOffline(true);
    try {
      await page.reload();
      await until('the page to be ready again offline', () => document.body.dataset.ready === 'true');
      await page.click('button[data-example="ephemeral-limit"]');
      await until('the verdict rejected', () => document.getElementById('verdict').className === 'rejected');
      assert.match(await page.textContent('#violations'), /ephemeral-storage limit 1Gi must not be set/);
    } finally {
      await context.setOffline(false);
    }
  });
});

test('review latency in Chromium (recorded, not asserted)', async () => {
  // What each request is, so the timings are known to be of reviews that answered it.
  const requests = {
    'conforming jump pod': { file: 'dstack_0_22_5_bare_jump_pod_with_kit_create.json', verdict: 'accepted' },
    'ordinary pod': { file: 'ordinary_pod_create.json', verdict: 'accepted' },
  };
  const results = {};
  for (const [name, { file, verdict }] of Object.entries(requests)) {
    const text = readFileSync(join(ROOT, 'policy/test_data', file), 'utf8');
    // A fresh page each, so "first" is the first review after the module loads.
    const fresh = await open(`${base}#measure`);
    try {
      const { verdicts, ...timings } = await fresh.evaluate((json) => {
        const request = JSON.parse(json);
        const { review } = window.playground;
        let t = performance.now();
        const answer = review(request, {});
        const first = performance.now() - t;
        // Steady: after V8 has tiered the module up. The warm-up keeps every verdict; the page's
        // clock ticks in 0.1 ms, so batches of 20 reviews are timed and the median batch is taken.
        const verdicts = new Set([answer.verdict]);
        for (let i = 0; i < 500; i++) verdicts.add(review(request, {}).verdict);
        const batches = [];
        for (let b = 0; b < 25; b++) {
          t = performance.now();
          for (let i = 0; i < 20; i++) review(request, {});
          batches.push((performance.now() - t) / 20);
        }
        batches.sort((a, b) => a - b);
        return {
          verdicts: [...verdicts],
          firstMs: first,
          steadyMedianMs: batches[12],
          steadyP90Ms: batches[22],
          moduleLoadMs: window.playground.loadMs,
        };
      }, text);
      assert.deepEqual(verdicts, [verdict], `${name}: the reviews timed answered ${verdicts}`);
      for (const [key, ms] of Object.entries(timings)) assert.ok(Number.isFinite(ms), `${name}: ${key} is ${ms}`);
      results[name] = timings;
    } finally {
      await fresh.close();
    }
  }
  const build = JSON.parse(readFileSync(join(SITE, 'build.json'), 'utf8'));
  const version = browser?.version() ?? (await page.evaluate(() => navigator.userAgent));
  writeFileSync(join(ROOT, 'target/web/browser-latency.json'), JSON.stringify({ chromium: version, build, results }, null, 2));
  console.log(`# chromium ${version}: ${JSON.stringify(results)}`);
});
