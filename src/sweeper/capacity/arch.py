"""Model numbers from a model config alone, without torch: parameter counts, FLOPs per token, layer shapes.

An :class:`Arch` is read from a ``model_type`` and the numbers of its HF config (``conf/model/*.yaml``'s ``config``
block, or any HF config given by its numbers). Keys the config leaves out take transformers' defaults for that
``model_type`` (``LlamaConfig``, ``MistralConfig``, ``Qwen2Config``, ``GPT2Config``), so the counts equal what
``AutoModelForCausalLM.from_config`` builds; ``tests/unit/test_plan_arch.py`` checks them against the instantiated
models.

Three families are modelled:

* ``llama`` (also ``mistral``, ``qwen2``): RMSNorm, rotary positions, grouped-query attention (``num_key_value_heads``),
  SwiGLU MLP (gate, up, down: ``3·h·i`` weights), optional biases (``attention_bias``; qwen2's q/k/v biases).
* ``mixtral``: the llama family with a routed MLP (a mixture of experts): a router ``h → E`` without bias and ``E``
  SwiGLU experts stored as transformers 5 stores them, two 3-D tensors per layer (``gate_up_proj`` ``E × 2i × h``,
  ``down_proj`` ``E × h × i``). Parameters and states count every expert; FLOPs per token the ``k`` experts each
  token is routed to (``num_experts_per_tok``) plus the router. What a routed layer saves for backward (the tokens
  each expert receives depend on the router) is not modelled: activations and time are unknown for it (the plan says
  so), its states are exact.
* ``gpt2``: LayerNorm (weight + bias), learned positions (``n_positions × h``), fused ``c_attn`` with bias, a GeLU MLP
  with ``n_inner`` (default ``4h``), biases everywhere, tied embeddings by default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: HF defaults of the llama-family configs (transformers ``LlamaConfig``); mistral and qwen2 override some below.
_LLAMA_DEFAULTS: dict[str, Any] = {
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": None,  # = num_attention_heads
    "head_dim": None,  # = hidden_size // num_attention_heads
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
    "attention_dropout": 0.0,
}
_FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": _LLAMA_DEFAULTS,
    "mistral": {
        **_LLAMA_DEFAULTS,
        "intermediate_size": 14336,
        "num_key_value_heads": 8,
        "max_position_embeddings": 4096 * 32,
    },
    "qwen2": {
        **_LLAMA_DEFAULTS,
        "vocab_size": 151936,
        "intermediate_size": 22016,
        "num_key_value_heads": 32,
        "max_position_embeddings": 32768,
        "qkv_bias": True,  # Qwen2Attention: q, k and v projections carry biases, o does not
    },
    "mixtral": {  # MixtralConfig: the mistral layout with a routed MLP of num_local_experts SwiGLU experts
        **_LLAMA_DEFAULTS,
        "intermediate_size": 14336,
        "num_key_value_heads": 8,
        "max_position_embeddings": 4096 * 32,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
    },
    "gpt2": {
        "n_embd": 768,
        "n_layer": 12,
        "n_head": 12,
        "n_inner": None,  # = 4 * n_embd
        "vocab_size": 50257,
        "n_positions": 1024,
        "tie_word_embeddings": True,
        "attn_pdrop": 0.1,
        "resid_pdrop": 0.1,
        "embd_pdrop": 0.1,
    },
}
#: transformers' ``GPT2Config.attribute_map``: the common names, which win over gpt2's own when both are given
#: (as ``AutoConfig.for_model("gpt2", n_positions=256, max_position_embeddings=2048).n_positions == 2048``).
_GPT2_ALIASES = {
    "hidden_size": "n_embd",
    "max_position_embeddings": "n_positions",
    "num_attention_heads": "n_head",
    "num_hidden_layers": "n_layer",
}
#: The model types this module knows.
MODEL_TYPES: tuple[str, ...] = tuple(_FAMILY_DEFAULTS)


class UnknownArchitecture(ValueError):
    """A ``model_type`` this module has no formulas for (the plan says so instead of guessing)."""


@dataclass(frozen=True)
class Arch:
    """The numbers of one decoder-only architecture that memory and time depend on.

    Attributes:
        model_type: transformers' ``model_type``.
        family: ``llama`` (RMSNorm, RoPE, SwiGLU, GQA) or ``gpt2`` (LayerNorm, learned positions, GeLU MLP).
        hidden: h, the model width. layers: L. heads: a, query heads. kv_heads: key/value heads (GQA; = a for MHA).
        head_dim: d. intermediate: the MLP width i. vocab: V. positions: learned position embeddings (gpt2), else 0.
        tied: the output projection shares the input embedding's weight.
        attn_bias: biases on q/k/v/o (llama ``attention_bias``). qkv_bias: biases on q/k/v only (qwen2).
        mlp_bias: biases on the MLP projections.
        max_seq_len: the config's maximum sequence length (tokens), or None.
        attn_dropout: dropout on the attention probabilities (gpt2 ``attn_pdrop``, llama ``attention_dropout``).
        resid_dropout: dropout on each residual branch and (``embd_dropout``) on the embeddings (gpt2).
        experts: routed experts per layer (mixtral ``num_local_experts``); 0 for a dense MLP.
        top_k: experts each token is routed to (``num_experts_per_tok``); 0 for a dense MLP.
    """

    model_type: str
    family: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    positions: int
    tied: bool
    attn_bias: bool = False
    qkv_bias: bool = False
    mlp_bias: bool = False
    max_seq_len: int | None = None
    attn_dropout: float = 0.0
    resid_dropout: float = 0.0
    embd_dropout: float = 0.0
    experts: int = 0
    top_k: int = 0

    @classmethod
    def from_config(cls, model_type: str, config: Mapping[str, Any]) -> Arch:
        """Read an architecture from ``model_type`` and its HF config numbers (missing keys: HF defaults).

        Raises:
            UnknownArchitecture: a ``model_type`` outside :data:`MODEL_TYPES`.
        """
        if model_type not in _FAMILY_DEFAULTS:
            raise UnknownArchitecture(
                f"no memory/time formulas for model_type={model_type!r} (known: {', '.join(MODEL_TYPES)})"
            )
        c = {**_FAMILY_DEFAULTS[model_type], **{k: v for k, v in dict(config).items() if v is not None}}
        if model_type == "gpt2":
            c.update({own: c[alias] for alias, own in _GPT2_ALIASES.items() if alias in c})
            h = int(c["n_embd"])
            return cls(
                model_type=model_type,
                family="gpt2",
                hidden=h,
                layers=int(c["n_layer"]),
                heads=int(c["n_head"]),
                kv_heads=int(c["n_head"]),
                head_dim=h // int(c["n_head"]),
                intermediate=int(c.get("n_inner") or 4 * h),
                vocab=int(c["vocab_size"]),
                positions=int(c["n_positions"]),
                tied=bool(c["tie_word_embeddings"]),
                attn_bias=True,
                mlp_bias=True,
                max_seq_len=int(c["n_positions"]),
                attn_dropout=float(c["attn_pdrop"]),
                resid_dropout=float(c["resid_pdrop"]),
                embd_dropout=float(c["embd_pdrop"]),
            )
        h, a = int(c["hidden_size"]), int(c["num_attention_heads"])
        return cls(
            model_type=model_type,
            family="llama",
            hidden=h,
            layers=int(c["num_hidden_layers"]),
            heads=a,
            kv_heads=int(c.get("num_key_value_heads") or a),
            head_dim=int(c.get("head_dim") or h // a),
            intermediate=int(c["intermediate_size"]),
            vocab=int(c["vocab_size"]),
            positions=0,
            tied=bool(c["tie_word_embeddings"]),
            attn_bias=bool(c.get("attention_bias")),
            qkv_bias=bool(c.get("qkv_bias")),
            mlp_bias=bool(c.get("mlp_bias")),
            max_seq_len=int(c["max_position_embeddings"]) if c.get("max_position_embeddings") else None,
            attn_dropout=float(c.get("attention_dropout") or 0.0),
            experts=int(c.get("num_local_experts") or 0),
            top_k=int(c.get("num_experts_per_tok") or 0) if c.get("num_local_experts") else 0,
        )

    # ---- parameter counts (elements) ----
    @property
    def q_width(self) -> int:
        """Width of the query projection output, ``a·d``."""
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Width of each of the key and value projection outputs, ``kv_heads·d``."""
        return self.kv_heads * self.head_dim

    @property
    def attention_params(self) -> int:
        """Parameters of one layer's attention block (projections and their biases)."""
        h, q, kv = self.hidden, self.q_width, self.kv_width
        if self.family == "gpt2":  # c_attn: h -> 3h with bias; c_proj: h -> h with bias
            return h * 3 * h + 3 * h + h * h + h
        n = h * q + 2 * h * kv + q * h
        if self.attn_bias:
            n += q + 2 * kv + h
        elif self.qkv_bias:
            n += q + 2 * kv
        return n

    @property
    def mlp_params(self) -> int:
        """Parameters of one layer's MLP (SwiGLU: gate, up, down; gpt2: c_fc, c_proj with biases)."""
        h, i = self.hidden, self.intermediate
        if self.family == "gpt2":
            return h * i + i + i * h + h
        if self.experts:  # router + every expert's gate, up and down
            return h * self.experts + self.experts * 3 * h * i
        return 3 * h * i + ((2 * i + h) if self.mlp_bias else 0)

    @property
    def active_params(self) -> int:
        """Parameters one token's forward pass uses: :attr:`non_embedding_params` with only ``top_k`` of the
        ``experts`` of each routed layer (the router counted); = :attr:`non_embedding_params` for a dense model."""
        if not self.experts:
            return self.non_embedding_params
        idle = (self.experts - self.top_k) * 3 * self.hidden * self.intermediate
        return self.non_embedding_params - self.layers * idle

    def require_dense(self, what: str) -> None:
        """Raise :class:`UnknownArchitecture` for a mixture of experts, naming ``what`` is not modelled for it.

        Raises:
            UnknownArchitecture: ``experts > 0``.
        """
        if self.experts:
            raise UnknownArchitecture(
                f"model_type={self.model_type!r} is a mixture of experts ({self.experts} experts, top-{self.top_k}): "
                f"{what} not modelled for routed layers (the tokens each expert receives depend on the router)"
            )

    @property
    def norm_params(self) -> int:
        """Parameters of one normalisation layer (RMSNorm: weight h; LayerNorm: weight + bias 2h)."""
        return 2 * self.hidden if self.family == "gpt2" else self.hidden

    @property
    def layer_params(self) -> int:
        """Parameters of one decoder layer: attention + MLP + two norms."""
        return self.attention_params + self.mlp_params + 2 * self.norm_params

    @property
    def embedding_params(self) -> int:
        """Input token embedding ``V·h`` plus learned positions (gpt2 ``n_positions·h``)."""
        return self.vocab * self.hidden + self.positions * self.hidden

    @property
    def lm_head_params(self) -> int:
        """Output projection ``V·h`` when untied, else 0 (it shares the embedding)."""
        return 0 if self.tied else self.vocab * self.hidden

    @property
    def total_params(self) -> int:
        """Unique parameters P: embeddings + L layers + final norm + untied output projection."""
        return self.embedding_params + self.layers * self.layer_params + self.norm_params + self.lm_head_params

    @property
    def non_embedding_params(self) -> int:
        """N of PaLM's ``6N``: parameters minus the input token embedding, with the output projection counted even
        when tied (it still does its ``V·h`` matmul). Same convention as the harness's ``model_flops_inputs``."""
        return self.total_params - self.vocab * self.hidden + (self.vocab * self.hidden if self.tied else 0)

    @property
    def param_tensors(self) -> int:
        """Number of parameter tensors (Adam keeps one ``step`` scalar per tensor)."""
        if self.family == "gpt2":
            per_layer = 12  # ln_1 w,b; c_attn w,b; c_proj w,b; ln_2 w,b; c_fc w,b; mlp c_proj w,b
            return 2 + self.layers * per_layer + 2 + (0 if self.tied else 1)
        per_layer = 4 + 3 + 2
        if self.attn_bias:
            per_layer += 4
        elif self.qkv_bias:
            per_layer += 3
        if self.mlp_bias:
            per_layer += 3
        return 1 + self.layers * per_layer + 1 + (0 if self.tied else 1)

    def param_shapes(self) -> list[tuple[int, int]]:
        """Every parameter tensor as ``(rows, elements per row)``: dim 0 (what FSDP2 shards) and the product of the
        other dims (1 for vectors), in module order. Their total is :attr:`total_params`."""
        h, i, v = self.hidden, self.intermediate, self.vocab
        if self.family == "gpt2":
            layer = [
                (h, 1),
                (h, 1),
                (h, 3 * h),
                (3 * h, 1),
                (h, h),
                (h, 1),
                (h, 1),
                (h, 1),
                (h, i),
                (i, 1),
                (i, h),
                (h, 1),
            ]
            head = [] if self.tied else [(v, h)]
            return [(v, h), (self.positions, h), *layer * self.layers, (h, 1), (h, 1), *head]
        q, kv = self.q_width, self.kv_width
        layer = [(q, h), (kv, h), (kv, h)]
        if self.attn_bias or self.qkv_bias:
            layer += [(q, 1), (kv, 1), (kv, 1)]
        layer += [(h, q)] + ([(h, 1)] if self.attn_bias else [])
        if self.experts:  # router, then the experts' two 3-D tensors (dim 0: the expert)
            e = self.experts
            layer += [(e, h), (e, 2 * i * h), (e, h * i)]
        else:
            layer += [(i, h), (i, h), (h, i)] + ([(i, 1), (i, 1), (h, 1)] if self.mlp_bias else [])
        layer += [(h, 1), (h, 1)]
        return [(v, h), *layer * self.layers, (h, 1), *([] if self.tied else [(v, h)])]

    def tp_param_shapes(self, tp: int) -> list[tuple[int, int]]:
        """Every parameter tensor one rank holds under tensor parallelism of degree ``tp``, as
        :meth:`param_shapes` gives them, sharded the way DeepSpeed AutoTP shards a model for training
        (``deepspeed/module_inject/auto_tp.py``, ``layers.py``): q/k/v and gate/up column-parallel (rows / tp, their
        biases too), o and down row-parallel (columns / tp, their biases replicated: added after the all-reduce),
        the output head column-parallel over the vocabulary (``LinearLayer(gather_output=True)``), the input
        embedding and every norm replicated. Checked on the CPU points: a 210,240-parameter tiny Llama holds
        137,280 per rank at tp=2 (tests/integration/test_tensor_parallel.py).

        Raises:
            UnknownArchitecture: gpt2 (AutoTP refuses its Conv1D layers), or a tied output head (how AutoTP splits
                a head that shares the embedding's weight was not measured: memory unknown, not guessed).
        """
        if tp == 1:
            return self.param_shapes()
        self.require_dense(f"tp={tp} (how AutoTP shards the experts' 3-D tensors)")
        if self.family == "gpt2":
            raise UnknownArchitecture("DeepSpeed AutoTP does not shard gpt2 (Conv1D layers): no tensor-parallel layout")
        if self.tied:
            raise UnknownArchitecture(
                f"tp={tp} with a tied output head (tie_word_embeddings): how AutoTP shards a head sharing the "
                "embedding's weight is not measured, so its states per rank are unknown"
            )
        h, i, v = self.hidden, self.intermediate, self.vocab
        q, kv = self.q_width // tp, self.kv_width // tp
        layer = [(q, h), (kv, h), (kv, h)]
        if self.attn_bias or self.qkv_bias:
            layer += [(q, 1), (kv, 1), (kv, 1)]
        layer += [(h, q)] + ([(h, 1)] if self.attn_bias else [])
        layer += [(i // tp, h), (i // tp, h), (h, i // tp)] + (
            [(i // tp, 1), (i // tp, 1), (h, 1)] if self.mlp_bias else []
        )
        layer += [(h, 1), (h, 1)]
        return [(v, h), *layer * self.layers, (h, 1), (-(-v // tp), h)]

    def stage_param_shapes(self, tp: int, pp: int = 1, stage: str = "only") -> list[tuple[int, int]]:
        """The parameter tensors one rank of pipeline ``stage`` holds (``first``, ``last``, or ``only`` without a
        pipeline), under tensor parallelism ``tp`` (:meth:`tp_param_shapes`): the first stage holds the input
        embedding and ``layers / pp`` decoder layers, the last its ``layers / pp`` layers, the final norm and the
        output head; a tied head is a second copy of the embedding on the last stage (DeepSpeed's ``TiedLayerSpec``
        keeps the tied weight on both ends and all-reduces its gradient). Layers split evenly (the planner's rule
        T11: ``pp`` divides the layers).

        Raises:
            UnknownArchitecture: as :meth:`tp_param_shapes`.
        """
        shapes = self.tp_param_shapes(tp)
        if pp == 1 or stage == "only":
            return shapes
        n_embed = n_final = 2 if self.family == "gpt2" else 1
        n_head = 0 if self.tied else 1
        per_layer = (len(shapes) - n_embed - n_final - n_head) // self.layers
        layers = shapes[n_embed : n_embed + per_layer * self.layers]
        mine = layers[: per_layer * (self.layers // pp)]
        if stage == "first":
            return [*shapes[:n_embed], *mine]
        head = shapes[len(shapes) - n_head :] if n_head else [shapes[0]]
        return [*mine, *shapes[n_embed + per_layer * self.layers : n_embed + per_layer * self.layers + n_final], *head]

    def sharded_params(self, shards: int) -> int:
        """Parameters the most loaded rank holds when every tensor is split on dim 0 into ``shards`` chunks of
        ``ceil(rows / shards)`` rows (FSDP2 ``fully_shard``: rank 0 gets a full chunk; padding is not stored)."""
        return sum(-(-rows // shards) * rest for rows, rest in self.param_shapes())

    @property
    def linear_params(self) -> int:
        """Weights of the matmuls (projections and output head, no biases or norms): what autocast casts to 16 bits
        and keeps for the backward pass.

        Raises:
            UnknownArchitecture: a mixture of experts (which experts' weights autocast casts depends on the router).
        """
        self.require_dense("the autocast weight copies are")
        per_layer = (
            self.hidden * 4 * self.hidden
            if self.family == "gpt2"
            else 2 * self.hidden * self.q_width + 2 * self.hidden * self.kv_width
        ) + 2 * self.hidden * self.intermediate
        per_layer += 0 if self.family == "gpt2" else self.hidden * self.intermediate
        return self.layers * per_layer + self.vocab * self.hidden

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token, PaLM Appendix B (Chowdhery et al. 2022): ``6·N + 12·L·a·d·s``, N the parameters a
        token uses (:attr:`active_params`: a mixture of experts counts its ``top_k`` experts, as Mixtral's 12.9 B of
        46.7 B).

        Args:
            seq_len: s, tokens per sample.

        Returns:
            FLOPs per trained token (forward + backward), recompute not counted (MFU's convention).
        """
        return 6.0 * self.active_params + 12.0 * self.layers * self.heads * self.head_dim * seq_len

    def forward_flops_per_token(self, seq_len: int) -> float:
        """One forward pass per token, a third of :meth:`flops_per_token` (``2·N + 4·L·a·d·s``): what full
        activation checkpointing adds (one extra forward of every checkpointed layer)."""
        return self.flops_per_token(seq_len) / 3.0
