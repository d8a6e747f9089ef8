"""The pure core: a job and what a pass reads in, a Plan of writes out. No Kubernetes client here."""
