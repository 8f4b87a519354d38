// The playground: the jumppod core (wasm-bindgen, --target web) judging what is pasted, in the
// page. State lives in the URL fragment, so a link carries the verdict with it.

import init, { checkSettings, judge, parseDocument, review, rules, toYaml } from './pkg/jumppod_web.js';
import { EXAMPLES } from './examples.js';

// The API server refuses a request body over etcd's request limit (1.5 MiB by default), so
// an object that large never reaches an admission policy.
const MAX_BYTES = 1.5 * 1024 * 1024;
// Past this the state is not put in the URL (it would be unwieldy to share).
const MAX_URL = 64 * 1024;
/** Bytes base64-encoded at once when the state is written to the URL: 3 x 8 KiB. */
const URL_BLOCK = 3 * 0x2000;
const SETTINGS = [
  ['cpu.minimum', 'cpu-minimum'],
  ['cpu.default', 'cpu-default'],
  ['memory.minimum', 'memory-minimum'],
  ['memory.default', 'memory-default'],
  ['ephemeralStorage.minimumRequest', 'ephemeral-storage-request'],
];

const $ = (id) => document.getElementById(id);
const el = (tag, props = {}, ...children) => {
  const node = Object.assign(document.createElement(tag), props);
  node.append(...children);
  return node;
};

const started = performance.now();
await init();
const loadMs = performance.now() - started;
const DEFAULT_RULES = rules(undefined);

let reviews = 0;
let lastMs = null;
let firstMs = null;

// ---- settings form -------------------------------------------------------------------------

for (const [key, id] of SETTINGS) {
  const rule = DEFAULT_RULES.find((r) => r.id === id);
  const input = el('input', { id: `s-${key}`, name: key, placeholder: rule.default, size: 10, spellcheck: false });
  input.dataset.key = key;
  $('settings-fields').append(
    el('label', { htmlFor: input.id }, key),
    input,
    el('small', { id: `h-${key}` }, `default ${rule.default} · floor ${rule.floor}`),
  );
}

function settingsFromForm() {
  const settings = {};
  for (const [key] of SETTINGS) {
    const value = $(`s-${key}`).value.trim();
    if (!value) continue;
    const [group, field] = key.split('.');
    (settings[group] ??= {})[field] = value;
  }
  if (!$('mutate').checked) settings.mutate = false;
  return settings;
}

function settingsToForm(settings = {}) {
  for (const [key] of SETTINGS) {
    const [group, field] = key.split('.');
    $(`s-${key}`).value = settings[group]?.[field] ?? '';
  }
  $('mutate').checked = settings.mutate !== false;
}

function showSettings(settings) {
  const check = checkSettings(settings);
  for (const [key] of SETTINGS) $(`s-${key}`).classList.toggle('invalid', !!check.message?.includes(`\`${key}\``));
  $('settings-error').hidden = check.valid;
  $('settings-error').textContent = check.valid
    ? ''
    : `${check.message}\nA policy-server refuses to start with these settings; the verdict below is what the module answers if asked anyway.`;
  const listed = check.valid ? rules(settings) : DEFAULT_RULES;
  for (const [key, id] of SETTINGS) {
    const rule = listed.find((r) => r.id === id);
    $(`h-${key}`).textContent = `default ${rule.default} · floor ${rule.floor}`;
  }
  $('rules').replaceChildren(
    ...listed.map((rule) =>
      el(
        'li',
        {},
        rule.setting ? el('code', { className: 'where' }, `${rule.setting} = ${rule.value}`) : '',
        rule.setting ? ' ' : '',
        rule.text,
        el('small', {}, ` (${rule.appliesTo})`),
      ),
    ),
  );
}

// ---- judging ---------------------------------------------------------------------------------

/** An AdmissionReview or AdmissionRequest carries its own operation and old object. */
const isReview = (doc) =>
  doc.kind === 'AdmissionReview' || (typeof doc.request === 'object' && doc.request !== null) || ('operation' in doc && 'object' in doc);

function byteLength(text) {
  return new TextEncoder().encode(text).length;
}

function evaluate(state) {
  const size = byteLength(state.manifest) + byteLength(state.old ?? '');
  if (size > MAX_BYTES) {
    throw new Error(
      `The object is ${(size / 1e6).toFixed(1)} MB. The API server refuses a request over 1.5 MiB (etcd's request limit), ` +
        'so it would never reach the policy. Nothing was reviewed.',
    );
  }
  const doc = parseDocument(state.manifest);
  if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) {
    const what = Array.isArray(doc) ? `an array of ${doc.length} items` : doc === null ? 'empty' : `a ${typeof doc}`;
    throw new Error(`The input must be one Pod, ReplicaSet, AdmissionRequest or AdmissionReview object, not ${what}.`);
  }
  const t0 = performance.now();
  const answer = isReview(doc)
    ? review(doc, state.settings)
    : judge(doc, state.settings, state.operation === 'UPDATE' ? { operation: 'UPDATE', oldObject: state.old ?? '' } : undefined);
  lastMs = performance.now() - t0;
  firstMs ??= lastMs;
  return { answer, fromReview: isReview(doc), yaml: !state.manifest.trimStart().startsWith('{') };
}

