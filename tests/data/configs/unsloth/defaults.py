# The project's own Unsloth script that leaves every argument to Unsloth's defaults but the model.
from trl import SFTConfig, SFTTrainer
from unsloth import FastLanguageModel

model, tokenizer = FastLanguageModel.from_pretrained(model_name="Qwen/Qwen2.5-7B-Instruct")
model = FastLanguageModel.get_peft_model(model)
trainer = SFTTrainer(model=model, tokenizer=tokenizer, train_dataset=None, args=SFTConfig(max_steps=10))
