"""Model architecture (dense decoder-only transformer) and its parameter counts.

Shapes covered: Llama / Mistral / Qwen (RMSNorm, SwiGLU, RoPE, separate q/k/v projections, MHA/GQA/MQA)
and GPT-2 / GPT-NeoX / Falcon (LayerNorm, GeLU, fused qkv projection); hybrid models whose layers mix attention
with Mamba-2 or Gated DeltaNet mixers (`layer_pattern`: Qwen3-Next, Granite-4.0-H, Nemotron-H). Presets live in
one table, ``planner/data/models.yaml``; a plan's ``model.preset`` names one and its other keys override it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cache, cached_property, lru_cache
from typing import Any, Literal

from planner.errors import PlanError, bad, unknown_key
from planner.loader import DATA_DIR, load_data_file
from planner.plan.dtypes import DType
from planner.plan.validate import between, check_fields, check_int, required, resolved, text
from planner.units import parse_count

# relu2: squared-ReLU with no gate (Nemotron-H's NemotronHMLP: up_proj and down_proj only); 2 matrices like gelu
Mlp = Literal["swiglu", "gelu", "relu2"]
# A gelu MLP's activation as transformers names it (activations.py ACT2CLS): gelu_new is NewGELUActivation, the tanh
# formula written as separate elementwise ops (HF GPT-2's default activation_function, Phi, GPT-J); gelu and
# gelu_pytorch_tanh are one fused kernel each (nn.functional.gelu, approximate="tanh": GPT-NeoX, Falcon, StarCoder)
Activation = Literal["gelu_new", "gelu", "gelu_pytorch_tanh"]
# How `layer_pattern` reads (planner README, "Hybrid models"): mixer_ffn, one character per layer that holds a
# mixer and the FFN (HF layer_types of Qwen3-Next / Granite-4.0-H): `*` attention, `M` Mamba-2, `G` Gated DeltaNet;
# one_sublayer, Nemotron-H's hybrid_override_pattern verbatim: one block per character with ONE sublayer, `*`
# attention, `M` Mamba-2, `-` MLP (HF nemotron_h configuration: pattern_mapping).
PatternStyle = Literal["mixer_ffn", "one_sublayer"]
PATTERN_CHARS = {"mixer_ffn": "*MG", "one_sublayer": "*M-"}
RECURRENT = "MG"  # the pattern characters of recurrent mixers
# Chunk lengths of the recurrent scans' chunked (training / prefill) kernels: mamba_ssm's Mamba2 default
# chunk_size 256 (Granite-4.0-H's mamba_chunk_size; Nemotron-H uses 128), fla's chunk_gated_delta_rule 64
# (fla/ops/gated_delta_rule/chunk.py, fixed)
MAMBA_CHUNK = 256
GDN_CHUNK = 64
Norm = Literal["rmsnorm", "layernorm"]

PRESETS_PATH = DATA_DIR / "models.yaml"
ALIASES_PATH = DATA_DIR / "model_aliases.yaml"

# Bounds that reject nonsense rather than print it (the largest public models are far inside them).
MAX_LAYERS = 1_024
MAX_HIDDEN = 131_072
MAX_HEADS = 4_096
MAX_HEAD_DIM = 4_096
MAX_INTERMEDIATE = 1_048_576
MAX_VOCAB = 4_194_304
MIN_APPROX_PARAMS, MAX_APPROX_PARAMS = 50_000_000, 5_000_000_000_000  # model.params
MAX_CONTEXT = 1 << 30  # model.context_window (the longest public windows are ~10 M tokens)


@dataclass(frozen=True, kw_only=True)
class ParamCounts:
    """Parameters of each piece of the model (elements, not bytes)."""

    embedding: int  # token embedding table, vocab × hidden
    attention: int  # one layer: q, k, v, o projections (+ biases)
    mlp: int  # one dense layer: up/gate/down or fc/proj (+ biases)
    norms: int  # one layer: its two norms
    final_norm: int
    lm_head: int  # 0 when tied to the embedding
    num_layers: int
    expert: int = 0  # one expert MLP of an MoE layer
    experts: int = 0  # all routed experts of one MoE layer (on this rank)
    shared: int = 0  # the always-on shared experts of one MoE layer
    router: int = 0  # one MoE layer's router
    moe_layers: int = 0
    active_experts: int = 0  # routed experts a token passes through
    mamba: int = 0  # one Mamba-2 mixer of a hybrid model (on this rank)
    gdn: int = 0  # one Gated DeltaNet mixer of a hybrid model (on this rank)
    pattern: str = ""  # model.layer_pattern; "": every layer is attention + FFN
    one_sublayer: bool = False  # the pattern's blocks hold one sublayer and one norm each (Nemotron-H)

    @property
    def layer(self) -> int:
        """One dense layer."""
        return self.attention + self.mlp + self.norms

    def layer_norms(self, i: int) -> int:
        """Norm parameters of layer i (a one-sublayer block has one norm)."""
        return self.norms // 2 if self.one_sublayer else self.norms

    def layer_at(self, i: int) -> int:
        """Parameters of layer i (0-based): its mixer, its FFN (dense layers first, then MoE) and its norms."""
        moe = i >= self.num_layers - self.moe_layers
        if not self.pattern:
            return self.moe_layer if moe else self.layer
        kind = self.pattern[i]
        mixer = {"*": self.attention, "M": self.mamba, "G": self.gdn, "-": 0}[kind]
        ffn = self.experts + self.shared + self.router if moe else self.mlp
        if self.one_sublayer and kind != "-":
            ffn = 0
        return mixer + ffn + self.layer_norms(i)

    @property
    def moe_layer(self) -> int:
        return self.attention + self.experts + self.shared + self.router + self.norms

    @cached_property  # a hybrid's layers one by one; the counts are shared (param_counts is cached) and frozen
    def layers(self) -> int:
        if self.pattern:
            return sum(self.layer_at(i) for i in range(self.num_layers))
        return self.layer * (self.num_layers - self.moe_layers) + self.moe_layer * self.moe_layers

    @property
    def total(self) -> int:
        return self.embedding + self.layers + self.final_norm + self.lm_head

    @property
    def active(self) -> int:
        """Parameters one token passes through (MoE: the routed top-k and the shared experts)."""
        inactive = self.moe_layers * (self.experts - self.active_experts * self.expert)
        return self.total - inactive


@dataclass(frozen=True, kw_only=True)
class Model:
    """Architecture of a dense decoder-only transformer (the `model:` block of a plan)."""

    num_layers: int = field(metadata=between(1, MAX_LAYERS))
    """Transformer layers (blocks). Default: required (or from `preset`, or guessed from `params`)."""
    hidden_size: int = field(metadata=between(1, MAX_HIDDEN))
    """Width of the residual stream (the embedding dimension). Default: required (or from `preset`, or guessed from
    `params`)."""
    num_attention_heads: int = field(metadata=between(1, MAX_HEADS))
    """Query heads per attention layer. Default: required (or from `preset`, or guessed from `params`)."""
    intermediate_size: int = field(metadata=between(1, MAX_INTERMEDIATE))
    """Width of a dense MLP's hidden layer (and of each expert's, unless `moe_intermediate_size` is given). Default:
    required (or from `preset`, or guessed from `params`)."""
    vocab_size: int = field(metadata=between(1, MAX_VOCAB))
    """Tokens in the vocabulary: rows of the embedding table and of the output head. Default: required (or from
    `preset`, or guessed from `params`)."""
    num_kv_heads: int = resolved(between(1, MAX_HEADS))
    """Key/value heads per attention layer: fewer than the query heads is GQA, one is MQA; it must divide
    `num_attention_heads`. Default: `num_attention_heads` (MHA)."""
    head_dim: int = resolved(between(1, MAX_HEAD_DIM))
    """Width of one attention head (under latent attention, the per-head non-RoPE query/key width). Default:
    `hidden_size / num_attention_heads`."""
    mlp: Mlp = "swiglu"
    """The MLP: `swiglu` (Llama family: separate q/k/v and gate/up linears), `gelu` (GPT-2/NeoX: fused qkv, two
    matrices) or `relu2` (Nemotron-H: squared ReLU, up and down only)."""
    activation: Activation | None = None
    """A `gelu` MLP's activation, as transformers names it (config.json `hidden_act`; GPT-2's `activation_function`,
    Falcon's `activation`): `gelu_new` (HF GPT-2, Phi, GPT-J: the tanh formula as separate elementwise ops, each
    keeping its input for the backward), `gelu` (exact) or `gelu_pytorch_tanh` (one fused kernel each: GPT-NeoX,
    Pythia, Falcon, StarCoder). Default: `gelu_new` for a `gelu` MLP (GPT2Config's default, what `vram-planner
    measure` builds); unset for other MLPs."""
    norm: Norm = "rmsnorm"
    """The layer norm: `rmsnorm` (Llama family) or `layernorm` (GPT-2, NeoX: with a bias)."""
    tie_embeddings: bool = False
    """The output head shares the embedding table's weights (no separate lm_head)."""
    bias: bool = False
    """Biases on every linear layer (GPT-2, GPT-NeoX)."""
    num_experts: int = field(default=0, metadata=between(0, 4_096))
    """Mixture of experts (Mixtral, Qwen3-MoE, DeepSeek layouts): routed expert MLPs per MoE layer; 0 is a dense model.
    """
    experts_per_token: int = field(default=0, metadata=between(0, 4_096))
    """MoE: routed experts each token passes through (top-k); from 1 to `num_experts`."""
    moe_intermediate_size: int | None = field(default=None, metadata=between(1, MAX_INTERMEDIATE))
    """MoE: width of each expert's MLP hidden layer. Default: `intermediate_size`."""
    shared_experts: int = field(default=0, metadata=between(0, 64))
    """MoE: always-on experts of `moe_intermediate_size` every token passes through besides the routed ones (DeepSeek,
    Qwen-MoE)."""
    first_dense_layers: int = field(default=0, metadata=between(0, MAX_LAYERS))
    """MoE: the first layers keep a dense MLP of `intermediate_size` (DeepSeek); the rest are MoE layers."""
    sliding_window: int | None = field(default=None, metadata=between(1, 16_777_216))
    """Sliding-window attention: layers attend to the last this many tokens (the KV cache keeps only them). Default:
    none (full attention)."""
    global_attention_every: int = field(default=0, metadata=between(0, MAX_LAYERS))
    """With `sliding_window`: every n-th layer attends globally instead (Gemma 2: 2, Gemma 3: 6); 0: none does."""
    kv_lora_rank: int | None = field(default=None, metadata=between(1, MAX_HIDDEN))
    """Multi-head latent attention (DeepSeek-V2/V3): keys and values come from a shared latent of this rank, which is
    what the KV cache holds; `head_dim` is then the non-RoPE query/key dim per head. Default: none (plain attention)."""
    q_lora_rank: int | None = field(default=None, metadata=between(1, MAX_HIDDEN))
    """Latent attention: queries come from a latent of this rank. Default: none (a plain query projection)."""
    qk_rope_head_dim: int = field(default=0, metadata=between(0, MAX_HEAD_DIM))
    """Latent attention: width of the decoupled RoPE key (shared by the heads) and of each head's RoPE query part."""
    v_head_dim: int | None = field(default=None, metadata=between(1, MAX_HEAD_DIM))
    """Latent attention: width of one head's values. Default: `head_dim`."""
    qk_norm: bool = False
    """Per-head RMSNorm on queries and keys before RoPE (Qwen3, Gemma 3): one head_dim weight each, shared by the heads
    (2 × head_dim parameters); its saved activations are counted. OLMo 2's full-width q/k norms are not this."""
    attn_output_gate: bool = False
    """Qwen3-Next gated attention: q_proj also yields a sigmoid gate on the attention output (h → 2 × heads × head_dim;
    HF Qwen3NextAttention)."""
    shared_expert_gate: bool = False
    """Qwen3-Next: a sigmoid gate h → 1 on the shared expert's output."""
    layer_pattern: str | None = field(default=None, metadata=text(MAX_LAYERS))
    """Hybrid recurrent/attention models, one character per layer (its length is `num_layers`). `mixer_ffn` style
    (Qwen3-Next, Granite-4.0-H: each layer a mixer + the FFN): `*` attention, `M` Mamba-2, `G` Gated DeltaNet.
    `one_sublayer` style (Nemotron-H's `hybrid_override_pattern` verbatim): `*` attention, `M` Mamba-2, `-` MLP.
    Default: none (every layer attention)."""
    pattern_style: PatternStyle = "mixer_ffn"
    """How `layer_pattern` reads: `mixer_ffn` (each layer holds a mixer and the FFN: HF `layer_types` of Qwen3-Next,
    Granite-4.0-H) or `one_sublayer` (one sublayer and one norm per block: Nemotron-H)."""
    mamba_num_heads: int | None = field(default=None, metadata=between(1, MAX_HEADS))
    """Mamba-2 mixer (HF NemotronHMamba2Mixer, GraniteMoeHybridMambaLayer): heads H; d_inner = H × `mamba_head_dim`.
    Required by `M` layers."""
    mamba_head_dim: int | None = field(default=None, metadata=between(1, MAX_HEAD_DIM))
    """Mamba-2: channels P per head. Required by `M` layers."""
    ssm_state_size: int | None = field(default=None, metadata=between(1, MAX_HEAD_DIM))
    """Mamba-2: state size N per head (and of B and C per group). Required by `M` layers."""
    mamba_n_groups: int = field(default=1, metadata=between(1, MAX_HEADS))
    """Mamba-2: groups G of B and C; must divide `mamba_num_heads`."""
    mamba_conv_kernel: int = field(default=4, metadata=between(1, 64))
    """Mamba-2: taps K of the depthwise conv over x, B and C (with a bias)."""
    linear_num_key_heads: int | None = field(default=None, metadata=between(1, MAX_HEADS))
    """Gated DeltaNet mixer (Qwen3-Next, HF Qwen3NextGatedDeltaNet): query and key heads Hk; must divide
    `linear_num_value_heads`. Required by `G` layers."""
    linear_num_value_heads: int | None = field(default=None, metadata=between(1, MAX_HEADS))
    """Gated DeltaNet: value heads Hv. Required by `G` layers."""
    linear_key_head_dim: int | None = field(default=None, metadata=between(1, MAX_HEAD_DIM))
    """Gated DeltaNet: width Dk of a query or key head. Required by `G` layers."""
    linear_value_head_dim: int | None = field(default=None, metadata=between(1, MAX_HEAD_DIM))
    """Gated DeltaNet: width Dv of a value head. Required by `G` layers."""
    linear_conv_kernel_dim: int = field(default=4, metadata=between(1, 64))
    """Gated DeltaNet: taps K of the bias-free depthwise conv over q, k and v."""
    ssm_state_dtype: DType | None = None
    """Dtype of the recurrent (SSM, delta-rule) state when served: Nemotron-H (vLLM ≥ 0.20's default, config
    `mamba_ssm_cache_dtype`) and Qwen3.5 (config `mamba_ssm_dtype`) use `fp32`. Default: the activation dtype (vLLM's
    "auto")."""
    context_window: int | None = field(default=None, metadata=between(1, MAX_CONTEXT))
    """The longest sequence (prompt + output) the checkpoint takes: its config.json length as vLLM derives it
    (vllm/config/model.py `_get_and_verify_max_len`: `max_position_embeddings`, times `rope_scaling`'s factor unless
    rope_type is llama3, longrope or su or the model is Gemma 3; YaRN: `original_max_position_embeddings` × factor). It
    caps the serving limits; a longer plan gets a warning (vLLM refuses it without `VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`).
    Qwen2.5 7B-72B: 32,768, the -Instruct checkpoints' (131,072 needs YaRN). Default: the preset's; none: not known (a
    model built from a parameter count, a config that gives no length)."""
    preset: str | None = field(default=None, metadata=text(100))
    """A row of `planner/data/models.yaml` (`python -m planner models` lists them); the other `model` keys override it.
    Default: none."""
    approx_params: int | None = field(default=None, metadata=between(MIN_APPROX_PARAMS, MAX_APPROX_PARAMS))
    """A parameter count alone instead of the architecture (`13B`, `770M`, `1.5e9`): a guessed Llama-style architecture
    (model_from_param_count), and every output calls the plan APPROXIMATE; a plan file keeps only this count. Default:
    none."""

    def __post_init__(self) -> None:
        check_fields(self, "model")
        if self.num_kv_heads is None:
            object.__setattr__(self, "num_kv_heads", self.num_attention_heads)
        if self.num_attention_heads % self.num_kv_heads:
            raise bad(
                "model.num_kv_heads",
                self.num_kv_heads,
                f"must divide model.num_attention_heads ({self.num_attention_heads})",
            )
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise bad(
                    "model.hidden_size",
                    self.hidden_size,
                    f"is not a multiple of model.num_attention_heads ({self.num_attention_heads}); give model.head_dim",
                )
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
            check_int("model.head_dim", self.head_dim, lo=1, hi=MAX_HEAD_DIM)
        if self.mlp == "gelu" and self.activation is None:
            object.__setattr__(self, "activation", "gelu_new")
        elif self.mlp != "gelu" and self.activation is not None:
            raise bad("model.activation", self.activation, f"names a gelu MLP's activation; model.mlp is {self.mlp}")
        check_int("model.first_dense_layers", self.first_dense_layers, lo=0, hi=self.num_layers)
        if self.num_experts:
            check_int("model.experts_per_token", self.experts_per_token, lo=1, hi=self.num_experts)
            if self.moe_intermediate_size is None:
                object.__setattr__(self, "moe_intermediate_size", self.intermediate_size)
            if self.first_dense_layers == self.num_layers:
                raise bad(
                    "model.first_dense_layers",
                    self.first_dense_layers,
                    f"leaves no MoE layer of model.num_layers ({self.num_layers})",
                )
        elif self.experts_per_token or self.shared_experts or self.moe_intermediate_size or self.first_dense_layers:
            raise bad(
                "model.num_experts",
                0,
                "must be set (> 0) for experts_per_token, shared_experts, moe_intermediate_size or first_dense_layers",
            )
        check_int("model.global_attention_every", self.global_attention_every, lo=0, hi=self.num_layers)
        if self.global_attention_every and self.sliding_window is None:
            raise bad("model.global_attention_every", self.global_attention_every, "needs model.sliding_window")
        if self.kv_lora_rank is not None:
            if self.v_head_dim is None:
                object.__setattr__(self, "v_head_dim", self.head_dim)
            if self.num_kv_heads != self.num_attention_heads:
                raise bad(
                    "model.num_kv_heads",
                    self.num_kv_heads,
                    "must equal num_attention_heads with latent attention (kv_lora_rank): every head has its keys",
                )
        elif self.q_lora_rank is not None or self.qk_rope_head_dim or self.v_head_dim is not None:
            raise bad(
                "model.kv_lora_rank",
                None,
                "must be set for q_lora_rank, qk_rope_head_dim or v_head_dim (latent attention)",
            )
        self._check_pattern()

    def _check_pattern(self) -> None:
        """The layer pattern and the mixer fields its characters need."""
        p, style = self.layer_pattern, self.pattern_style
        if p is None:
            given = [k for k in _MAMBA_KEYS[:3] + _GDN_KEYS[:4] if getattr(self, k) is not None]
            if given:
                raise bad(f"model.{given[0]}", getattr(self, given[0]), "needs model.layer_pattern (a hybrid model)")
            return
        if len(p) != self.num_layers:
            raise bad("model.layer_pattern", p, f"has {len(p)} characters; model.num_layers is {self.num_layers}")
        wrong = next((i for i, c in enumerate(p) if c not in PATTERN_CHARS[style]), None)
        if wrong is not None:
            raise bad(
                "model.layer_pattern",
                p,
                f"has {p[wrong]!r} at position {wrong}; {style} patterns use only {' '.join(PATTERN_CHARS[style])}",
            )
        if "*" not in p:
            raise bad("model.layer_pattern", p, "has no attention layer (*); pure recurrent models are not modelled")
        if self.mla or self.sliding_window is not None or (self.num_experts and style == "one_sublayer"):
            raise bad(
                "model.layer_pattern",
                p,
                "does not combine with latent attention, sliding windows or one_sublayer MoE blocks",
            )
        for kind, keys in (("M", _MAMBA_KEYS[:3]), ("G", _GDN_KEYS[:4])):
            missing = [k for k in keys if getattr(self, k) is None]
            if kind in p and missing:
                raise bad(f"model.{missing[0]}", None, f"must be set: model.layer_pattern has {kind} layers")
        if "M" in p and self.mamba_dims[0] % self.mamba_n_groups:
            raise bad(
                "model.mamba_n_groups",
                self.mamba_n_groups,
                f"must divide model.mamba_num_heads ({self.mamba_num_heads})",
            )
        if "G" in p and self.gdn_dims[1] % self.gdn_dims[0]:
            raise bad(
                "model.linear_num_key_heads",
                self.linear_num_key_heads,
                f"must divide model.linear_num_value_heads ({self.linear_num_value_heads})",
            )

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def composite_gelu(self) -> bool:
        """The MLP's GeLU is HF's NewGELUActivation (`gelu_new`): elementwise ops that each save their inputs."""
        return self.activation == "gelu_new"

    @property
    def latent_rank(self) -> int:
        """kv_lora_rank of a latent-attention model (read under `mla`)."""
        return required(self.kv_lora_rank, "model.kv_lora_rank")

    @property
    def latent_v_head_dim(self) -> int:
        """v_head_dim of a latent-attention model, resolved to head_dim when not given (read under `mla`)."""
        return required(self.v_head_dim, "model.v_head_dim")

    @property
    def expert_intermediate_size(self) -> int:
        """moe_intermediate_size of an MoE model, resolved to intermediate_size when not given (read under
        `num_experts`)."""
        return required(self.moe_intermediate_size, "model.moe_intermediate_size")

    @property
    def mamba_dims(self) -> tuple[int, int, int]:
        """(mamba_num_heads, mamba_head_dim, ssm_state_size) of a model with Mamba-2 layers (read under an `M` in
        layer_pattern, whose rule requires them)."""
        return (
            required(self.mamba_num_heads, "model.mamba_num_heads"),
            required(self.mamba_head_dim, "model.mamba_head_dim"),
            required(self.ssm_state_size, "model.ssm_state_size"),
        )

    @property
    def gdn_dims(self) -> tuple[int, int, int, int]:
        """(linear_num_key_heads, linear_num_value_heads, linear_key_head_dim, linear_value_head_dim) of a model
        with Gated DeltaNet layers (read under a `G` in layer_pattern, whose rule requires them)."""
        return (
            required(self.linear_num_key_heads, "model.linear_num_key_heads"),
            required(self.linear_num_value_heads, "model.linear_num_value_heads"),
            required(self.linear_key_head_dim, "model.linear_key_head_dim"),
            required(self.linear_value_head_dim, "model.linear_value_head_dim"),
        )

    @property
    def moe_layers(self) -> int:
        return self.num_layers - self.first_dense_layers if self.num_experts else 0

    @property
    def sliding_layers(self) -> int:
        """Layers that attend within the sliding window."""
        if self.sliding_window is None:
            return 0
        every = self.global_attention_every
        return self.num_layers - (self.num_layers // every if every else 0)

    @property
    def pattern(self) -> str:
        """layer_pattern, or every layer attention (`*`) when the model is not hybrid."""
        return self.layer_pattern or "*" * self.num_layers

    def pattern_count(self, kinds: str) -> int:
        """Layers whose pattern character is one of `kinds` (no pattern: every layer is attention, `*`)."""
        return sum(self.pattern.count(c) for c in set(kinds))

    @property
    def q_width(self) -> int:
        """Width of the queries (and of the keys they are scored against): heads × head_dim (+ RoPE under MLA)."""
        return self.num_attention_heads * (self.head_dim + self.qk_rope_head_dim)

    @property
    def v_width(self) -> int:
        """Width of the values and of the attention output: heads × value head dim."""
        return self.num_attention_heads * self.latent_v_head_dim if self.mla else self.q_width

    @property
    def kv_width(self) -> int:
        """Width of each of the key and value projection outputs (kv heads × head_dim)."""
        return self.num_kv_heads * self.head_dim

    @property
    def params(self) -> ParamCounts:
        return param_counts(self)


def kv_heads_per_rank(m: Model, tensor: int) -> int:
    """KV heads each tensor-parallel rank holds; with fewer KV heads than ranks each rank keeps one copy."""
    return m.num_kv_heads // tensor if m.num_kv_heads % tensor == 0 else 1


# keyed by (model, tensor, expert_parallel), all the counts read; a search asks for a few splits thousands of times
@lru_cache(maxsize=512)
def param_counts(m: Model, tensor: int = 1, expert_parallel: int = 1) -> ParamCounts:
    """Parameter counts from the architecture (same conventions as the HF modelling code), per rank of a
    `tensor`-way tensor-parallel split (Megatron: q/k/v/gate/up split by columns, o/down by rows, embedding and
    output head by vocabulary rows; norms replicated)."""
    h, t, bias = m.hidden_size, tensor, int(m.bias)
    q, kv, inter = m.q_width // t, kv_heads_per_rank(m, t) * m.head_dim, m.intermediate_size // t
    if m.mla:
        # q: h → q latent (+ its norm) → heads × (nope + rope), or h → heads × (nope + rope) directly;
        # kv_a: h → kv latent + RoPE key (+ the latent's norm); kv_b: latent → heads × (nope + v); o
        # (the latent projections are replicated over tensor-parallel ranks, the rest split by heads)
        heads, rank, v_dim = m.num_attention_heads // t, m.latent_rank, m.latent_v_head_dim
        q_path = (h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * q) if m.q_lora_rank else h * q
        attention = (
            q_path + h * (rank + m.qk_rope_head_dim) + rank + rank * heads * (m.head_dim + v_dim) + heads * v_dim * h
        )
    else:
        attention = h * q + 2 * h * kv + q * h + bias * (q + 2 * kv + h) + h * q * m.attn_output_gate
    attention += 2 * m.head_dim if m.qk_norm else 0  # replicated over tensor-parallel ranks
    if m.mlp == "swiglu":
        mlp = 3 * h * inter + bias * (2 * inter + h)
    else:
        mlp = 2 * h * inter + bias * (inter + h)
    norm = h if m.norm == "rmsnorm" else 2 * h  # LayerNorm has a bias
    table = -(-m.vocab_size // t) * h
    moe: dict[str, Any] = {}  # the MoE and hybrid counts ParamCounts takes by name
    if m.num_experts:
        # experts are split over expert-parallel ranks; tensor parallelism splits each expert's width
        e_inter = m.expert_intermediate_size // t
        mats = 3 if m.mlp == "swiglu" else 2
        expert = mats * h * e_inter + bias * ((mats - 1) * e_inter + h)
        moe = dict(
            expert=expert,
            experts=expert * (m.num_experts // expert_parallel),
            shared=expert * m.shared_experts,
            router=h * (m.num_experts + m.shared_expert_gate),
            moe_layers=m.moe_layers,
            active_experts=m.experts_per_token,
        )
    if m.layer_pattern:
        moe.update(
            mamba=mamba2_params(m, t) if "M" in m.layer_pattern else 0,
            gdn=gdn_params(m, t) if "G" in m.layer_pattern else 0,
            pattern=m.layer_pattern,
            one_sublayer=m.pattern_style == "one_sublayer",
        )
    return ParamCounts(
        embedding=table,
        attention=attention,
        mlp=mlp,
        norms=2 * norm,
        final_norm=norm,
        lm_head=0 if m.tie_embeddings else table,
        num_layers=m.num_layers,
        **moe,
    )


def mamba2_widths(m: Model, tensor: int = 1) -> tuple[int, int, int]:
    """Per-rank (heads, d_inner = heads × head_dim, groups × state) of a Mamba-2 mixer. Heads split over
    tensor-parallel ranks; when the ranks do not divide the groups, vLLM gives each rank whole groups
    (mamba_utils extra_groups_for_head_shards), so a rank keeps ⌈G / tp⌉ groups' B and C."""
    all_heads, head_dim, state = m.mamba_dims
    heads = all_heads // tensor
    return heads, heads * head_dim, -(-m.mamba_n_groups // tensor) * state


def mamba2_params(m: Model, tensor: int = 1) -> int:
    """One Mamba-2 mixer on one rank (HF NemotronHMamba2Mixer, docs/hybrid.md §2.1): in_proj h → z, x (d_inner each),
    B, C (G·N each) and dt (H); the depthwise conv over x, B, C with a bias; dt_bias, A_log and D per head; the
    gated RMSNorm over d_inner; out_proj d_inner → h."""
    h = m.hidden_size
    heads, inner, gn = mamba2_widths(m, tensor)
    conv = inner + 2 * gn
    return h * (2 * inner + 2 * gn + heads) + conv * (m.mamba_conv_kernel + 1) + 3 * heads + inner + inner * h


def gdn_widths(m: Model, tensor: int = 1) -> tuple[int, int, int]:
    """Per-rank (value heads, key width Hk·Dk, value width Hv·Dv) of a Gated DeltaNet mixer (heads split over
    tensor-parallel ranks)."""
    hk, all_hv, dk, dv = m.gdn_dims
    hv = all_hv // tensor
    return hv, hk // tensor * dk, hv * dv


def gdn_params(m: Model, tensor: int = 1) -> int:
    """One Gated DeltaNet mixer on one rank (HF Qwen3NextGatedDeltaNet, docs/hybrid.md §2.2): in_proj_qkvz
    h → q, k, v, z; in_proj_ba h → β, a (one each per value head); the bias-free depthwise conv over q, k, v;
    dt_bias and A_log per value head; the gated RMSNorm over one value head (shared by the heads); out_proj
    Hv·Dv → h."""
    h = m.hidden_size
    hv, key, value = gdn_widths(m, tensor)
    return (
        h * (2 * key + 2 * value)
        + h * 2 * hv
        + (2 * key + value) * m.linear_conv_kernel_dim
        + 2 * hv
        + m.gdn_dims[3]
        + value * h
    )


MODEL_KEYS = (
    "preset",
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_kv_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "mlp",
    "activation",
    "norm",
    "tie_embeddings",
    "bias",
    "num_experts",
    "experts_per_token",
    "moe_intermediate_size",
    "shared_experts",
    "first_dense_layers",
    "sliding_window",
    "global_attention_every",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_rope_head_dim",
    "v_head_dim",
    "qk_norm",
    "attn_output_gate",
    "shared_expert_gate",
    "layer_pattern",
    "pattern_style",
    "mamba_num_heads",
    "mamba_head_dim",
    "ssm_state_size",
    "mamba_n_groups",
    "mamba_conv_kernel",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
    "ssm_state_dtype",
    "context_window",
)
_ARCH_KEYS = tuple(k for k in MODEL_KEYS if k != "preset")
_MOE_KEYS = ("num_experts", "experts_per_token", "moe_intermediate_size", "shared_experts", "first_dense_layers")
_WINDOW_KEYS = ("sliding_window", "global_attention_every")  # written out only where the model uses them
_MLA_KEYS = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "v_head_dim")
_MAMBA_KEYS = ("mamba_num_heads", "mamba_head_dim", "ssm_state_size", "mamba_n_groups", "mamba_conv_kernel")
_GDN_KEYS = (
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
)
_HYBRID_KEYS = ("layer_pattern", "pattern_style", "ssm_state_dtype") + _MAMBA_KEYS + _GDN_KEYS
_FLAG_KEYS = ("qk_norm", "attn_output_gate", "shared_expert_gate")  # written out only when set
_OPTIONAL_KEYS = ("context_window", "activation")  # written out only when known (activation: gelu MLPs)


@dataclass(frozen=True, kw_only=True)
class Preset:
    id: str
    name: str
    hf_id: str
    published_params: int
    source: str
    model: Model
    checkpoint_weights: str | None = None  # the dtype a quantized checkpoint is served in (None: the compute dtype)


@cache
def presets() -> dict[str, Preset]:
    """The preset table, validated once."""
    raw = load_data_file(PRESETS_PATH)
    table: dict[str, Preset] = {}
    for entry in raw["models"]:
        arch = {k: entry[k] for k in _ARCH_KEYS if k in entry}
        table[entry["id"]] = Preset(
            id=entry["id"],
            name=entry["name"],
            hf_id=entry["hf_id"],
            published_params=int(entry["published_params"]),
            source=entry["source"],
            model=Model(preset=entry["id"], **arch),
            checkpoint_weights=entry.get("checkpoint_weights"),
        )
    return table


@dataclass(frozen=True, kw_only=True)
class Alias:
    """A Hugging Face repo whose config.json has exactly a preset's architecture (planner/data/model_aliases.yaml)."""

    repo: str
    preset: str
    evidence: str  # the config.json fields compared, and where they were read


@cache
def aliases() -> dict[str, Alias]:
    """The alias table by repo id, each naming a preset."""
    table: dict[str, Alias] = {}
    for entry in load_data_file(ALIASES_PATH)["aliases"]:
        if entry["preset"] not in presets() or entry["repo"] in table:
            raise PlanError(ALIASES_PATH.name, f"{entry['repo']}: names no preset, or is listed twice")
        table[entry["repo"]] = Alias(repo=entry["repo"], preset=entry["preset"], evidence=entry["evidence"])
    return table


def preset_of_shape(m: Model) -> str | None:
    """The preset whose architecture `m` has exactly (every field a plan's model has: layers, hidden, heads, kv
    heads, head dim, intermediate, vocab, tied embeddings, experts, window, ...), or None."""
    plain = replace(m, preset=None)
    return next((p.id for p in presets().values() if replace(p.model, preset=None) == plain), None)


def shape_note(what: str, preset: str) -> str:
    """The note of a config.json's model resolved as a preset by its shape (preset_of_shape)."""
    return (
        f"model {what} resolved as preset {preset} by shape (its layers, hidden size, heads, kv heads, head dim, "
        f"intermediate size, vocabulary and every other architecture field are {preset}'s)"
    )


# --- Parameter count only ------------------------------------------------------------------------------
def parse_param_count(value: Any) -> int:
    """'13B', '770m', '1.5e9' or a number, as an integer parameter count."""
    try:
        count = parse_count(value)
    except ValueError:  # not a number, NaN or infinity
        raise bad("model.params", value, "must be a parameter count like 13B, 770M or 1.5e9") from None
    if not MIN_APPROX_PARAMS <= count <= MAX_APPROX_PARAMS:
        raise bad("model.params", value, "is out of range; must be from 50M to 5T parameters")
    return count


def model_from_param_count(params: int) -> Model:
    """A plausible Llama-style architecture of about `params` parameters (marked approximate).

    Shape rules, from the Llama 2/3, GPT-2 and Qwen2.5 families: hidden size a multiple of 1,024 (512 and 768
    below that); about 128 hidden units per layer (64 below 2,048 hidden: small models run deeper); heads of 128
    (64 below 1,024 hidden); 8 KV heads when the heads divide by 8, else full multi-head attention; SwiGLU MLP of 3.5 ×
    hidden; RMSNorm; no biases. Vocabulary: Llama 3's 128,256 from 1B parameters, Llama 2's 32,000 below; embeddings
    tied when the two tables would be over a fifth of the model (as small models do). The hidden size whose
    ~128-per-layer depth comes closest is kept, then the layer count and the MLP width are set to meet the count (MLP
    2-6 × hidden).
    """
    vocab = 128_256 if params >= 1_000_000_000 else 32_000

    def shape(h: int, layers: int, inter: int | None = None) -> Model:
        head_dim = 128 if h >= 1024 else 64
        heads = h // head_dim
        return Model(
            num_layers=layers,
            hidden_size=h,
            num_attention_heads=heads,
            num_kv_heads=8 if heads % 8 == 0 else heads,
            head_dim=head_dim,
            intermediate_size=inter or 256 * round(3.5 * h / 256),
            vocab_size=vocab,
            tie_embeddings=2 * vocab * h > params / 5,
            approx_params=params,
        )

    def depth(h: int) -> int:
        return max(2, h // (128 if h >= 2048 else 64))

    widths = [512, 768] + [1024 * k for k in range(1, 33)]
    h = min(widths, key=lambda w: abs(math.log(shape(w, depth(w)).params.total / params)))
    base = shape(h, depth(h)).params
    fixed = base.embedding + base.lm_head + base.final_norm
    layers = min(MAX_LAYERS, max(2, round((params - fixed) / base.layer)))
    per_layer_rest = base.attention + base.norms
    inter = (params - fixed - layers * per_layer_rest) / (3 * h * layers)
    step = 256 if h >= 2048 else 64  # MLP widths are multiples of 256 in the families above (64 when small)
    inter = step * round(min(6 * h, max(2 * h, inter)) / step)
    return shape(h, layers, inter)


def approximate_note(m: Model) -> str | None:
    """The line every output carries for a model guessed from its parameter count; None for a real one."""
    if not m.approx_params:
        return None
    return (
        f"APPROXIMATE: architecture guessed from {m.approx_params / 1e9:,.3g}B parameters "
        f"({m.num_layers} layers × {m.hidden_size:,} hidden, {m.num_attention_heads} heads / {m.num_kv_heads} KV, "
        f"MLP {m.intermediate_size:,}, vocabulary {m.vocab_size:,}); give the real architecture or a preset "
        f"for a firm answer"
    )


def model_from_dict(data: Any) -> Model:
    """Build the `model:` block: a preset (if named) with the given keys overriding it, or an approximate
    architecture from `params` alone."""
    if not isinstance(data, dict):
        raise bad("model", data, "must be a mapping of architecture keys")
    for key in data:
        if key not in MODEL_KEYS and key != "params":
            raise unknown_key("model", key, MODEL_KEYS + ("params",))
    if "params" in data:
        others = sorted(k for k in data if k != "params")
        if others:
            raise bad(
                "model.params",
                data["params"],
                f"stands alone (an approximate architecture); drop {', '.join(others)} or drop params",
            )
        return model_from_param_count(parse_param_count(data["params"]))
    fields: dict[str, Any] = {}
    preset_id = data.get("preset")
    if preset_id is not None:
        table = presets()
        if not isinstance(preset_id, str) or preset_id not in table:
            raise bad("model.preset", preset_id, f"is not a known preset; known: {', '.join(sorted(table))}")
        base = table[preset_id].model
        fields = {k: getattr(base, k) for k in _ARCH_KEYS}
        # a preset's derived defaults must follow overridden shapes, e.g. a new hidden_size
        if "num_attention_heads" in data and "num_kv_heads" not in data:
            fields["num_kv_heads"] = None
        if ("hidden_size" in data or "num_attention_heads" in data) and "head_dim" not in data:
            fields["head_dim"] = None
    fields.update(data)
    missing = [
        k
        for k in ("num_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
        if k not in fields
    ]
    if missing:
        raise PlanError("model", f"missing {', '.join(missing)} (give them, or a model.preset)")
    return Model(**fields)


def model_to_dict(m: Model) -> dict[str, Any]:
    """Every architecture key written out, so a plan file does not depend on the preset table; an approximate
    model is its parameter count (its shape rules rebuild the same architecture)."""
    if m.approx_params:
        return {"params": m.approx_params}
    out: dict[str, Any] = {"preset": m.preset} if m.preset else {}
    out.update(
        {
            k: getattr(m, k)
            for k in _ARCH_KEYS
            if not (k in _MOE_KEYS and not m.num_experts)
            and not (k in _WINDOW_KEYS and m.sliding_window is None)
            and not (k in _MLA_KEYS and not m.mla)
            and not (k in _FLAG_KEYS and not getattr(m, k))
            and not (k in _HYBRID_KEYS and not m.layer_pattern)
            and not (k in _OPTIONAL_KEYS and getattr(m, k) is None)
            and not (k in _MAMBA_KEYS and "M" not in (m.layer_pattern or ""))
            and not (k in _GDN_KEYS and "G" not in (m.layer_pattern or ""))
        }
    )
    return out


def projection_shapes(m: Model, tensor: int = 1) -> dict[str, tuple[int, int]]:
    """(input, output) width of each projection of a layer on one tensor-parallel rank. GeLU models have no
    gate; q, k, v are listed separately even where the checkpoint fuses them."""
    h, t = m.hidden_size, tensor
    q, kv, inter = m.q_width // t, kv_heads_per_rank(m, t) * m.head_dim, m.intermediate_size // t
    if m.mla:  # q (from the q latent), k and v (both from the kv latent, one kv_b matrix), o; per rank
        heads = m.num_attention_heads // t
        shapes = {
            "q": (m.q_lora_rank or h, q),
            "k": (m.latent_rank, heads * m.head_dim),
            "v": (m.latent_rank, heads * m.latent_v_head_dim),
            "o": (heads * m.latent_v_head_dim, h),
            "up": (h, inter),
            "down": (inter, h),
        }
    else:
        shapes = {"q": (h, q), "k": (h, kv), "v": (h, kv), "o": (q, h), "up": (h, inter), "down": (inter, h)}
    if m.mlp == "swiglu":
        shapes["gate"] = (h, inter)
    return shapes


def attention_widths(m: Model, tensor: int = 1) -> tuple[int, int, int, int]:
    """Per-rank widths of one token's queries, keys, values and attention output as the attention kernel sees
    them (KV heads counted once: grouped heads are expanded only by eager attention). Under latent attention
    keys are decompressed per head (non-RoPE part + the shared RoPE key) and values are v_head_dim wide."""
    if m.mla:
        heads = m.num_attention_heads // tensor
        qk = heads * (m.head_dim + m.qk_rope_head_dim)
        return qk, qk, heads * m.latent_v_head_dim, heads * m.latent_v_head_dim
    kv = kv_heads_per_rank(m, tensor) * m.head_dim
    return m.q_width // tensor, kv, kv, m.q_width // tensor


def lora_params_per_layer(m: Model, targets: tuple[str, ...], rank: int, tensor: int = 1) -> int:
    """Adapter parameters of one layer on one rank: A (rank × input) and B (output × rank) per target."""
    shapes = projection_shapes(m, tensor)
    return sum(rank * (shapes[t][0] + shapes[t][1]) for t in targets)
