# A torchtitan config registry written for the planner's tests: the Llama 3 8B run of llama3_8b.toml (in this
# folder) as a registry entry in the refactor's shape (9810191b). Not a copy of torchtitan's file.
from torchtitan.components.optimizer import OptimizersContainer
from torchtitan.config import ActivationCheckpointConfig, TrainingConfig
from torchtitan.trainer import Trainer

from . import model_registry


def llama3_8b() -> Trainer.Config:
    return Trainer.Config(
        hf_assets_path="./assets/hf/Llama-3.1-8B",
        model_spec=model_registry("8B"),
        optimizer=OptimizersContainer.Config(lr=3e-4),
        training=TrainingConfig(local_batch_size=1, seq_len=8192, steps=1000),
        activation_checkpoint=ActivationCheckpointConfig(mode="selective", selective_ac_option="op"),
    )
