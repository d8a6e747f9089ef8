"""PyTorch DistributedDataParallel on the digits data set: `python -m dtjob_examples.ddp_digits`.

Target: test accuracy >= 0.95 (the default --min-accuracy).
"""

from dtjob_examples.torch_digits import main

if __name__ == "__main__":
    main("ddp")
