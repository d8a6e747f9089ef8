"""Example training programs for dtjob, each run as `python -m dtjob_examples.<name>`.

All train on scikit-learn's bundled digits data set (no download) and fail with exit code 1 when the
test accuracy misses the target they state.
"""
