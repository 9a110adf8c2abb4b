#!/bin/bash
set -euo pipefail
export CUDA_DEVICE_MAX_CONNECTIONS=1

SAVE_DIR=${1:-"runs/llama3-8b-fp8"}
TOKENIZER=${2:-"MOCK"}

GPUS_PER_NODE=8
NUM_NODES=1
TP_SIZE=1
CP_SIZE=1
MICRO_BATCH_SIZE=1
GLOBAL_BATCH_SIZE=128
NUM_LAYERS=32
SEQ_LENGTH=8192
DTYPE="fp8"

LAUNCH=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NUM_NODES
    --master_port 29400
)

ARCH=(
    --use-mcore-models
    --num-layers $NUM_LAYERS
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --group-query-attention
    --num-query-groups 8
    --kv-channels 128
    --seq-length $SEQ_LENGTH
    --max-position-embeddings $SEQ_LENGTH
    --position-embedding-type rope
    --rotary-base 500000
    --swiglu
    --normalization RMSNorm
    --untie-embeddings-and-output-weights
    --disable-bias-linear
    --attention-backend fused
)

OPTIM=(
    --micro-batch-size $MICRO_BATCH_SIZE
    --global-batch-size $GLOBAL_BATCH_SIZE
    --train-samples 1953125000
    --lr 0.0002
    --min-lr 0.00002
    --lr-decay-style cosine
    --weight-decay 0.05
    --clip-grad 1.0
    --bf16
    --grad-reduce-in-bf16
    --cross-entropy-loss-fusion
    --empty-unused-memory-level 1
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)

LOW_PRECISION=()
if [[ "$DTYPE" == "fp8" ]]; then
    LOW_PRECISION+=(
        "--fp8-format hybrid"
        "--fp8-param-gather"
    )
fi

SPLIT=(
    --tensor-model-parallel-size $TP_SIZE
    --context-parallel-size $CP_SIZE
    --sequence-parallel
)

DATA=(
    "--mock-data"
    "--tokenizer-type NullTokenizer"
    "--vocab-size 128256"
)

OUTPUT=(
    --log-interval 10
    --save-interval 500
    --save "$SAVE_DIR"
    --load "$SAVE_DIR"
)

torchrun ${LAUNCH[@]} pretrain_gpt.py \
    ${ARCH[@]} \
    ${OPTIM[@]} \
    ${LOW_PRECISION[@]} \
    ${SPLIT[@]} \
    ${DATA[@]} \
    ${OUTPUT[@]}
