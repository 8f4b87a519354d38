{{- /*
The webhook's serving certificate, worked out once per render (memoised in .Values, which every
template of the chart shares): the configurations' caBundle and the Secrets in
webhook-admission.yaml, the dates in NOTES.txt. Call `include "jumppod.webhookTLS" .`, then
read `.Values._jumppodWebhookTLS`:
  mode        generated | certManager | existingSecret
  caBundle    base64 of the PEM the configurations trust ("" when cert-manager injects it)
  injectFrom  cert-manager's namespace/Certificate to inject from ("" otherwise)
and, when generated, `ca`, `next`, `previous`, `leaf` (dicts of base64 PEM `crt`, `key` and
Unix `notBefore`, `notAfter`), `rotation` ("", "staged", "promoted", "new") and `dnsNames`.

Generated: a CA and a serving certificate it signs, read back from their Secrets (`lookup`, in a
Helm that reaches the cluster; `helm template` cannot, and makes new ones on each render). The
chart cannot read a certificate's dates, so it records them in the Secrets' annotations when it
makes one (a Secret of an older chart without them: its creationTimestamp and validityDays).
- The serving certificate is made again, signed by the current CA, when less than a third of
  its lifetime is left (or it expired), when the CA changed, or the Service's names did.
- The CA rotates with an overlap, over two upgrades: once less than half of its lifetime is
  left, the next CA is made and added to the caBundle (the current one still signs); at the
  next upgrade after the configurations in the cluster trust it, it becomes the current CA and
  signs a new serving certificate, and the previous CA stays in the caBundle until it expires.
  So the caBundle trusts a CA before any replica serves a certificate it signed, and trusts the
  old one while any still serves the old certificate (the kubelet updates a Secret volume
  within a minute or so). A CA that has expired is replaced at once: nothing could be refused
  that is not refused already.
*/ -}}
{{- define "jumppod.webhookTLS" -}}
{{- if not (hasKey .Values "_jumppodWebhookTLS") }}
{{- $name := include "jumppod.webhookName" . }}
{{- $ns := .Release.Namespace }}
{{- $secretName := include "jumppod.webhookSecretName" . }}
{{- $state := dict "mode" "generated" "caBundle" "" "injectFrom" "" }}
{{- if .Values.webhook.certManager.enabled }}
{{- if .Values.webhook.tls.existingSecret }}
{{- fail "webhook.certManager.enabled and webhook.tls.existingSecret: choose one (cert-manager writes the chart's own Secret)" }}
{{- end }}
{{- $_ := set $state "mode" "certManager" }}
{{- if .Values.webhook.certManager.issuerRef }}
{{- $_ := set $state "injectFrom" (printf "%s/%s" $ns $name) }}
{{- else }}
{{- /* A hook made before the injector's first pass carries the CA at once. */ -}}
{{- $caSecret := lookup "v1" "Secret" $ns (printf "%s-ca" $name) }}
{{- $_ := set $state "injectFrom" (printf "%s/%s-ca" $ns $name) }}
{{- $_ := set $state "caBundle" (dig "data" "ca.crt" "" $caSecret) }}
{{- end }}
{{- else if .Values.webhook.tls.existingSecret }}
{{- $_ := set $state "mode" "existingSecret" }}
{{- $caBundle := .Values.webhook.tls.caBundle | b64enc }}
{{- if not .Values.webhook.tls.caBundle }}
{{- $caBundle = dig "data" "ca.crt" "" (lookup "v1" "Secret" $ns $secretName) }}
{{- end }}
{{- if not $caBundle }}
{{- fail (printf "webhook.tls.caBundle is empty and the Secret %s/%s (webhook.tls.existingSecret) has no ca.crt (or cannot be read: helm template reads no cluster): give the PEM of the CA that signed its certificate" $ns $secretName) }}
{{- end }}
{{- $_ := set $state "caBundle" $caBundle }}
{{- else }}
{{- $now := now | unixEpoch | int64 }}
{{- $days := int .Values.webhook.tls.validityDays }}
{{- $life := mul $days 86400 }}
{{- $caSecret := lookup "v1" "Secret" $ns (printf "%s-ca" $name) }}
{{- $data := dig "data" (dict) $caSecret }}
{{- $ann := dig "metadata" "annotations" (dict) $caSecret }}
{{- $created := include "jumppod.unix" (dig "metadata" "creationTimestamp" "" $caSecret) | int64 }}
{{- $ca := dict }}
{{- if and (index $data "tls.crt") (index $data "tls.key") }}
{{- $notBefore := include "jumppod.unix" (index $ann "jumppod.dstack.ai/not-before" | default "") | int64 }}
{{- $notAfter := include "jumppod.unix" (index $ann "jumppod.dstack.ai/not-after" | default "") | int64 }}
{{- if not (index $ann "jumppod.dstack.ai/not-after") }}
{{- $notBefore = $created }}
{{- $notAfter = add $created $life }}
{{- end }}
{{- $ca = dict "crt" (index $data "tls.crt") "key" (index $data "tls.key") "notBefore" $notBefore "notAfter" $notAfter }}
{{- end }}
{{- $next := dict }}
{{- if and (index $data "next.crt") (index $data "next.key") }}
{{- $next = dict "crt" (index $data "next.crt") "key" (index $data "next.key") "notBefore" (include "jumppod.unix" (index $ann "jumppod.dstack.ai/next-not-before" | default "") | int64) "notAfter" (include "jumppod.unix" (index $ann "jumppod.dstack.ai/next-not-after" | default "") | int64) }}
{{- end }}
{{- $previous := dict }}
{{- if index $data "previous.crt" }}
{{- $previous = dict "crt" (index $data "previous.crt") "notAfter" (include "jumppod.unix" (index $ann "jumppod.dstack.ai/previous-not-after" | default "") | int64) }}
{{- end }}
{{- $rotation := "" }}
{{- if or (not $ca) (le (int64 $ca.notAfter) $now) }}
{{- if and $next (gt (int64 $next.notAfter) $now) }}
{{- $ca = $next }}
{{- $rotation = "promoted" }}
{{- else }}
{{- if $ca }}
{{- $rotation = "new" }}
{{- end }}
{{- $made := genCA (printf "%s-ca" $name) $days }}
{{- $ca = dict "crt" ($made.Cert | b64enc) "key" ($made.Key | b64enc) "notBefore" $now "notAfter" (add $now $life) }}
{{- end }}
{{- $next = dict }}
{{- $previous = dict }}
{{- else if and $next (include "jumppod.trustedByTheConfigurations" (dict "root" . "crt" $next.crt)) }}
{{- $previous = dict "crt" $ca.crt "notAfter" $ca.notAfter }}
{{- $ca = $next }}
{{- $next = dict }}
{{- $rotation = "promoted" }}
{{- else if and (not $next) (lt (mul 2 (sub $ca.notAfter $now)) (sub $ca.notAfter $ca.notBefore)) }}
{{- $made := genCA (printf "%s-ca-next" $name) $days }}
{{- $next = dict "crt" ($made.Cert | b64enc) "key" ($made.Key | b64enc) "notBefore" $now "notAfter" (add $now $life) }}
{{- $rotation = "staged" }}
{{- end }}
{{- if and $previous (le (int64 $previous.notAfter) $now) }}
{{- $previous = dict }}
{{- end }}
{{- /* The serving certificate. */ -}}
{{- $dnsNames := include "jumppod.webhookDnsNames" . | fromJsonArray }}
{{- $names := join "," $dnsNames }}
{{- $existing := lookup "v1" "Secret" $ns $secretName }}
{{- $leafAnn := dig "metadata" "annotations" (dict) $existing }}
{{- $leaf := dict }}
{{- if and (eq (index $leafAnn "jumppod.dstack.ai/dns-names" | default "") $names) (eq (dig "data" "ca.crt" "" $existing) $ca.crt) (dig "data" "tls.crt" "" $existing) (dig "data" "tls.key" "" $existing) }}
{{- $notBefore := include "jumppod.unix" (index $leafAnn "jumppod.dstack.ai/not-before" | default "") | int64 }}
{{- $notAfter := include "jumppod.unix" (index $leafAnn "jumppod.dstack.ai/not-after" | default "") | int64 }}
{{- if not (index $leafAnn "jumppod.dstack.ai/not-after") }}
{{- $notBefore = include "jumppod.unix" (dig "metadata" "creationTimestamp" "" $existing) | int64 }}
{{- $notAfter = add $notBefore $life }}
{{- end }}
{{- /* Kept while more than a third of its lifetime is left, and never in its last second:
  `now` is whole seconds, and x509 (Go's `crypto/x509`) refuses a certificate once the clock
  is past its notAfter, fractions included. */ -}}
{{- if and (gt $notAfter $now) (ge (mul 3 (sub $notAfter $now)) (sub $notAfter $notBefore)) }}
{{- $leaf = dict "crt" (index $existing.data "tls.crt") "key" (index $existing.data "tls.key") "notBefore" $notBefore "notAfter" $notAfter }}
{{- end }}
{{- end }}
{{- if not $leaf }}
{{- $made := genSignedCert "" nil $dnsNames $days (buildCustomCert $ca.crt $ca.key) }}
{{- $leaf = dict "crt" ($made.Cert | b64enc) "key" ($made.Key | b64enc) "notBefore" $now "notAfter" (add $now $life) }}
{{- end }}
{{- $bundle := b64dec $ca.crt }}
{{- range (list $next $previous) }}
{{- if . }}
{{- $bundle = printf "%s%s" $bundle (b64dec .crt) }}
{{- end }}
{{- end }}
{{- $_ := set $state "caBundle" (b64enc $bundle) }}
{{- $_ := set $state "ca" $ca }}
{{- $_ := set $state "next" $next }}
{{- $_ := set $state "previous" $previous }}
{{- $_ := set $state "leaf" $leaf }}
{{- $_ := set $state "rotation" $rotation }}
{{- $_ := set $state "dnsNames" $names }}
{{- end }}
{{- $_ := set .Values "_jumppodWebhookTLS" $state }}
{{- end }}
{{- end }}

