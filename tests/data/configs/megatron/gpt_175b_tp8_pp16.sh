#!/bin/bash
SAVE_DIR=$1
DATA_PREFIX=$2

LAUNCH=(
    --nproc_per_node 8
    --nnodes 128
)

ARCH=(
    --num-layers 96
    --hidden-size 12288
    --num-attention-heads 96
    --seq-length 2048
    --max-position-embeddings 2048
    --attention-backend auto
)

OPTIM=(
    --micro-batch-size 1
    --global-batch-size 1536
    --step-batch-size-schedule "0:32 3B:768 6B:1536"
    --train-iters 500000
    --fp16
    --lr 1.0e-4
    --min-lr 1.0e-5
    --lr-decay-style cosine
)

SPLIT=(
    --tensor-model-parallel-size 8
    --pipeline-model-parallel-size 16
)

DATA=(
    --data-path $DATA_PREFIX
    --vocab-file gpt2-vocab.json
    --merge-file gpt2-merges.txt
)

torchrun ${LAUNCH[@]} pretrain_gpt.py ${ARCH[@]} ${OPTIM[@]} ${SPLIT[@]} ${DATA[@]} --save $SAVE_DIR
