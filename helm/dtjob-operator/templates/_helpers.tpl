{{- define "dtjob.name" -}}dtjob-operator{{- end -}}
{{- define "dtjob.fullname" -}}{{ .Release.Name | trunc 40 | trimSuffix "-" }}-dtjob-operator{{- end -}}
{{/* Cluster-scoped objects: unique per release and namespace, so installs in two namespaces coexist. */}}
{{- define "dtjob.clusterName" -}}{{ printf "%s-%s" .Release.Namespace (include "dtjob.fullname" .) | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- define "dtjob.labels" -}}
app.kubernetes.io/name: {{ include "dtjob.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
{{- define "dtjob.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dtjob.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- define "dtjob.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}{{ include "dtjob.fullname" . }}{{- else -}}{{ required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}{{- end -}}
{{- end -}}
{{/* The rules the operator needs in each namespace it watches. No `*` verbs, no Secrets. */}}
{{- define "dtjob.namespacedRules" -}}
# The jobs: patched for a legacy finalizer's removal and the default LocalQueue's label (docs/kueue.md).
- apiGroups: [training.dtjob.io]
  resources: [distributedtrainingjobs]
  verbs: [get, list, watch, patch, delete]
- apiGroups: [training.dtjob.io]
  resources: [distributedtrainingjobs/status]
  verbs: [patch]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [services]
  verbs: [list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
# The job's NetworkPolicy (spec.networkPolicy): server-side apply creates it; deleted when turned off.
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [list, watch, create, patch, delete]
# The GPU NICs' ResourceClaimTemplate of a job under ManagedRDMA: server-side apply creates it.
- apiGroups: [resource.k8s.io]
  resources: [resourceclaimtemplates]
  verbs: [create, patch]
# A queued job's Kueue Workload: created by the operator, deactivated while the job is suspended, its
# podSets and queue kept the job's while it holds no quota, deleted once the job leaves Kueue, its
# resource-in-use finalizer removed once no pod of the job holds resources; its status patched to hand
# an evicted gang's quota back and to mark it Finished.
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads]
  verbs: [list, watch, create, patch, delete]
- apiGroups: [kueue.x-k8s.io]
  resources: [workloads/status]
  verbs: [patch]
# The ClusterQueue each LocalQueue hands its Workloads to: named in a queued job's Queued condition.
- apiGroups: [kueue.x-k8s.io]
  resources: [localqueues]
  verbs: [list, watch]
{{- end -}}

{{/*
Values reused from an earlier release (`helm upgrade --reuse-values`) lack the keys this release added, and
Helm does not fill them from this chart's defaults: say so, and what to run, instead of failing on a nil.
*/}}
{{- define "dtjob.checkValues" -}}
{{- range $key := list "replicas" "maxConcurrentPasses" "apiQPS" "apiBurst" "kueue" "manageCRD" "nccl" "progress" -}}
{{- if not (hasKey $.Values $key) -}}
{{- fail (printf "values.%s is missing: values reused from an earlier release (--reuse-values) lack this release's defaults; upgrade with --reset-then-reuse-values (Helm 3.14 or later) or with -f your-values.yaml" $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
