# The shared module builds kwok against apimachinery v0.34, which no longer names this annotation (v0.33
# did, as "kubernetes.io/initial-events-list-blueprint"): the same key, spelled out.
s|metav1\.InitialEventsListBlueprintAnnotationKey|"kubernetes.io/initial-events-list-blueprint"|g