{{/* Unix seconds of an RFC 3339 time ("" or unreadable: long before the epoch). */}}
{{- define "jumppod.unix" -}}
{{- if . }}{{ toDate "2006-01-02T15:04:05Z07:00" . | unixEpoch }}{{ else }}-62135596800{{ end }}
{{- end }}

{{/* A Unix time as RFC 3339, in UTC. */}}
{{- define "jumppod.rfc3339" -}}
{{- dateInZone "2006-01-02T15:04:05Z07:00" (int64 .) "UTC" }}
{{- end }}

{{/*
"true" when both configurations in the cluster trust the CA `crt` (base64 PEM) in their
caBundle: (dict "root" $ "crt" ...).
*/}}
{{- define "jumppod.trustedByTheConfigurations" -}}
{{- $name := include "jumppod.webhookConfigurationName" .root }}
{{- $pem := b64dec .crt }}
{{- $trusted := true }}
{{- range (list "MutatingWebhookConfiguration" "ValidatingWebhookConfiguration") }}
{{- $live := lookup "admissionregistration.k8s.io/v1" . "" $name }}
{{- $bundle := "" }}
{{- range (dig "webhooks" (list) $live) }}
{{- $bundle = dig "clientConfig" "caBundle" "" . }}
{{- end }}
{{- if not (contains $pem (b64dec $bundle)) }}
{{- $trusted = false }}
{{- end }}
{{- end }}
{{- if $trusted }}true{{ end }}
{{- end }}
