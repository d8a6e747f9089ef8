"""A training script as written for Vertex AI custom jobs; it knows nothing about dtjob and runs unchanged.

It reads MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK (init_method="env://" reads them too)
and AIP_MODEL_DIR itself, shards the data with DistributedSampler, and saves the model from rank 0
only. Run it as `python -m dtjob_examples.vertex_digits` or as a plain file. Target: test accuracy
>= 0.95.

It ends with os._exit once its results are out. DistributedDataParallel keeps the process group alive
past destroy_process_group (torch 2.15: references held in C++; after `del` and gc.collect() the group's
gloo threads, its TCP loop and rank 0's TCPStore thread still run, and without DDP they are gone), so the
interpreter's teardown meets running native threads, and about one exit in 150 aborts (SIGABRT,
"terminate called without an active exception"; pytorch#190489): the pod then fails after its work is
done. Scripts written for Vertex AI meet the same; docs/frameworks.md says so.
"""

import json
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

EPOCHS = 20
BATCH_SIZE = 32
MIN_ACCURACY = 0.95


def build_model() -> nn.Sequential:
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


def local_model_dir() -> str:
    # Vertex hands out gs:// URIs and mounts buckets under /gcs/ with Cloud Storage FUSE.
    model_dir = os.environ["AIP_MODEL_DIR"]
    return "/gcs/" + model_dir[len("gs://") :] if model_dir.startswith("gs://") else model_dir


def main() -> int:
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    print(f"rank {rank} of {world_size}, master {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}")
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group("nccl", init_method="env://")
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", init_method="env://")
    torch.manual_seed(0)

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(
        x, digits.target, test_size=0.2, random_state=0, stratify=digits.target
    )
    train_set = TensorDataset(torch.from_numpy(x_train), torch.from_numpy(y_train))
    sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(train_set, batch_size=BATCH_SIZE, sampler=sampler)

    model = build_model().to(device)
    ddp_model = DistributedDataParallel(model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for features, labels in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(ddp_model(features.to(device)), labels.to(device))
            loss.backward()
            optimizer.step()

    with torch.no_grad():
        predictions = model(torch.from_numpy(x_test).to(device)).argmax(dim=1).cpu().numpy()
    accuracy = float((predictions == y_test).mean())
    print(json.dumps({"rank": rank, "epochs": EPOCHS, "test_accuracy": accuracy}), flush=True)
    if rank == 0:
        model_dir = local_model_dir()
        os.makedirs(model_dir, exist_ok=True)
        torch.save(model.state_dict(), os.path.join(model_dir, "model.pt"))
    # Leave together: a rank that destroys its process group while rank 0 is still saving can abort
    # in gloo's threads on the way out.
    dist.barrier()
    dist.destroy_process_group()
    return 0 if accuracy >= MIN_ACCURACY else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown beside the process group's threads (see above)
