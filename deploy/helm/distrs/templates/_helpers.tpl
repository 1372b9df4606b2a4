{{/* Chart name, shortened to what a DNS label allows. */}}
{{- define "distrs.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: "<release>-<chart>", or the release name alone when it already contains the chart name.
Kept to 40 characters so "<fullname>-worker-<stage>" pod names stay valid.
*/}}
{{- define "distrs.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "distrs.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels every object carries. Call with (dict "ctx" $ "component" "proxy"). */}}
{{- define "distrs.labels" -}}
helm.sh/chart: {{ include "distrs.chart" .ctx }}
{{ include "distrs.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: distrs
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels that select a component's pods. Call with (dict "ctx" $ "component" "proxy"). */}}
{{- define "distrs.selectorLabels" -}}
app.kubernetes.io/name: {{ include "distrs.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- with .stage }}
distrs.io/stage: {{ . }}
{{- end }}
{{- end }}

{{/* Image reference. Call with (dict "ctx" $ "image" <override map or nil>). */}}
{{- define "distrs.image" -}}
{{- $img := mergeOverwrite (deepCopy .ctx.Values.image) (.image | default dict) }}
{{- printf "%s:%s" $img.repository (default .ctx.Chart.AppVersion $img.tag) }}
{{- end }}

{{- define "distrs.proxyName" -}}{{ include "distrs.fullname" . }}-proxy{{- end }}
{{- define "distrs.plannerName" -}}{{ include "distrs.fullname" . }}-planner{{- end }}
{{- define "distrs.redisName" -}}{{ include "distrs.fullname" . }}-redis{{- end }}
{{- define "distrs.workerPrefix" -}}{{ include "distrs.fullname" . }}-worker-{{- end }}
{{- define "distrs.leaseName" -}}{{ include "distrs.fullname" . }}-planner-leader{{- end }}

{{- define "distrs.proxyUrl" -}}
http://{{ include "distrs.proxyName" . }}.{{ .Release.Namespace }}.svc:{{ .Values.proxy.service.port }}
{{- end }}

{{- define "distrs.serviceAccountName" -}}
{{- default (include "distrs.plannerName" .) .Values.serviceAccount.name }}
{{- end }}

{{- define "distrs.authSecretName" -}}
{{- default (printf "%s-auth" (include "distrs.fullname" .)) .Values.auth.existingSecret }}
{{- end }}

{{- define "distrs.redisSecretName" -}}
{{- default (printf "%s-redis" (include "distrs.fullname" .)) .Values.redis.existingSecret }}
{{- end }}

{{/*
Where the store lives: standalone | cluster | external. redis.external.url or existingSecret alone
selects external too (the chart's behaviour before redis.mode existed), and so do
redis.external.sentinel.hosts. Contradictory or incomplete external settings fail here, naming
the value to fix.
*/}}
{{- define "distrs.redisMode" -}}
{{- $mode := .Values.redis.mode | default "standalone" }}
{{- $ext := .Values.redis.external }}
{{- $sentinel := $ext.sentinel | default dict }}
{{- $hosts := $sentinel.hosts | default list }}
{{- $url := or $ext.url $ext.existingSecret }}
{{- $source := or $url $hosts }}
{{- if and (eq $mode "cluster") $source }}
{{- fail "redis.mode cluster runs Redis Cluster in the release: unset redis.external.url/existingSecret/sentinel.hosts, or set redis.mode external with redis.external.mode cluster" }}
{{- end }}
{{- if and (eq $mode "external") (not $source) }}
{{- fail "redis.mode external needs redis.external.url or redis.external.existingSecret (or, with redis.external.mode sentinel, redis.external.sentinel.hosts and masterName)" }}
{{- end }}
{{- if and $url (eq $ext.mode "cluster") $ext.url (regexMatch "^rediss?://[^/]*/[0-9]+$" $ext.url) }}
{{- fail "redis.external.url: a Redis Cluster has only database 0; drop the /N from the URL" }}
{{- end }}
{{- if eq $ext.mode "sentinel" }}
{{- if and $url $hosts }}
{{- fail "redis.external: give the Sentinels either as redis.external.sentinel.hosts (+ masterName) or in a redis+sentinel:// URL (url or existingSecret), not both" }}
{{- end }}
{{- if and $ext.url (not (regexMatch `^rediss?\+sentinel://` $ext.url)) }}
{{- fail "redis.external.url: with redis.external.mode sentinel the URL is redis+sentinel://[:password@]host:26379[,host:26379...]/MASTER[/DB] (rediss+sentinel:// for TLS)" }}
{{- end }}
{{- if $hosts }}
{{- if not $sentinel.masterName }}
{{- fail "redis.external.sentinel.masterName is required: the name the Sentinels monitor the primary by (sentinel monitor NAME ...)" }}
{{- end }}
{{- if not (regexMatch `^[^/?#@,\s]+$` $sentinel.masterName) }}
{{- fail (printf "redis.external.sentinel.masterName %q: no '/', '?', '#', '@', ',' or spaces" $sentinel.masterName) }}
{{- end }}
{{- range $hosts }}
{{- if not (regexMatch `^([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?$` (toString .)) }}
{{- fail (printf "redis.external.sentinel.hosts: %q is not host or host:port" (toString .)) }}
{{- end }}
{{- end }}
{{- end }}
{{- else }}
{{- if $hosts }}
{{- fail "redis.external.sentinel.hosts is set: set redis.external.mode sentinel (or remove the hosts)" }}
{{- end }}
{{- if and $ext.url (regexMatch `^rediss?\+sentinel://` $ext.url) }}
{{- fail "redis.external.url names Sentinels (redis+sentinel://): set redis.external.mode sentinel" }}
{{- end }}
{{- end }}
{{- if $source }}external{{ else }}{{ $mode }}{{ end }}
{{- end }}

{{- define "distrs.redisExternal" -}}
{{- if eq (include "distrs.redisMode" .) "external" }}true{{ end }}
{{- end }}

{{/*
The Redis Cluster's StatefulSet and headless Service: a name of its own, so switching redis.mode
replaces the store instead of failing on the standalone StatefulSet's immutable fields. At most
52 characters: the StatefulSet's controller-revision-hash label (<name>-<10 chars>) must fit 63.
*/}}
{{- define "distrs.redisClusterName" -}}
{{- printf "%s-redis-cluster" (include "distrs.fullname" .) | trunc 52 | trimSuffix "-" }}
{{- end }}

{{/* DNS domain of the Redis Cluster's pods (<pod>.<this>), also the clients' seed name. */}}
{{- define "distrs.redisDomain" -}}
{{ include "distrs.redisClusterName" . }}.{{ .Release.Namespace }}.svc
{{- end }}

{{/* Env entries that give a process DISTRS_REDIS_URL (and DISTRS_REDIS_MODE, and the Sentinels'
password, where the mode needs them). */}}
{{- define "distrs.redisEnv" -}}
{{- if include "distrs.redisExternal" . }}
{{- $ext := .Values.redis.external }}
{{- $sentinel := $ext.sentinel | default dict }}
{{- if and (eq $ext.mode "sentinel") $sentinel.hosts }}
{{- /* the URL built from the values; the nodes' password from its Secret through $(VAR) */}}
{{- if $sentinel.passwordSecret }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $sentinel.passwordSecret }}
      key: {{ $sentinel.passwordKey | default "redis-password" }}
{{- end }}
- name: DISTRS_REDIS_URL
  value: {{ printf "%s://%s%s/%s/%d" (ternary "rediss+sentinel" "redis+sentinel" (default false $sentinel.tls)) (ternary ":$(REDIS_PASSWORD)@" "" (not (empty $sentinel.passwordSecret))) (join "," $sentinel.hosts) $sentinel.masterName (int (default 0 $sentinel.db)) | quote }}
{{- else }}
- name: DISTRS_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ default (printf "%s-redis-url" (include "distrs.fullname" .)) $ext.existingSecret }}
      key: {{ $ext.existingSecretKey }}
{{- end }}
{{- if eq $ext.mode "cluster" }}
- name: DISTRS_REDIS_MODE
  value: cluster
{{- else if eq $ext.mode "sentinel" }}
- name: DISTRS_REDIS_MODE
  value: sentinel
{{- if $sentinel.sentinelPasswordSecret }}
- name: DISTRS_REDIS_SENTINEL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $sentinel.sentinelPasswordSecret }}
      key: {{ $sentinel.sentinelPasswordKey | default "sentinel-password" }}
{{- end }}
{{- end }}
{{- else }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "distrs.redisSecretName" . }}
      key: redis-password
{{- if eq (include "distrs.redisMode" .) "cluster" }}
{{- /* any node is a seed: the headless Service name resolves to all of them */}}
- name: DISTRS_REDIS_URL
  value: "redis://:$(REDIS_PASSWORD)@{{ include "distrs.redisDomain" . }}:6379"
