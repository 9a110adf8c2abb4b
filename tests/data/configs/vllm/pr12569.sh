VLLM_USE_V1=1 vllm serve neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8 --max-model-len 2048 --gpu-memory-utilization 0.98
