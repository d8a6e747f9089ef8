"""Progress reports from training loops the runtime does not own: Hugging Face `Trainer` (huggingface)
and Lightning (lightning), each a callback that feeds a ProgressPoster. Each module imports its framework,
so import only the one you use; outside dtjob (no DTJ_PROGRESS_URL) the callbacks do nothing."""