- name: DISTRS_REDIS_MODE
  value: cluster
{{- else }}
- name: DISTRS_REDIS_URL
  value: "redis://:$(REDIS_PASSWORD)@{{ include "distrs.redisName" . }}.{{ .Release.Namespace }}.svc:6379/0"
{{- end }}
{{- end }}
{{- end }}

{{/*
Ports the proxy and the planner may reach on any address when Redis is external, as a JSON list:
networkPolicy.externalRedisPorts, plus the Sentinels' ports in external sentinel mode (each
host's port, 26379 when it names none or when the Sentinels are in a URL the chart cannot read).
*/}}
{{- define "distrs.redisExternalPorts" -}}
{{- $ports := list }}
{{- range .Values.networkPolicy.externalRedisPorts }}{{ $ports = append $ports (int .) }}{{ end }}
{{- $ext := .Values.redis.external }}
{{- if eq $ext.mode "sentinel" }}
{{- $hosts := ($ext.sentinel | default dict).hosts | default list }}
{{- if not $hosts }}{{ $ports = append $ports 26379 }}{{ end }}
{{- range $hosts }}
{{- $port := regexFind ":[0-9]+$" (toString .) | trimPrefix ":" }}
{{- $ports = append $ports (int (default "26379" $port)) }}
{{- end }}
{{- end }}
{{- $ports | uniq | toJson }}
{{- end }}

