# a LoRA SFT run of Llama 3.1 8B on 4 GPUs, in OpenRLHF's dotted flags (since ed62d0e2)
read -r -d '' training_commands <<EOF2
openrlhf.cli.train_sft \
   --model.model_name_or_path meta-llama/Llama-3.1-8B \
   --data.dataset my/sft-data \
   --data.max_len 4096 \
   --train.batch_size 64 \
   --train.micro_batch_size 2 \
   --ds.zero_stage 3 \
   --ds.param_dtype bf16 \
   --ds.lora.rank 32 \
   --ds.lora.alpha 64 \
   --ds.packing_samples \
   --model.gradient_checkpointing_enable \
   --adam.lr 2e-5 \
   --ckpt.output_dir ./out
EOF2
deepspeed --num_gpus 4 --module $training_commands
