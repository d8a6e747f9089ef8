"""PyTorch side of the runtime: process group, checkpoints, resumable sampler, the per-step session."""