{{/* Pipelines override, mounted where DISTRS_PIPELINES_FILE points. */}}
{{- define "distrs.pipelinesEnv" -}}
{{- if .Values.pipelines }}
- name: DISTRS_PIPELINES_FILE
  value: /etc/distrs/pipelines.yaml
{{- end }}
{{- end }}
{{- define "distrs.pipelinesMount" -}}
{{- if .Values.pipelines }}
- name: pipelines
  mountPath: /etc/distrs
  readOnly: true
{{- end }}
{{- end }}
{{- define "distrs.pipelinesVolume" -}}
{{- if .Values.pipelines }}
- name: pipelines
  configMap:
    name: {{ include "distrs.fullname" . }}-pipelines
{{- end }}
{{- end }}

{{/* Stage values: workers.defaults overlaid with workers.stages.<name>. Call with (dict "ctx" $ "stage" $s). */}}
{{- define "distrs.stageValues" -}}
{{- $merged := mergeOverwrite (deepCopy .ctx.Values.workers.defaults) (deepCopy .stage) }}
{{- toYaml $merged }}
{{- end }}

{{/* The seccomp profile file name on the nodes: content-addressed, so a changed profile rolls the workers. */}}
{{- define "distrs.seccompProfileFile" -}}
sandbox-{{ .Files.Get "files/seccomp/distrs-sandbox.json" | sha256sum | trunc 12 }}.json
{{- end }}

{{/* localhostProfile worker pods name in sandbox.mode seccompProfile. */}}
{{- define "distrs.seccompLocalhostProfile" -}}
{{- if eq .Values.sandbox.seccompProfile.installer "daemonset" -}}
distrs/{{ include "distrs.seccompProfileFile" . }}
{{- else -}}
{{ required "sandbox.seccompProfile.localhostProfile is required when sandbox.seccompProfile.installer is none" .Values.sandbox.seccompProfile.localhostProfile }}
{{- end }}
{{- end }}