function where(v) {
  const parts = [];
  if (v.container) parts.push(el('code', { className: 'where' }, `${v.init ? 'init container' : 'container'} ${v.container}`));
  if (v.resource) parts.push(' › ', el('code', { className: 'where' }, v.resource));
  return parts;
}

function render({ answer, fromReview, yaml }) {
  $('error').hidden = true;
  $('result').classList.remove('stale');
  const verdict = $('verdict');
  verdict.className = answer.verdict;
  verdict.textContent = {
    accepted: answer.warnings.length ? 'Accepted, with warnings' : 'Accepted',
    mutated: 'Accepted after mutation',
    rejected: answer.code === 400 ? 'Rejected: the object cannot be read (400)' : 'Rejected',
  }[answer.verdict];
  $('message').textContent = answer.message ?? '';
  $('violations').replaceChildren(
    ...(answer.violations.length
      ? answer.violations.map((v) => el('li', {}, ...where(v), v.container || v.resource ? ': ' : '', v.text))
      : [el('li', {}, el('small', {}, 'none'))]),
  );
  $('warnings').replaceChildren(
    ...(answer.warnings.length ? answer.warnings.map((w) => el('li', {}, w)) : [el('li', {}, el('small', {}, 'none'))]),
  );
  $('patch').textContent = answer.patch.length ? JSON.stringify(answer.patch, null, 2) : 'no patch: the object is admitted as it is';
  $('response').textContent = JSON.stringify(answer.response, null, 2);
  const show = (o) => (o === undefined ? '' : yaml ? toYaml(o) : JSON.stringify(o, null, 2));
  const before = show(answer.object);
  const after = show(answer.patchedObject ?? answer.object);
  $('diff-note').textContent = answer.patch.length
    ? `${answer.patch.length} change${answer.patch.length > 1 ? 's' : ''}`
    : 'unchanged';
  $('diff').replaceChildren(...diffLines(before, after));
  $('operation-set').disabled = fromReview;
}

function renderError(message) {
  const box = $('error');
  box.hidden = false;
  box.textContent = message;
  $('result').classList.add('stale');
}

// ---- a line diff the eye can follow ------------------------------------------------------------

function diffLines(before, after) {
  const a = before.split('\n');
  const b = after.split('\n');
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) endA--, endB--;
  const midA = a.slice(start, endA);
  const midB = b.slice(start, endB);
  const ops = [];
  for (let i = 0; i < start; i++) ops.push([' ', a[i]]);
  if (midA.length * midB.length > 4e6) {
    midA.forEach((l) => ops.push(['-', l]));
    midB.forEach((l) => ops.push(['+', l]));
  } else {
    // Longest common subsequence over the differing middle.
    const n = midA.length;
    const m = midB.length;
    const lcs = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
    for (let i = n - 1; i >= 0; i--)
      for (let j = m - 1; j >= 0; j--)
        lcs[i][j] = midA[i] === midB[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    let i = 0;
    let j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && midA[i] === midB[j]) ops.push([' ', midA[i++]]), j++;
      else if (j < m && (i === n || lcs[i][j + 1] >= lcs[i + 1][j])) ops.push(['+', midB[j++]]);
      else ops.push(['-', midA[i++]]);
    }
  }
  for (let i = endA; i < a.length; i++) ops.push([' ', a[i]]);
  if (ops.length && ops[ops.length - 1][1] === '') ops.pop();
  // Unchanged runs longer than 2×3 context lines are folded.
  const changed = ops.map((op) => op[0] !== ' ');
  const near = (k) => changed.slice(Math.max(0, k - 3), k + 4).some(Boolean);
  const nodes = [];
  let folded = 0;
  const anyChange = changed.some(Boolean);
  ops.forEach(([sign, line], k) => {
    if (anyChange && sign === ' ' && !near(k)) {
      folded++;
      return;
    }
    if (folded) nodes.push(el('span', { className: 'skip' }, `  … ${folded} unchanged line${folded > 1 ? 's' : ''}`)), (folded = 0);
    nodes.push(el('span', { className: sign === '+' ? 'add' : sign === '-' ? 'del' : '' }, `${sign} ${line}`));
  });
  if (folded) nodes.push(el('span', { className: 'skip' }, `  … ${folded} unchanged line${folded > 1 ? 's' : ''}`));
  return nodes;
}

// ---- state in the URL --------------------------------------------------------------------------

function currentState() {
  return {
    manifest: $('manifest').value,
    operation: document.querySelector('input[name=operation]:checked').value,
    old: $('old').value,
    settings: settingsFromForm(),
  };
}

function applyState(state) {
  $('manifest').value = state.manifest ?? '';
  $('old').value = state.old ?? '';
  document.querySelector(`input[name=operation][value=${state.operation === 'UPDATE' ? 'UPDATE' : 'CREATE'}]`).checked = true;
  settingsToForm(state.settings);
}

