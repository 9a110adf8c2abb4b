# The project's own Unsloth full fine-tuning script: FastModel with full_finetuning, a non-literal batch size.
import os

import torch
from transformers import TrainingArguments
from trl import SFTTrainer
from unsloth import FastModel

model, tokenizer = FastModel.from_pretrained(
    model_name="Qwen/Qwen3-0.6B",
    max_seq_length=256,
    load_in_4bit=False,
    full_finetuning=True,
    dtype=torch.bfloat16,
)
trainer = SFTTrainer(
    model=model,
    tokenizer=tokenizer,
    train_dataset=None,
    max_seq_length=128,
    packing=True,
    args=TrainingArguments(
        per_device_train_batch_size=int(os.environ["BATCH"]),
        gradient_accumulation_steps=2,
        num_train_epochs=1,
        bf16=True,
        optim="adamw_torch_fused",
    ),
)
