"""The pipeline layer split: how many transformer layers each model chunk holds.

A pipeline of p stages with v virtual stages each cuts the model into p × v chunks; stage i runs chunks i, i + p,
i + 2p, …. How the layers are spread is a framework's rule (`parallelism.pipeline_split`), unless the plan lists
the layers of each chunk itself (`parallelism.pipeline_layers`):
- even: the chunks divide the layers (Megatron-LM's default: `get_num_layers_to_build` gives each stage
  num_layers ÷ p and the arguments check that p divides them);
- weighted: the embedding and the output head count as one layer each and the layers + 2 units are spread
  evenly, the first chunks taking the remainder (torchtitan `pipeline_parallel_first_stage_less_layers` = 1,
  `_last_stage_less_layers` = 1 in distributed/pipeline_parallel.py; Megatron's
  `--account-for-embedding-in-pipeline-split` and `--account-for-loss-in-pipeline-split` when the chunks divide
  the layers + 2): 126 layers in 8 chunks are 15, 16 × 6, 15;
- auto: even where the chunks divide the layers, weighted where they do not.
"""

from __future__ import annotations

from functools import lru_cache


# keyed by all the split reads; bounded, as a listed split is user input
@lru_cache(maxsize=256)
def chunk_split(
    num_layers: int, chunks: int, split: str = "auto", listed: tuple[int, ...] | None = None
) -> tuple[int, ...]:
    """Layers of each model chunk, in order (the plan has checked `split_problem` first)."""
    if listed is not None:
        return listed
    if chunks == 1 or split == "even" or (split == "auto" and num_layers % chunks == 0):
        return (num_layers // chunks,) * chunks
    base, extra = divmod(num_layers + 2, chunks)
    units = [base + (1 if i < extra else 0) for i in range(chunks)]
    units[0] -= 1
    units[-1] -= 1
    return tuple(units)


def split_problem(num_layers: int, chunks: int, split: str, listed: tuple[int, ...] | None) -> str | None:
    """Why the layers cannot be cut so (None when they can), said of the degree (or of the list when one is
    given): the rule of the plan's error message."""
    if listed is not None:
        if len(listed) != chunks:
            return f"lists {len(listed)} chunks; pipeline × virtual_stages makes {chunks}"
        if sum(listed) != num_layers:
            return f"adds up to {sum(listed)} layers; model.num_layers is {num_layers}"
        return None
    if split == "even" and num_layers % chunks:
        return (
            f"does not divide model.num_layers ({num_layers}) into {chunks} even chunks (parallelism."
            f"pipeline_split even); use weighted (the embedding and the output head count as a layer each) "
            f"or list parallelism.pipeline_layers"
        )
    uneven = split == "weighted" or (split == "auto" and num_layers % chunks)
    if uneven and chunks > 1 and chunks > (num_layers + 2) // 2:
        return (
            f"leaves a chunk without layers: model.num_layers ({num_layers}) split unevenly into {chunks} "
            f"chunks, with the embedding and the output head counted as a layer each, fills at most "
            f"{(num_layers + 2) // 2}"
        )
    return None
