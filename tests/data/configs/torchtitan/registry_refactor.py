# A torchtitan config registry written for the planner's tests in the shape of torchtitan's config_registry.py
# at the registry refactor (PR #2386, 9810191b): dataclass configs with literal keyword arguments, one entry derived
# from another by attribute assignment. Not a copy of torchtitan's file.
from torchtitan.components.optimizer import OptimizersContainer, OptimizersInBackwardContainer
from torchtitan.components.quantization.float8 import Float8LinearConverter
from torchtitan.config import ActivationCheckpointConfig, CompileConfig, ParallelismConfig, TrainingConfig
from torchtitan.protocols.model_converter import ModelConvertersContainer
from torchtitan.trainer import Trainer

from . import model_registry

SEQ = 4096


def llama3_8b_tp2() -> Trainer.Config:
    return Trainer.Config(
        hf_assets_path="./assets/hf/Llama-3.1-8B",
        model_spec=model_registry("8B"),
        optimizer=OptimizersContainer.Config(lr=3e-4, implementation="foreach"),
        training=TrainingConfig(local_batch_size=2, seq_len=2 * SEQ, steps=100),
        parallelism=ParallelismConfig(tensor_parallel_degree=2, data_parallel_shard_degree=4),
        activation_checkpoint=ActivationCheckpointConfig(mode="full"),
        compile=CompileConfig(enable=True, components=["model"]),
    )


def llama3_8b_tp2_float8() -> Trainer.Config:
    config = llama3_8b_tp2()
    config.model_converters = ModelConvertersContainer.Config(
        converters=[Float8LinearConverter.Config(enable_fsdp_float8_all_gather=True)],
    )
    config.training.steps = 10
    return config


def llama3_8b_opt_in_bwd() -> Trainer.Config:
    config = llama3_8b_tp2()
    config.optimizer = OptimizersInBackwardContainer.Config(lr=3e-4)
    config.parallelism = ParallelismConfig(data_parallel_shard_degree=1)
    return config


def llama3_8b_computed() -> Trainer.Config:
    config = llama3_8b_tp2()
    if SEQ > 2048:
        config.training.steps = 5
    config.training.seq_len = len("computed") * 1024
    return config


def _helper(flavor):
    return Trainer.Config(model_spec=model_registry(flavor))


def llama3_from_helper() -> Trainer.Config:
    return _helper("8B")


def loops_forever() -> Trainer.Config:
    return loops_back()


def loops_back() -> Trainer.Config:
    return loops_forever()
