{{/* The chart's name, for the app.kubernetes.io/name label. */}}
{{- define "jumppod.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The objects' full name: 63 characters at most (a label value's limit), less the longest suffix
the chart adds ("-webhook-selfsigned", 19) so every name derived from it stays valid.
*/}}
{{- define "jumppod.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 44 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 44 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 44 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "jumppod.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object; a component's objects add app.kubernetes.io/component. */}}
{{- define "jumppod.labels" -}}
helm.sh/chart: {{ include "jumppod.chart" . }}
app.kubernetes.io/name: {{ include "jumppod.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The selector of a component's pods: (dict "root" $ "component" "controller"). */}}
{{- define "jumppod.selectorLabels" -}}
app.kubernetes.io/name: {{ include "jumppod.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "jumppod.serviceAccountName" -}}
{{- default (include "jumppod.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{/* The image: by digest when one is given, else by tag (default: the appVersion). */}}
{{- define "jumppod.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The pods' resources: the same cpu and memory as request and limit (Guaranteed QoS). */}}
{{- define "jumppod.guaranteed" -}}
requests:
  cpu: {{ .cpu | quote }}
  memory: {{ .memory | quote }}
limits:
  cpu: {{ .cpu | quote }}
  memory: {{ .memory | quote }}
{{- end }}

{{- define "jumppod.webhookName" -}}
{{- printf "%s-webhook" (include "jumppod.fullname" .) }}
{{- end }}

{{/* The webhook's serving-certificate Secret: the operator's, or the chart's (generated or cert-manager's). */}}
{{- define "jumppod.webhookSecretName" -}}
{{- default (printf "%s-tls" (include "jumppod.webhookName" .)) .Values.webhook.tls.existingSecret }}
{{- end }}

{{/* The names the API server may use for the webhook's Service; the first is the one it uses. */}}
{{- define "jumppod.webhookDnsNames" -}}
{{- $svc := include "jumppod.webhookName" . }}
{{- list (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace) | toJson }}
{{- end }}

{{/* The webhook configurations' name (both kinds): cluster-scoped, so the namespace's too. */}}
{{- define "jumppod.webhookConfigurationName" -}}
{{- printf "%s-%s" (include "jumppod.fullname" .) .Release.Namespace }}
{{- end }}

{{/*
"true" when the render reaches the cluster (helm install, upgrade, rollback; `lookup` answers):
then Helm's own hooks order the webhook configurations around the webhook (webhook-admission.yaml).
`helm template`, and Argo CD which renders with it, never do: every object once, plainly.
*/}}
{{- define "jumppod.live" -}}
{{- if or (lookup "v1" "Namespace" "" "kube-system") (lookup "v1" "Namespace" "" "default") }}true{{ end }}
{{- end }}

{{/* The controller's configuration file (YAML; `{}` when there is none). */}}
{{- define "jumppod.controllerConfig" -}}
{{- $config := deepCopy .Values.controller.config }}
{{- if .Values.policySettings }}
{{- $_ := set $config "policy_settings" .Values.policySettings }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{/* The controller's Lease: one per release, so that two releases in a namespace elect apart. */}}
{{- define "jumppod.leaseName" -}}
{{- include "jumppod.fullname" . }}
{{- end }}

{{/*
A component's topologySpreadConstraints: (dict "root" $ "component" C "constraints" LIST); a
constraint without labelSelector gets the component's pod labels.
*/}}
{{- define "jumppod.spread" -}}
{{- with .constraints -}}
topologySpreadConstraints:
{{- range . }}
{{- $constraint := . }}
{{- if not (hasKey $constraint "labelSelector") }}
{{- $constraint = merge (dict "labelSelector" (dict "matchLabels" (include "jumppod.selectorLabels" (dict "root" $.root "component" $.component) | fromYaml))) $constraint }}
{{- end }}
  - {{ toYaml $constraint | nindent 4 | trim }}
{{- end }}
{{- end }}
{{- end }}

{{/* A component's PodDisruptionBudget: (dict "root" $ "component" C "name" NAME). */}}
{{- define "jumppod.disruptionBudget" }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "jumppod.labels" .root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  minAvailable: 1
  unhealthyPodEvictionPolicy: AlwaysAllow
  selector:
    matchLabels:
      {{- include "jumppod.selectorLabels" (dict "root" .root "component" .component) | nindent 6 }}
{{- end }}
