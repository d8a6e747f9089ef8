"""PyTorch tensor parallelism (DTensor `parallelize_module`) on the digits data set:
`python -m dtjob_examples.tp_digits`. Each rank holds half of the hidden layers' weights and every rank
trains on the same batches. Checkpoints are sharded (torch.distributed.checkpoint).

Target: test accuracy >= 0.95.
"""

from dtjob_examples.torch_digits import main

if __name__ == "__main__":
    main("tp")
