// A deterministic corpus of admission requests in the style of the property tests: jump pods
// of both label schemas, ordinary pods and ReplicaSets, containers and init containers with
// random subsets of cpu, memory and ephemeral-storage requests and limits drawn from pools of
// quantities (valid, invalid, equal in value but not in text), created or updated.

/** mulberry32: a small seeded PRNG, so every run generates the same corpus. */
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const POOLS = {
  cpu: ['500m', '0.5', '1', '1e0', '1000m', '100m', '0.1', '.1', '99m', '50m', '2', '-1', '1.1.M', 'half'],
  memory: ['1Gi', '1024Mi', '1073741824', '32Mi', '31Mi', '512Mi', '0.5Gi', '1G', '1e9', '0x10', '1 Mi'],
  'ephemeral-storage': ['64Mi', '67108864', '63Mi', '128Mi', '1Gi', 'lots'],
};

export function generate(count, seed = 20240611) {
  const random = rng(seed);
  const pick = (items) => items[Math.floor(random() * items.length)];
  const chance = (p) => random() < p;

  // Values that meet the contract: a pod of these, partly unset, is what the mutation fills.
  const GOOD = { cpu: ['500m', '0.5', '1', '100m'], memory: ['1Gi', '1024Mi', '32Mi', '512Mi'], 'ephemeral-storage': ['64Mi', '128Mi'] };
  let tidy = false;
  const resources = () => {
    if (tidy) {
      const out = {};
      for (const [key, pool] of Object.entries(GOOD)) {
        const value = pick(pool);
        const shape = pick(['unset', 'request', 'both']);
        if (shape === 'unset') continue;
        (out.requests ??= {})[key] = value;
        if (shape === 'both' && key !== 'ephemeral-storage') (out.limits ??= {})[key] = value;
      }
      return out;
    }
    const out = {};
    for (const [key, pool] of Object.entries(POOLS)) {
      for (const side of ['requests', 'limits']) {
        if (chance(key === 'ephemeral-storage' && side === 'limits' ? 0.2 : 0.6)) {
          out[side] ??= {};
          out[side][key] = chance(0.35) && out.requests?.[key] && side === 'limits' ? out.requests[key] : pick(pool);
        }
      }
    }
    return out;
  };
  const containers = (prefix, n) =>
    Array.from({ length: n }, (_, i) => {
      const c = { name: `${prefix}${i}`, image: 'testcontainers/sshd:1.3.0' };
      if (chance(0.9)) c.resources = resources();
      return c;
    });
  const podSpec = () => {
    const spec = { containers: containers('c', 1 + Math.floor(random() * 3)) };
    if (chance(0.3)) spec.initContainers = containers('init', 1 + Math.floor(random() * 2));
    return spec;
  };
  const metadata = () => {
    const project = pick(['main', 'ml', 'a-very-long-project-name-that-pushes-label-values-past-63-chars']);
    const schema = pick(['current', 'legacy', 'legacy-unprefixed', 'ordinary']);
    const jump = `dstack-${project}-ssh-jump-pod`;
    switch (schema) {
      case 'current':
        return {
          name: `${jump}-${Math.floor(random() * 1e5).toString(36)}`,
          labels: {
            'app.kubernetes.io/name': 'dstack-ssh-proxy',
            'app.kubernetes.io/instance': jump,
            'app.kubernetes.io/managed-by': 'dstack',
            'k8s.dstack.ai/project': project,
          },
        };
      case 'legacy':
        return { name: jump, labels: { 'app.kubernetes.io/name': jump } };
      case 'legacy-unprefixed':
        return { name: `${project}-ssh-jump-pod`, labels: { 'app.kubernetes.io/name': `${project}-ssh-jump-pod` } };
      default:
        return { name: `web-${project}`, labels: { 'app.kubernetes.io/name': 'web' } };
    }
  };

  const cases = [];
  for (let i = 0; i < count; i++) {
    tidy = chance(0.35);
    const replicaSet = chance(0.3);
    const meta = metadata();
    const object = replicaSet
      ? {
          apiVersion: 'apps/v1',
          kind: 'ReplicaSet',
          metadata: { name: meta.name, namespace: 'dstack' },
          spec: { replicas: 1, template: { metadata: { labels: meta.labels }, spec: podSpec() } },
        }
      : { apiVersion: 'v1', kind: 'Pod', metadata: { ...meta, namespace: 'dstack' }, spec: podSpec() };
    const request = {
      uid: `corpus-${i}`,
      kind: replicaSet ? { group: 'apps', version: 'v1', kind: 'ReplicaSet' } : { group: '', version: 'v1', kind: 'Pod' },
      resource: replicaSet
        ? { group: 'apps', version: 'v1', resource: 'replicasets' }
        : { group: '', version: 'v1', resource: 'pods' },
      name: object.metadata.name,
      namespace: 'dstack',
      operation: 'CREATE',
      object,
    };
    if (chance(0.3)) {
      request.operation = 'UPDATE';
      const old = structuredClone(object);
      if (chance(0.5)) {
        // The same resources, another label: an adoption-like update.
        old.metadata.labels = { ...(old.metadata.labels ?? {}), 'example.com/touched': 'yes' };
      } else {
        (replicaSet ? old.spec.template.spec : old.spec).containers = containers('c', 1);
      }
      request.oldObject = old;
    }
    cases.push(request);
  }
  return cases;
}
