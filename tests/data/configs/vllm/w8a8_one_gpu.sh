# VRAM Planner's own test command: a w8a8 (int8) release of a preset's architecture on one GPU
VLLM_USE_V1=1 vllm serve neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8 --gpu-memory-utilization 0.98 --max-model-len 2048
