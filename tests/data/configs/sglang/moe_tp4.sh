# VRAM Planner's own test command: a hybrid-attention MoE model served on four GPUs
python3 -m sglang.launch_server --model Qwen/Qwen3-Next-80B-A3B-Instruct --tp 4
