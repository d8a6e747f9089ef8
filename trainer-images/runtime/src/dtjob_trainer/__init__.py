"""Runtime for processes inside dtjob training pods.

The top-level modules need neither torch nor tensorflow; `dtjob_trainer.pytorch` and
`dtjob_trainer.tensorflow` hold the framework-specific parts and never import each other.
"""
