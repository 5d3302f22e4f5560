{{- define "hami-place.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hami-place.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "hami-place.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "hami-place.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "hami-place.selectorLabels" -}}
app: {{ .Values.podLabelApp | default "gpu-descheduler-webhook" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "hami-place.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "hami-place.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "hami-place.serviceName" -}}
{{- printf "%s-webhook" (include "hami-place.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hami-place.tlsSecretName" -}}
{{- printf "%s-webhook-tls" (include "hami-place.fullname" .) }}
{{- end }}

{{- define "hami-place.intentKeySecretName" -}}
{{- printf "%s-intent-key" (include "hami-place.fullname" .) }}
{{- end }}

{{- define "hami-place.leaderElection" -}}
{{- if gt (int .Values.replicaCount) 1 }}true{{ else }}false{{ end }}
{{- end }}

{{/* Contradictory values stop the render. */}}
{{- define "hami-place.validate" -}}
{{- if and .Values.certManager.enabled (not (kindIs "bool" .Values.certManager.enabled)) }}
{{- fail "certManager.enabled must be a boolean" }}
{{- end }}
{{- if and .Values.certManager.enabled (.Capabilities.APIVersions.Has "cert-manager.io/v1" | not) .Values.certManager.requireCRDs }}
{{- fail "certManager.enabled=true but the cluster does not serve cert-manager.io/v1: install cert-manager, or keep certManager.enabled=false (generated certificate)" }}
{{- end }}
{{- if and (not .Values.certManager.enabled) .Values.certManager.issuerRef.name }}
{{- fail "certManager.issuerRef is set but certManager.enabled=false: the two TLS modes are exclusive" }}
{{- end }}
{{- if and (not .Values.serviceAccount.create) (not .Values.serviceAccount.name) .Values.rbac.create }}
{{- fail "serviceAccount.name is required when serviceAccount.create=false" }}
{{- end }}
{{- end }}

{{/*
The generated CA + serving certificate (certManager.enabled=false), computed once per render and
reused from the existing Secret on upgrade (lookup), so the caBundle and the Secret always agree.
*/}}
{{- define "hami-place.generatedTLS" -}}
{{- $secret := lookup "v1" "Secret" .Release.Namespace (include "hami-place.tlsSecretName" .) }}
{{- if and $secret $secret.data (index $secret.data "tls.crt") (index $secret.data "ca.crt") }}
{{- dict "crt" (index $secret.data "tls.crt") "key" (index $secret.data "tls.key") "ca" (index $secret.data "ca.crt") | toYaml }}
{{- else }}
{{- $svc := include "hami-place.serviceName" . }}
{{- $ns := .Release.Namespace }}
{{- $sans := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) }}
{{- $ca := genCA (printf "%s-ca" (include "hami-place.fullname" .)) (int .Values.tls.generatedCertDays) }}
{{- $cert := genSignedCert (printf "%s.%s.svc" $svc $ns) nil $sans (int .Values.tls.generatedCertDays) $ca }}
{{- dict "crt" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc) "ca" ($ca.Cert | b64enc) | toYaml }}
{{- end }}
{{- end }}


{{- define "hami-place.kvlist" -}}
{{- $out := list }}
{{- range $k, $v := . }}{{ $out = append $out (printf "%s=%s" $k $v) }}{{ end }}
{{- join "," $out }}
{{- end }}
