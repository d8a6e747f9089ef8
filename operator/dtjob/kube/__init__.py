"""The Kubernetes I/O edge: read a job's children, execute a Plan. Nothing else talks to the API."""
