"""PyTorch FSDP2 (`fully_shard`) on the digits data set: `python -m dtjob_examples.fsdp_digits`.

Checkpoints are sharded (torch.distributed.checkpoint). Target: test accuracy >= 0.95.
"""

from dtjob_examples.torch_digits import main

if __name__ == "__main__":
    main("fsdp")
