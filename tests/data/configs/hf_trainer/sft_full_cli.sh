python sft.py \
    --model_name_or_path Qwen/Qwen2-0.5B \
    --dataset_name ./data/planner_sft \
    --packing \
    --per_device_train_batch_size 2 \
    --gradient_accumulation_steps 8 \
    --num_train_epochs 2 \
    --output_dir runs/qwen-sft
