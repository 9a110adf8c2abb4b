#!/bin/bash
SAVE_DIR=$1
TOKENIZER_MODEL=$2
DATA_PREFIX=$3
NODES=${NODES:-"8"}

LAUNCH=(
    --nproc_per_node 8
    --nnodes $NODES
)

ARCH=(
    --use-mcore-models
    --num-layers 32
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --group-query-attention
    --num-query-groups 8
    --seq-length 4096
    --max-position-embeddings 32768
    --position-embedding-type rope
    --normalization RMSNorm
    --swiglu
    --untie-embeddings-and-output-weights
    --disable-bias-linear
)

EXPERTS=(
    --num-experts 8
    --moe-router-topk 2
    --moe-grouped-gemm
    --moe-token-dispatcher-type alltoall
)

DATA=(
    --tokenizer-type Llama2Tokenizer
    --tokenizer-model ${TOKENIZER_MODEL}
    --data-path $DATA_PREFIX
)

OPTIM=(
    --micro-batch-size 1
    --global-batch-size 512
    --train-iters 100000
    --lr 2e-4
    --bf16
)

SPLIT=(
    --tensor-model-parallel-size 1
    --pipeline-model-parallel-size 4
    --expert-model-parallel-size 8
    --use-distributed-optimizer
    --sequence-parallel
)

if [ -n "${WANDB_API_KEY:-}" ]; then
    OPTIM+=(
        --wandb-project moe-runs
    )
fi

torchrun ${LAUNCH[@]} pretrain_gpt.py \
    ${ARCH[@]} \
    ${EXPERTS[@]} \
    ${DATA[@]} \
    ${OPTIM[@]} \
    ${SPLIT[@]} \
    --save $SAVE_DIR
