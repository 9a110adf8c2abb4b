# a reward model of Llama 3.1 8B, defaults elsewhere (OpenRLHF's dotted flags)
deepspeed --module openrlhf.cli.train_rm --model.model_name_or_path meta-llama/Llama-3.1-8B --ds.zero_stage 3 \
   --model.gradient_checkpointing_enable --data.dataset my/pairs
