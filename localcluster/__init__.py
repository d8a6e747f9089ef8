"""A real local Kubernetes cluster built from Go modules, for dtjob's tests and demo.

Tiers (each a superset of the previous):
  A  etcd + kube-apiserver + kube-controller-manager + kube-scheduler
  B  A + kwok managing fake GKE GPU nodes
  C  B + containerd + CNI bridge + kubelet + kube-proxy + CoreDNS (real pods)

See docs/local-cluster.md.
"""

from localcluster.cluster import Cluster, ClusterError, Tier

__all__ = ["Cluster", "ClusterError", "Tier"]
