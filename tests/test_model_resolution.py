"""planner/formats/base.py resolve_model and planner/plan/models.py preset_of_shape: a config's model name or a
config.json resolved to a preset by a rule (a fine-tune or repack suffix, the alias table, the shape), each named
in the import's notes."""

import json
from pathlib import Path

import pytest

from planner.formats import read_config, read_lines
from planner.formats.base import ALIAS_RULE, Resolution, resolve_model
from planner.formats.hf_config import model_from_hf_config
from planner.plan.models import aliases, preset_of_shape, presets, shape_note

HF_CONFIGS = Path(__file__).parent / "data" / "hf_configs"
REPACK = "the weights' quantization is the config's, not the name's"


@pytest.mark.parametrize(
    "name, found",
    [
        ("meta-llama/Llama-3.1-8B", Resolution(preset="llama-3.1-8b")),  # the preset's own repo: no rule to name
        ("llama-3.1-8b", Resolution(preset="llama-3.1-8b")),
        # Unsloth's 4-bit repack of a repo of the alias table (unsloth/models/mapper.py maps it to Meta-Llama-3-8B)
        (
            "unsloth/llama-3-8b-bnb-4bit",
            Resolution(
                preset="llama-3.1-8b",
                rule=f"its name and meta-llama/Meta-Llama-3-8B's alike without fine-tune or repack "
                f"suffixes and Meta's prefix (both llama-3-8b; {REPACK}), then {ALIAS_RULE}",
            ),
        ),
        (
            "unsloth/Qwen2.5-7B-Instruct-unsloth-bnb-4bit",
            Resolution(
                preset="qwen2.5-7b",
                rule=f"its name and Qwen/Qwen2.5-7B's alike without fine-tune or repack suffixes "
                f"(both qwen2.5-7b; {REPACK})",
            ),
        ),
        (
            "Qwen/Qwen2-7B-Instruct",
            Resolution(
                preset="qwen2.5-7b",
                rule=f"its name and Qwen/Qwen2-7B's alike without fine-tune or repack suffixes "
                f"(both qwen2-7b; {REPACK}), then {ALIAS_RULE}",
            ),
        ),
        (
            "nvidia/Qwen3-30B-A3B-NVFP4",
            Resolution(
                preset="qwen3-30b-a3b",
                rule=f"its name and Qwen/Qwen3-30B-A3B's alike without fine-tune or repack suffixes "
                f"(both qwen3-30b-a3b; {REPACK})",
            ),
        ),
        ("HuggingFaceH4/zephyr-7b-beta", Resolution(preset="mistral-7b", rule=ALIAS_RULE)),
        ("deepseek-ai/DeepSeek-R1-0528", Resolution(preset="deepseek-v3", rule=ALIAS_RULE)),
        ("deepseek-ai/DeepSeek-V3.1-Terminus", None),  # dropped: no copy of its config.json could be read
        ("mistralai/Mistral-7B-Instruct-v0.2", None),  # no sliding window: not Mistral 7B v0.1's architecture
        ("deepseek-ai/DeepSeek-V3.2", None),  # its indexer adds weights
    ],
)
def test_resolve_model_names_its_rule(name, found):
    assert resolve_model(name) == found


def test_the_alias_table_names_presets_and_no_preset_repo():
    own = {p.hf_id.lower() for p in presets().values()}
    for alias in aliases().values():
        assert alias.preset in presets() and alias.repo.lower() not in own
        assert "config.json" in alias.evidence  # each entry says what it compared
        assert "huggingface.co/" in alias.evidence, alias.repo  # and where it read them


def test_the_import_notes_the_rule():
    imported = read_config("model_name_or_path: TheBloke/Llama-2-7B-GPTQ\nper_device_train_batch_size: 1\n")
    assert imported.plan["model"] == {"preset": "llama-2-7b"}
    assert imported.notes == (
        f"model TheBloke/Llama-2-7B-GPTQ resolved as preset llama-2-7b by its name and "
        f"meta-llama/Llama-2-7b-hf's alike without fine-tune or repack suffixes (both "
        f"llama-2-7b; {REPACK})",
    )
    assert read_lines(imported)[-1] == f"note: {imported.notes[0]}"
    exact = read_config("model_name_or_path: meta-llama/Llama-2-7b-hf\nper_device_train_batch_size: 1\n")
    assert exact.notes == ()  # the preset's own repo


@pytest.mark.parametrize("preset", sorted(p.stem for p in HF_CONFIGS.glob("*.json")))
def test_a_config_json_of_a_preset_resolves_by_shape(preset):
    assert preset_of_shape(model_from_hf_config((HF_CONFIGS / f"{preset}.json").read_text())) == preset


def test_one_field_apart_is_no_preset():
    config = json.loads((HF_CONFIGS / "mistral-7b.json").read_text())
    assert preset_of_shape(model_from_hf_config({**config, "vocab_size": 32768})) is None
    assert preset_of_shape(model_from_hf_config({**config, "sliding_window": None})) is None  # v0.2's


def test_shape_note():
    assert shape_note("config.json", "gpt2") == (
        "model config.json resolved as preset gpt2 by shape (its layers, hidden size, heads, kv heads, head dim, "
        "intermediate size, vocabulary and every other architecture field are gpt2's)"
    )
