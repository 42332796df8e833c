{{/* Object names: "<release>-<chart>", cut to the 63 characters of a DNS label. */}}
{{- define "lachesis.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "lachesis.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A component's object name: "<fullname>-<component>". Call with (list $ "component"). */}}
{{- define "lachesis.component" -}}
{{- $root := index . 0 -}}
{{- printf "%s-%s" (include "lachesis.fullname" $root) (index . 1) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels every object carries. Call with (list $ "component"). */}}
{{- define "lachesis.labels" -}}
{{- $root := index . 0 -}}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
{{ include "lachesis.selectorLabels" . }}
{{- end -}}

{{/* The labels Services and workloads select a component's pods by. */}}
{{- define "lachesis.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "lachesis.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* "repository:tag", the tag defaulting to the chart's appVersion. Call with (list $ .Values.x.image). */}}
{{- define "lachesis.image" -}}
{{- $root := index . 0 -}}
{{- $image := index . 1 -}}
{{- printf "%s:%s" $image.repository (default $root.Chart.AppVersion $image.tag) -}}
{{- end -}}

{{/* A component's ServiceAccount name. Call with (list $ "component"). */}}
{{- define "lachesis.serviceAccount" -}}
{{- $root := index . 0 -}}
{{- $component := index . 1 -}}
{{- $named := index $root.Values.serviceAccounts $component -}}
{{- if $named -}}
{{- $named -}}
{{- else if $root.Values.serviceAccounts.create -}}
{{- include "lachesis.component" (list $root $component) -}}
{{- else -}}
default
{{- end -}}
{{- end -}}

{{/* The Secret and key holding a URL or token: an existing Secret, or the chart's own
made from the inline value. Call with (list $values "chartSecretName" "inlineField" "values.path"). */}}
{{- define "lachesis.secretRef" -}}
{{- $values := index . 0 -}}
{{- $ownSecret := index . 1 -}}
{{- $inline := index . 2 -}}
{{- $path := index . 3 -}}
{{- if $values.existingSecret -}}
name: {{ $values.existingSecret }}
key: {{ $values.secretKey }}
{{- else if index $values $inline -}}
name: {{ $ownSecret }}
key: {{ $values.secretKey }}
{{- else -}}
{{- fail (printf "%s: set %s.existingSecret (the name of a Secret holding it) or %s.%s" $path $path $path $inline) -}}
{{- end -}}
{{- end -}}

{{/* The Redis host the controller and the agents reach. */}}
{{- define "lachesis.redisHost" -}}
{{- printf "%s.%s.svc" (include "lachesis.component" (list . "redis")) .Release.Namespace -}}
{{- end -}}

{{/* The embedded Redis's password Secret name. */}}
{{- define "lachesis.redisSecret" -}}
{{- default (include "lachesis.component" (list . "redis")) .Values.redis.auth.existingSecret -}}
{{- end -}}

{{/* Fails rendering with a message naming the value when two values contradict each other. */}}
{{- define "lachesis.checks" -}}
{{- if and (gt (int .Values.controller.replicas) 1) (hasPrefix "sqlite" .Values.controller.database.url) -}}
{{- fail "controller.database.url: SQLite cannot be shared by several controllers; use PostgreSQL (postgresql+psycopg://...) or controller.replicas=1" -}}
{{- end -}}
{{- range $i, $m := .Values.agent.mounts -}}
{{- if and (eq $m.propagation "Bidirectional") (not $.Values.agent.privileged) -}}
{{- fail (printf "agent.mounts[%d].propagation: Bidirectional mount propagation needs agent.privileged=true (Kubernetes allows it only in privileged containers); use None to keep the mount inside the agent's pod" $i) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.redis.external.enabled (not (or .Values.redis.external.existingSecret .Values.redis.external.url)) -}}
{{- fail "redis.external: set redis.external.existingSecret (a Secret holding the controller's Redis URL) or redis.external.url" -}}
{{- end -}}
{{- end -}}

{{/* OTLP export (standard OTEL_* variables), when tracing.otlpEndpoint is set.
Call with (list $ "service.name"). */}}
{{- define "lachesis.tracingEnv" -}}
{{- $root := index . 0 -}}
{{- with $root.Values.tracing.otlpEndpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ . | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: http/protobuf
- name: OTEL_SERVICE_NAME
  value: {{ index $ 1 | quote }}
{{- end }}
{{- end -}}

{{/* Where an agent device is seen inside the pod: a raw block claim or a block device at
/dev/lachesis/NAME, a file in its own directory under /var/lib/lachesis/devices/NAME/.
Call with one entry of agent.devices. */}}
{{- define "lachesis.devicePath" -}}
{{- if or (not (empty .claim)) (eq .hostPathType "BlockDevice") -}}
{{- printf "/dev/lachesis/%s" .name -}}
{{- else -}}
{{- printf "/var/lib/lachesis/devices/%s/%s" .name (base .hostPath) -}}
{{- end -}}
{{- end -}}
