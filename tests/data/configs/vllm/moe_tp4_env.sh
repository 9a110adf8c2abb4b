# VRAM Planner's own test command: a MoE model on four GPUs, with environment settings the reader sorts
HIP_VISIBLE_DEVICES=0,1,2,3 SAFETENSORS_FAST_GPU=1 VLLM_USE_V1=1 VLLM_ROCM_USE_AITER=1 \
vllm serve Qwen/Qwen3-235B-A22B -tp 4 --gpu-memory-utilization 0.8 --max-model-len 32768 \
  --max-num-batched-tokens 32768 --no-enable-prefix-caching --swap-space 32 \
  --trust-remote-code --disable-log-requests --distributed-executor-backend mp