const toBase64Url = (bytes) => btoa(String.fromCharCode(...bytes)).replaceAll('+', '-').replaceAll('/', '_').replace(/=+$/, '');
const fromBase64Url = (text) => Uint8Array.from(atob(text.replaceAll('-', '+').replaceAll('_', '/')), (c) => c.charCodeAt(0));

async function pipe(bytes, stream) {
  return new Uint8Array(await new Response(new Blob([bytes]).stream().pipeThrough(stream)).arrayBuffer());
}

async function encodeState(state) {
  const compact = { m: state.manifest, o: state.operation, s: state.settings };
  if (state.operation === 'UPDATE') compact.p = state.old;
  const bytes = await pipe(new TextEncoder().encode(JSON.stringify(compact)), new CompressionStream('deflate-raw'));
  // A block at a time (String.fromCharCode takes its bytes as arguments), each a multiple of
  // 3 bytes: the blocks' base64 then joins into the base64 of the whole, with no padding inside.
  let text = '';
  for (let i = 0; i < bytes.length; i += URL_BLOCK) text += toBase64Url(bytes.subarray(i, i + URL_BLOCK));
  return text;
}

async function decodeState(fragment) {
  const bytes = fromBase64Url(fragment);
  const compact = JSON.parse(new TextDecoder().decode(await pipe(bytes, new DecompressionStream('deflate-raw'))));
  return { manifest: compact.m, operation: compact.o, settings: compact.s, old: compact.p };
}

let pendingUrl = 0;
async function saveState(state) {
  const ticket = ++pendingUrl;
  const encoded = state.manifest.length + (state.old?.length ?? 0) <= MAX_URL ? await encodeState(state) : null;
  if (ticket !== pendingUrl) return;
  if (encoded && encoded.length <= MAX_URL) {
    history.replaceState(null, '', `#v1=${encoded}`);
    $('share-note').textContent = 'The URL holds the whole state: share it to share the verdict.';
  } else {
    history.replaceState(null, '', location.pathname);
    $('share-note').textContent = 'This input is too large to keep in the URL.';
  }
}

// ---- wiring ------------------------------------------------------------------------------------

function showStats() {
  const build = window.__build;
  const size = build
    ? `module ${(build.wasmBytes / 1024).toFixed(0)} KiB (gzip ${(build.wasmGzipBytes / 1024).toFixed(0)} KiB)`
    : 'module size unknown';
  const timing = lastMs === null ? '' : ` · first review ${firstMs.toFixed(2)} ms, this one ${lastMs.toFixed(2)} ms`;
  $('stats').textContent = `${size} · loaded in ${loadMs.toFixed(0)} ms${timing} · reviews run in this page, offline once loaded`;
}

function update({ save = true } = {}) {
  const state = currentState();
  $('old-block').hidden = state.operation !== 'UPDATE';
  try {
    showSettings(state.settings);
    render(evaluate(state));
    document.body.dataset.state = 'reviewed';
  } catch (e) {
    renderError(e instanceof Error ? e.message : String(e));
    document.body.dataset.state = 'error';
  }
  document.body.dataset.reviews = String(++reviews);
  showStats();
  if (save) saveState(state);
}

let timer = 0;
const soon = () => {
  clearTimeout(timer);
  timer = setTimeout(update, 120);
};
for (const id of ['manifest', 'old']) $(id).addEventListener('input', soon);
$('settings').addEventListener('input', soon);
for (const radio of document.querySelectorAll('input[name=operation]')) radio.addEventListener('change', () => update());

for (const example of EXAMPLES) {
  const button = el('button', { type: 'button', title: example.about }, example.title);
  button.dataset.example = example.id;
  button.addEventListener('click', () => {
    applyState({ manifest: example.manifest, operation: 'CREATE', settings: currentState().settings });
    update();
  });
  $('examples').append(button);
}

$('share').addEventListener('click', async () => {
  await saveState(currentState());
  try {
    await navigator.clipboard.writeText(location.href);
    $('share-note').textContent = 'Link copied.';
  } catch {
    $('share-note').textContent = 'Copy the address bar: it holds the whole state.';
  }
});

try {
  window.__build = await (await fetch('build.json')).json();
} catch {
  window.__build = null;
}

let restored = false;
const fragment = location.hash.match(/^#v1=(.+)$/)?.[1];
if (fragment) {
  try {
    applyState(await decodeState(fragment));
    restored = true;
  } catch {
    renderError('The link could not be read; the example below was loaded instead.');
  }
}
// `#measure` opens the page without a first review, so a measurement sees the first one.
const measuring = location.hash === '#measure';
if (!restored) applyState({ manifest: EXAMPLES[1].manifest, operation: 'CREATE', settings: {} });
if (!measuring) update({ save: restored });

if ('serviceWorker' in navigator) navigator.serviceWorker.register('sw.js').catch(() => {});

// For tests and measurements.
window.playground = { judge, review, parseDocument, checkSettings, rules, loadMs, update };
document.body.dataset.ready = 'true';
