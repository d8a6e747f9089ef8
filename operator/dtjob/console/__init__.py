"""`dtjob get / describe / watch / logs`: read-only views of jobs for people at a terminal (docs/console.md).

views: what a job and its pods look like as text (pure); cluster: the kubeconfig and the reads; logs: a
gang's logs, followed across gang restarts; commands: the subcommands wired to argparse.
"""
