# kwok deletes a pod by name; a kubelet deletes with the pod's UID as a precondition. By name, a stale
# deletion (kwok plays a stage once per event it saw) removes the namesake an operator created a moment
# after the old pod went: a gang restart's new pod vanishes. The UID keeps kwok's delete to the pod it saw.
s|Pods(pod.Namespace).Delete(ctx, pod.Name, deleteOpt)|Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: deleteOpt.GracePeriodSeconds, Preconditions: metav1.NewUIDPreconditions(string(pod.UID))})|
