"""TensorFlow side of the runtime: strategies from TF_CONFIG, backup/restore with a SIGTERM exit, progress."""
