"""A Hugging Face ``Trainer`` run followed by ``evaluate()``: a tiny BERT
classifier built from a config (no download), a small synthetic dataset,
fixed seeds, the CPU, no reporting integrations, no worker processes.

Between ``train()`` and ``evaluate()`` an unload is refused (an optimizer
has just stepped the model) and a forced one (``unload --force``) goes
through; after ``evaluate()`` the same again, then ``predict()``,
``save_model()`` and a second ``train()`` each start on the unloaded model.
Metrics (timings left out), the training log, predictions, the saved file
and the weights must be identical.
"""

import torch
import zoo
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

REQUIRES = ("transformers", "accelerate")
MODEL = "BertForSequenceClassification"
#: Metric keys that are timings (``train_runtime``, ``eval_samples_per_second``...).
TIMING_KEYS = ("runtime", "per_second")


class Sentences(Dataset):
    """Seeded token ids of random length, a label each."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(3, 64, (n, 12), generator=g)
        self.lengths = torch.randint(4, 13, (n,), generator=g)
        self.labels = torch.randint(0, 3, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict:
        mask = (torch.arange(12) < self.lengths[i]).long()
        return {"input_ids": self.ids[i] * mask, "attention_mask": mask,
                "labels": self.labels[i]}


def untimed(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not any(t in k for t in TIMING_KEYS)}


def make_trainer(workdir) -> Trainer:
    zoo.seed_all(0)
    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=32, num_labels=3)
    args = TrainingArguments(output_dir=str(workdir / "trainer"), report_to="none",
                             num_train_epochs=2, per_device_train_batch_size=8,
                             per_device_eval_batch_size=8, learning_rate=1e-3, seed=0,
                             data_seed=0, use_cpu=True, dataloader_num_workers=0,
                             save_strategy="no", logging_steps=2, disable_tqdm=True)
    return Trainer(model=BertForSequenceClassification(config), args=args,
                   train_dataset=Sentences(48, seed=1), eval_dataset=Sentences(16, seed=2))


def record_saved(ctx, trainer: Trainer) -> None:
    from safetensors.torch import load_file

    trainer.save_model()
    path = ctx.workdir / "trainer" / "model.safetensors"
    ctx.record("saved model file", path.read_bytes())
    ctx.record("saved model loaded back", load_file(path))


def run(ctx) -> None:
    trainer = make_trainer(ctx.workdir)
    ctx.step("built")
    output = trainer.train()
    ctx.record("train output", [output.global_step, output.training_loss,
                                untimed(output.metrics)])
    ctx.record("training log", [untimed(entry) for entry in trainer.state.log_history])

    ctx.step("between train and evaluate", unload=[MODEL], expect="refused")
    ctx.step("between train and evaluate, forced", unload=[MODEL], force=True,
             expect="unloaded")
    ctx.record("evaluate", untimed(trainer.evaluate()))

    ctx.step("after evaluate", unload=[MODEL], expect="refused")
    ctx.step("after evaluate, forced", unload=[MODEL], force=True, expect="unloaded")
    predictions = trainer.predict(trainer.eval_dataset)
    ctx.record("predict", [predictions.predictions, predictions.label_ids,
                           untimed(predictions.metrics)])
    ctx.step("before saving, forced", unload=[MODEL], force=True, expect="unloaded")
    record_saved(ctx, trainer)
    ctx.record("weights", trainer.model.state_dict())

    ctx.step("before training on, forced", unload=[MODEL], force=True, expect="unloaded")
    output = trainer.train()
    ctx.record("second train output", [output.global_step, output.training_loss,
                                       untimed(output.metrics)])
    ctx.record("weights after training on", trainer.model.state_dict())
