{{- /*
One webhook configuration (webhook-admission.yaml says which, when): (dict "root" $ "kind" KIND
"name" NAME "whole" BOOL ...), with "tls" (the state of _webhook-tls.tpl) when whole;
"manifest" true for the release's own object; or "hook", "weight" and "policy" for a hook of the
same name. Not whole: `webhooks: []`, which judges nothing.
*/ -}}
{{- define "jumppod.webhookConfiguration" -}}
{{- $root := .root }}
{{- $ns := $root.Release.Namespace }}
{{- $mutating := eq .kind "MutatingWebhookConfiguration" }}
apiVersion: admissionregistration.k8s.io/v1
kind: {{ .kind }}
metadata:
  # Cluster-scoped: named after the release's namespace too.
  name: {{ .name }}
  labels:
    {{- include "jumppod.labels" $root | nindent 4 }}
    app.kubernetes.io/component: webhook
  {{- $injectFrom := and .whole .tls.injectFrom }}
  {{- if or .hook .manifest $injectFrom }}
  annotations:
    {{- if .hook }}
    helm.sh/hook: {{ .hook }}
    helm.sh/hook-weight: {{ .weight | quote }}
    helm.sh/hook-delete-policy: {{ .policy }}
    # Helm sets these on the release's own objects only: a hook that takes a configuration's
    # place carries them too, so that an upgrade finds it the release's.
    meta.helm.sh/release-name: {{ $root.Release.Name }}
    meta.helm.sh/release-namespace: {{ $ns }}
    {{- end }}
    {{- if .manifest }}
    # Argo CD: after the webhook is healthy (wave 0), pruned before it.
    argocd.argoproj.io/sync-wave: "1"
    {{- end }}
    {{- if $injectFrom }}
    # cert-manager's CA injector fills in the caBundle from the Certificate's Secret.
    cert-manager.io/inject-ca-from: {{ $injectFrom }}
    {{- end }}
  {{- end }}
{{- if not .whole }}
{{- if .hook }}
# Emptied, then deleted (webhook-admission.yaml).
{{- else }}
# Empty until the post-install hook of the same name makes it whole, once the webhook is ready
# (webhook-admission.yaml); an upgrade then updates it in place.
{{- end }}
webhooks: []
{{- else }}
webhooks:
  - name: jump-pods.jumppod.dstack.ai
    admissionReviewVersions: [v1]
    clientConfig:
      {{- if .tls.caBundle }}
      caBundle: {{ .tls.caBundle }}
      {{- end }}
      service:
        name: {{ include "jumppod.webhookName" $root }}
        namespace: {{ $ns }}
        path: {{ if $mutating }}/mutate{{ else }}/validate{{ end }}
        port: {{ $root.Values.webhook.service.port }}
    rules:
      - apiGroups: [""]
        apiVersions: [v1]
        operations: [CREATE, UPDATE]
        resources: [pods]
        scope: Namespaced
      - apiGroups: [apps]
        apiVersions: [v1]
        operations: [CREATE, UPDATE]
        resources: [replicasets]
        scope: Namespaced
    failurePolicy: {{ $root.Values.webhook.failurePolicy }}
    matchPolicy: Equivalent
    namespaceSelector:
      matchExpressions:
        - key: kubernetes.io/metadata.name
          operator: NotIn
          values: [kube-system, {{ $ns }}]
        {{- with $root.Values.webhook.onlyNamespaces }}
        - key: kubernetes.io/metadata.name
          operator: In
          values:
            {{- toYaml . | nindent 12 }}
        {{- end }}
    # Only jump pods and jump-pod ReplicaSets, as the policy classifies them (the CEL of
    # `jumppod webhook-configuration`); every other object is admitted without a call.
    matchConditions:
      - name: jump-pods
        expression: "request.kind.kind == 'Pod' ? (has(object.metadata.labels) && 'app.kubernetes.io/name' in object.metadata.labels && (object.metadata.labels['app.kubernetes.io/name'] == 'dstack-ssh-proxy' || (object.metadata.labels['app.kubernetes.io/name'].endsWith('-ssh-jump-pod') && object.metadata.labels['app.kubernetes.io/name'] == (has(object.metadata.name) && object.metadata.name != '' ? object.metadata.name : has(request.name) ? request.name : '')))) : request.kind.kind == 'ReplicaSet' && has(object.spec) && has(object.spec.template) && has(object.spec.template.metadata) && (has(object.spec.template.metadata.labels) && 'app.kubernetes.io/name' in object.spec.template.metadata.labels && (object.spec.template.metadata.labels['app.kubernetes.io/name'] == 'dstack-ssh-proxy' || (object.spec.template.metadata.labels['app.kubernetes.io/name'].endsWith('-ssh-jump-pod') && object.spec.template.metadata.labels['app.kubernetes.io/name'] == (has(object.spec.template.metadata.name) ? object.spec.template.metadata.name : has(object.metadata.name) ? object.metadata.name : ''))))"
      {{- if not $mutating }}
      # Only what the mutating configuration admitted (its mark): the validating pass never
      # judges a jump pod the mutating one has not seen.
      - name: mutated-by-jumppod
        expression: "has(object.metadata.annotations) && 'jumppod.dstack.ai/mutated' in object.metadata.annotations && object.metadata.annotations['jumppod.dstack.ai/mutated'] == 'true'"
      {{- end }}
    {{- if $mutating }}
    # jumppod's mutation is called once; the validating configuration judges the object after
    # every later mutating webhook.
    reinvocationPolicy: Never
    {{- end }}
    sideEffects: None
    timeoutSeconds: 10
{{- end }}
---
{{- end }}
