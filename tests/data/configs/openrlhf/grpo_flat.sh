# group_norm (GRPO) with a rule reward and vLLM engines on GPUs of their own, flat flags (to c1ba971c)
python3 -m openrlhf.cli.train_ppo_ray \
   --actor_num_nodes 1 --actor_num_gpus_per_node 4 \
   --vllm_num_engines 2 --vllm_tensor_parallel_size 2 \
   --pretrain Qwen/Qwen2.5-7B \
   --remote_rm_url http://localhost:5000/get_reward \
   --advantage_estimator group_norm \
   --n_samples_per_prompt 8 \
   --rollout_batch_size 32 \
   --train_batch_size 256 \
   --micro_train_batch_size 2 \
   --max_len 4096 \
   --max_new_tokens 3072 \
   --init_kl_coef 0 \
   --zero_stage 2 \
   --adam_offload \
   --async_train \
   --gradient_checkpointing