{{/* Worker pod securityContext for sandbox.mode. Call with (dict "ctx" $ "stage" $s). */}}
{{- define "distrs.workerPodSecurity" -}}
{{- $mode := .ctx.Values.sandbox.mode }}
{{- $psc := deepCopy .ctx.Values.podSecurityContext }}
{{- if eq $mode "userNamespace" }}
{{- /* root of the pod's own user namespace only: it maps to an unprivileged range on the node */}}
{{- $_ := set $psc "runAsNonRoot" false }}
{{- $_ := set $psc "runAsUser" 0 }}
{{- $_ := set $psc "runAsGroup" 0 }}
{{- end }}
{{- if or (eq $mode "userNamespace") (eq $mode "seccompProfile") }}
{{- /* RuntimeDefault refuses pivot_root (and, without CAP_SYS_ADMIN, unshare and mount) */}}
{{- $_ := set $psc "seccompProfile" (dict "type" "Localhost" "localhostProfile" (include "distrs.seccompLocalhostProfile" .ctx)) }}
{{- else }}
{{- $_ := set $psc "seccompProfile" (dict "type" "RuntimeDefault") }}
{{- end }}
{{- with .stage.seccompProfile }}{{ $_ := set $psc "seccompProfile" . }}{{ end }}
{{- toYaml $psc }}
{{- end }}

{{/* Worker container securityContext for sandbox.mode. Call with the root context. */}}
{{- define "distrs.workerContainerSecurity" -}}
{{- $csc := deepCopy .Values.containerSecurityContext }}
{{- if eq .Values.sandbox.mode "userNamespace" }}
{{- /* namespaced capabilities (hostUsers: false): bwrap builds namespaces and mounts and brings
     up each jail's loopback, setpriv drops each run to its own uid, the worker cleans up after
     runs of other uids */}}
{{- $_ := set $csc "capabilities" (dict "drop" (list "ALL") "add" (list "CHOWN" "DAC_OVERRIDE" "FOWNER" "KILL" "NET_ADMIN" "SETGID" "SETPCAP" "SETUID" "SYS_ADMIN")) }}
{{- /* an unmasked /proc lets each jail mount a /proc of its own (the JVM, Mono, Racket and rustc read
     /proc/self/exe); Kubernetes allows it only with hostUsers: false */}}
{{- $_ := set $csc "procMount" "Unmasked" }}
{{- end }}
{{- with .Values.sandbox.appArmorProfile }}{{ $_ := set $csc "appArmorProfile" . }}{{ end }}
{{- toYaml $csc }}
{{- end }}

{{/* DISTRS_SESSION_* of the proxy, the planner and the session workers (one source: the
sessions values), so the three agree on the pool's shape and the sessions' defaults. */}}
{{- define "distrs.sessionEnv" -}}
- name: DISTRS_SESSION_ENABLED
  value: {{ .Values.sessions.enabled | quote }}
- name: DISTRS_SESSION_PER_WORKER
  value: {{ .Values.sessions.perWorker | quote }}
- name: DISTRS_SESSION_EXEC_SLOTS_PER_WORKER
  value: {{ .Values.sessions.execSlots | quote }}
- name: DISTRS_SESSION_MIN_WORKERS
  value: {{ .Values.sessions.minWorkers | quote }}
- name: DISTRS_SESSION_MAX_WORKERS
  value: {{ .Values.sessions.maxWorkers | quote }}
- name: DISTRS_SESSION_SPARES_MIN
  value: {{ .Values.sessions.spares.min | quote }}
- name: DISTRS_SESSION_SPARES_WINDOW_S
  value: {{ .Values.sessions.spares.windowSeconds | quote }}
- name: DISTRS_SESSION_IDLE_TIMEOUT_S
  value: {{ .Values.sessions.idleTimeoutSeconds | quote }}
- name: DISTRS_SESSION_MAX_OPEN_PER_TENANT
  value: {{ .Values.sessions.maxOpenPerTenant | quote }}
{{- end }}
