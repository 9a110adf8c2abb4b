# VRAM Planner's own test command: multi-token-prediction speculative decoding on four GPUs
# (--speculative-algo is argparse's abbreviation of --speculative-algorithm)
python3 -m sglang.launch_server --model Qwen/Qwen3-Next-80B-A3B-Instruct --tp 4 \
  --speculative-algo NEXTN --speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3
