# an IPO run of Qwen2.5 7B in OpenRLHF's flat flags (to c1ba971c), the reference's weights offloaded
deepspeed --module openrlhf.cli.train_dpo \
   --pretrain Qwen/Qwen2.5-7B-Instruct \
   --dataset my/pairs \
   --max_len 2048 \
   --train_batch_size 128 \
   --micro_train_batch_size 1 \
   --zero_stage 3 \
   --param_dtype bf16 \
   --ipo \
   --beta 0.1 \
   --ref_offload \
   --adam_offload \
   --gradient_checkpointing \
   --learning_rate 5e-7
