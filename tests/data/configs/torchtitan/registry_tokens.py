# A torchtitan config registry written for the planner's tests in the shape of torchtitan's config_registry.py
# since 2026-08 (token-counted batches, model_registry(flavor, converters=...), activation-checkpointing policy
# configs, default_adamw). Not a copy of torchtitan's file.
from torchtitan.components.optimizer import default_adamw
from torchtitan.components.quantization import Float8LinearConverter
from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
from torchtitan.models.qwen3 import model_registry as qwen3_model_registry
from torchtitan.trainer import Trainer


def qwen3_8b_pp() -> Trainer.Config:
    compile_config = CompileConfig(enable=True, enable_async_tensor_parallel=True)
    return Trainer.Config(
        model_spec=qwen3_model_registry(
            "8B",
            converters=[
                Float8LinearConverter.Config(
                    model_compile_enabled=compile_config.enable and "model" in compile_config.components
                )
            ],
        ),
        optimizer=default_adamw(lr=1e-4),
        training=TrainingConfig(
            num_tokens_per_microbatch_per_dp_rank=2 * 4096,
            max_context_length=4096,
            num_tokens_per_train_step=64 * 4096,
            steps=50,
        ),
        parallelism=ParallelismConfig(
            tensor_parallel_degree=2,
            pipeline_parallel_degree=2,
            pipeline_parallel_schedule="1F1B",
            num_pp_microbatches=4,
        ),
        activation_checkpoint=FullAC.Config(),
        compile=compile_config,
    )


def qwen3_8b_selective() -> Trainer.Config:
    config = qwen3_8b_pp()
    config.activation_checkpoint = SelectiveAC.Config()
    config.parallelism = ParallelismConfig()
    config.model_spec = qwen3_model_registry("8B")
    return config
