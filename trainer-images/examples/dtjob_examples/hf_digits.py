"""A Hugging Face `Trainer` on the digits data set, started the way fine-tuning scripts are:
`accelerate launch ... -m dtjob_examples.hf_digits` (examples/hf-accelerate-digits.yaml passes the
operator's PET_* variables to accelerate, which starts torchrun, which starts this script).

Nothing dtjob-specific in the training itself: the Trainer reads its rank and world from torchrun's env,
picks gloo on CPU (NCCL on GPUs), writes its own checkpoints (`checkpoint-N`) every 20 steps under the
job's shared checkpoint directory and resumes from the newest after a gang restart. The one addition is
DtjobProgressCallback, which reports progress to the operator. Target: test accuracy >= 0.95.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from dtjob_trainer.environment import TrainerEnvironment
from dtjob_trainer.integrations.huggingface import DtjobProgressCallback
from dtjob_trainer.process_end import end_process
from torch import nn
from transformers import Trainer, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

from dtjob_examples.digits import load_digits_split
from dtjob_examples.torch_digits import accuracy, argument_parser, build_model, finish


class DigitsClassifier(nn.Module):
    """torch_digits' MLP with the interface a Trainer expects: a dict of inputs in, the loss out."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = build_model()

    def forward(self, features: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        logits = self.layers(features)
        outputs = {"logits": logits}
        if labels is not None:
            outputs["loss"] = F.cross_entropy(logits, labels)
        return outputs


def run(argv: Sequence[str]) -> int:
    args = argument_parser().parse_args(argv)  # torch_digits' options (its fault injections unused)
    checkpoints = os.environ.get("DTJ_CHECKPOINT_DIR") or os.environ["AIP_CHECKPOINT_DIR"]
    data = load_digits_split()
    train_set = [
        {"features": torch.from_numpy(x), "labels": torch.tensor(y)}
        for x, y in zip(data.x_train, data.y_train, strict=True)
    ]
    arguments = TrainingArguments(
        output_dir=checkpoints,
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        optim="sgd",
        optim_args="momentum=0.9",
        lr_scheduler_type="cosine",
        weight_decay=0.0,
        save_strategy="steps",
        save_steps=args.checkpoint_every,
        save_total_limit=2,
        logging_steps=10,
        seed=args.seed,
        report_to=[],
        disable_tqdm=True,
        # Accelerate takes a multi-process run without GPUs for distributed CPU training only when told.
        use_cpu=not torch.cuda.is_available(),
    )
    trainer = Trainer(
        model=DigitsClassifier(), args=arguments, train_dataset=train_set, callbacks=[DtjobProgressCallback()]
    )
    # The newest checkpoint a gang before this one wrote (the volume is shared by every pod and attempt).
    last = get_last_checkpoint(checkpoints) if Path(checkpoints).is_dir() else None
    resumed_from = int(last.rsplit("-", 1)[1]) if last else None
    trainer.train(resume_from_checkpoint=last)
    model: Any = trainer.model
    weights = {name: tensor.detach().cpu() for name, tensor in model.layers.state_dict().items()}
    test_accuracy = accuracy(model.layers, torch.from_numpy(data.x_test), torch.from_numpy(data.y_test))
    return finish(
        args,
        TrainerEnvironment.from_environ(),
        trainer.args.process_index,
        step=trainer.state.global_step,
        resumed_from=resumed_from,
        weights=weights,
        test_accuracy=test_accuracy,
    )


if __name__ == "__main__":
    end_process(run(sys.argv[1:]))
