{{/* Chart name, overridable. */}}
{{- define "tritonscale.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: the release name when it already contains the chart name ("tritonscale"). */}}
{{- define "tritonscale.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "tritonscale.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tritonscale.labels" -}}
helm.sh/chart: {{ include "tritonscale.chart" . }}
{{ include "tritonscale.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Also what the operator PodMonitor and scrape job select on. */}}
{{- define "tritonscale.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tritonscale.name" . | toYaml }}
app.kubernetes.io/instance: {{ .Release.Name | toYaml }}
{{- end }}

{{- define "tritonscale.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tritonscale.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name: name the ServiceAccount to run as when serviceAccount.create is false (the chart binds the operator's RBAC to it; the namespace's \"default\" ServiceAccount would give every pod there the operator's rights)" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository@digest when a digest is pinned, else repository:tag. */}}
{{- define "tritonscale.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The operator's metrics Service: the full name and "-metrics", within 63 characters. */}}
{{- define "tritonscale.metricsServiceName" -}}
{{- printf "%s-metrics" (include "tritonscale.fullname" . | trunc 55 | trimSuffix "-") }}
{{- end }}

{{/*
The rules the operator needs on namespaced resources, shared by the ClusterRole
(cluster-wide mode) and the per-namespace Roles. Each one was derived from the
API requests the real operator makes (tests/integration/test_rbac.py checks them).
No wildcards: `patch` is the only write besides `create` (the operator never
PUTs, never uses server-side apply, and deletes only config ConfigMaps no pod
mounts: children go by ownerReference garbage collection).
*/}}
{{/*
`, "delete"` where rbac.ownerReferencesPermissionEnforcement grants it (auto: on OpenShift).
*/}}
{{- define "tritonscale.adoptionDelete" -}}
{{- /* unset (helm upgrade --reuse-values from a release before the value existed): auto */ -}}
{{- $raw := .Values.rbac.ownerReferencesPermissionEnforcement -}}
{{- $v := ternary "auto" (toString $raw) (kindIs "invalid" $raw) -}}
{{- if or (eq $v "true") (and (eq $v "auto") (.Capabilities.APIVersions.Has "config.openshift.io/v1")) -}}
, "delete"
{{- end -}}
{{- end }}

{{- define "tritonscale.namespacedRules" -}}
# InferenceServices: Kopf lists and watches them, reads one when a child changes,
# and patches metadata (finalizer, progress and last-handled annotations).
- apiGroups: ["tritonscale.io"]
  resources: ["inferenceservices"]
  verbs: ["get", "list", "watch", "patch"]
# Conditions, replicas, endpoints, observedGeneration.
- apiGroups: ["tritonscale.io"]
  resources: ["inferenceservices/status"]
  verbs: ["patch"]
# Children carry ownerReferences with blockOwnerDeletion: true. API servers with
# the OwnerReferencesPermissionEnforcement admission plugin (e.g. OpenShift)
# require `update` on the owner's finalizers subresource to set that. No request
# goes to this subresource; the plugin checks the permission.
- apiGroups: ["tritonscale.io"]
  resources: ["inferenceservices/finalizers"]
  verbs: ["update"]
# The children: Triton Deployment (the autoscaler patches spec.replicas), Service,
# config.pbtxt ConfigMaps, PodDisruptionBudget. Watched for drift, read, created,
# merge-patched. No request deletes a Deployment, Service or PodDisruptionBudget; a
# delete grant (rbac.ownerReferencesPermissionEnforcement) is what that admission
# plugin checks before it lets an ownerReference be set on an existing object:
# adopting the children a `kubectl delete --cascade=orphan` left.
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch"{{ include "tritonscale.adoptionDelete" . }}]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch"{{ include "tritonscale.adoptionDelete" . }}]
# One immutable ConfigMap per config.pbtxt: the ones no pod template mounts any more
# (neither the Deployment's nor a ReplicaSet's it keeps as history) are deleted.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["apps"]
  resources: ["replicasets"]
  verbs: ["list"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch"{{ include "tritonscale.adoptionDelete" . }}]
# The autoscaler lists each Deployment's pods (by its selector) every tick: pods
# the scheduler cannot place (e.g. insufficient nvidia.com/gpu) stop further
# scale-up, and the cold starts of pods that became ready tune it.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list"]
# Events on InferenceServices (Kopf posts core/v1 Events; nothing here uses the
# events.k8s.io API, so it is not granted).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- end }}

{{/*
Standby replicas: more than one operator pod. Leader election is on at any replicaCount
(only the Lease holder acts: tritonscale run --leader-elect): a helm upgrade that raises
replicaCount and changes the pod template at once first scales the old ReplicaSet up (the
Deployment controller handles the scaling before the rollout), so the old pods must elect too.
With standbys the chart adds a PodDisruptionBudget, spreads the pods, and rolls with
RollingUpdate. "true" or "".
*/}}
{{- define "tritonscale.standby" -}}
{{- if gt (int .Values.replicaCount) 1 }}true{{ end }}
{{- end }}

{{/*
A Prometheus duration of the schema's form (e.g. 1m30s, 500ms) in milliseconds.
*/}}
{{- define "tritonscale.durationMs" -}}
{{- $ms := 0 -}}
{{- range regexFindAll "[0-9]+(ms|s|m|h|d|w|y)" . -1 -}}
{{- $n := regexFind "^[0-9]+" . -}}
{{- $unit := trimPrefix $n . -}}
{{- $ms = add $ms (mul (int64 $n) (get (dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000 "d" 86400000 "w" 604800000 "y" 31536000000) $unit)) -}}
{{- end -}}
{{- $ms -}}
{{- end -}}

{{- /* Fail on a name in prometheusRule.disabled that is none of the chart's alerts: for the PrometheusRule and
the scrape-config ConfigMap's copy of the rules alike. */}}
{{- define "tritonscale.checkDisabledAlerts" -}}
{{- $file := .Files.Get "files/prometheus-rules.yaml" | fromYaml }}
{{- $known := list }}
{{- range $file.groups }}{{ range .rules }}{{ $known = append $known .alert }}{{ end }}{{ end }}
{{- range .Values.prometheusRule.disabled }}
{{- if not (has . $known) }}
{{- fail (printf "prometheusRule.disabled: %s is none of the chart's alerts (%s)" . (join ", " $known)) }}
{{- end }}
{{- end }}
{{- end }}

{{- /* Fail on a prometheus.url or prometheus.allowedUrls entry that `tritonscale run` would refuse at start (a
crash loop after a clean install), saying what is wrong: the schema's pattern alone printed only the regex.
Called by every template that reads the URLs, so whichever renders first gives this message. */}}
{{- define "tritonscale.checkPrometheusUrls" -}}
{{- $urls := list }}
{{- with .Values.prometheus.url }}{{ $urls = append $urls (list "prometheus.url" .) }}{{ end }}
{{- range $i, $u := .Values.prometheus.allowedUrls }}{{ $urls = append $urls (list (printf "prometheus.allowedUrls[%d]" $i) $u) }}{{ end }}
{{- range $urls }}
{{- $name := index . 0 }}
{{- $u := index . 1 }}
{{- $rest := regexReplaceAll `^[A-Za-z][A-Za-z0-9+.-]*://` $u "" }}
{{- if not (regexMatch `^https?://` $u) }}
{{- fail (printf "%s: %q must start with http:// or https:// (e.g. http://prometheus.monitoring:9090)" $name $u) }}
{{- else if regexMatch `^[^/?#]*@` $rest }}
{{- fail (printf "%s: a URL with credentials would show in the operator's arguments; give it through prometheus.urlSecret (a Secret's key)" $name) }}
{{- else if regexMatch `[?#]` $u }}
{{- fail (printf "%s: %q must have no query or fragment: the operator appends /api/v1/query to it" $name $u) }}
{{- else if regexMatch `[\s\\]` $u }}
{{- fail (printf "%s: %q must have no space or backslash" $name $u) }}
{{- else if not (regexMatch `^https?://([A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(:[0-9]+)?(/.*)?$` $u) }}
{{- fail (printf "%s: %q must be http(s)://HOST[:PORT][/PATH], HOST a DNS name or IP address ([...] for IPv6) and PORT digits" $name $u) }}
{{- else if and (hasPrefix "[" $rest) (not (regexMatch `^\[([0-9A-Fa-f]{0,4}:){2,7}([0-9A-Fa-f]{0,4}|[0-9]+(\.[0-9]+){3})\]` $rest)) }}
{{- fail (printf "%s: %q: the host in brackets must be an IPv6 address (an IPv4 one goes without brackets)" $name $u) }}
{{- else if regexMatch `^\[[^\]]*(:::|::.*::)` $rest }}
{{- fail (printf "%s: %q: the host in brackets must be an IPv6 address (\"::\" at most once)" $name $u) }}
{{- else }}
{{- $port := regexReplaceAll "/.*$" $rest "" | regexFind ":[0-9]+$" | trimPrefix ":" }}
{{- if and $port (or (gt (len $port) 5) (lt (atoi $port) 1) (gt (atoi $port) 65535)) }}
{{- fail (printf "%s: %q: the port must be 1-65535" $name $u) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
