// The playground's examples: the jump pods of the upgrade story, as a person would paste them.

const current = (resources) => `apiVersion: v1
kind: Pod
metadata:
  name: dstack-main-ssh-jump-pod-x7k2q
  namespace: dstack
  labels:
    app.kubernetes.io/name: dstack-ssh-proxy
    app.kubernetes.io/instance: dstack-main-ssh-jump-pod
    app.kubernetes.io/managed-by: dstack
    k8s.dstack.ai/project: main
spec:
  containers:
    - name: dstack-main-ssh-jump-pod-container
      image: testcontainers/sshd:1.3.0
      ports:
        - containerPort: 22
      lifecycle:
        preStop:
          exec:
            command: ["/bin/sh", "-c", "sleep 20"]
      resources:
${resources}`;

export const EXAMPLES = [
  {
    id: 'conforming',
    title: 'Conforming',
    about: 'A jump pod of the current schema, Guaranteed, with an ephemeral-storage request and a preStop hook of its own (so the policy adds no handover): accepted as is.',
    verdict: 'accepted',
    manifest: current(`        requests:
          cpu: 500m
          memory: 1Gi
          ephemeral-storage: 64Mi
        limits:
          cpu: 500m
          memory: 1Gi
`),
  },
  {
    id: 'legacy',
    title: 'BestEffort legacy pod',
    about: 'A bare pre-#3891 jump pod with no resources: at creation the policy fills in the defaults and the current labels, and adds the handover, the session drain and the users\' keys.',
    verdict: 'mutated',
    manifest: `apiVersion: v1
kind: Pod
metadata:
  name: dstack-main-ssh-jump-pod
  namespace: dstack
  labels:
    app.kubernetes.io/name: dstack-main-ssh-jump-pod
spec:
  containers:
    - name: dstack-main-ssh-jump-pod-container
      image: testcontainers/sshd:1.3.0
      ports:
        - containerPort: 22
`,
  },
  {
    id: 'undersized',
    title: 'Under-sized',
    about: 'Guaranteed, but below the floors of 100m cpu and 32Mi memory: rejected.',
    verdict: 'rejected',
    manifest: current(`        requests:
          cpu: 50m
          memory: 16Mi
          ephemeral-storage: 64Mi
        limits:
          cpu: 50m
          memory: 16Mi
`),
  },
  {
    id: 'request-not-limit',
    title: 'request ≠ limit',
    about: 'Burstable: the cpu request is below its limit, so the pod is not Guaranteed: rejected.',
    verdict: 'rejected',
    manifest: current(`        requests:
          cpu: 250m
          memory: 1Gi
          ephemeral-storage: 64Mi
        limits:
          cpu: "1"
          memory: 1Gi
`),
  },
  {
    id: 'ephemeral-limit',
    title: 'Ephemeral limit',
    about: 'An ephemeral-storage limit gets the pod evicted once exceeded: rejected.',
    verdict: 'rejected',
    manifest: current(`        requests:
          cpu: 500m
          memory: 1Gi
          ephemeral-storage: 64Mi
        limits:
          cpu: 500m
          memory: 1Gi
          ephemeral-storage: 1Gi
`),
  },
];
