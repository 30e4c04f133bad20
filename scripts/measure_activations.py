"""Measure what transformers' own model code keeps for the backward, per token, on the CPU.

    python scripts/measure_activations.py [MODEL_TYPE ...]

The figures the memory estimate is built on (launcher/plan/layer_bytes.py holds them per model family),
measured on the real model code of the transformers this project trains with (random weights, bf16, sdpa
attention), for every family in that table or the model types given:

- the bytes one decoder layer saves for the backward per token, without gradient checkpointing: every
  tensor autograd saves (torch.autograd.graph.saved_tensors_hooks), counted once per storage, parameters
  left out; the difference between 2 and 4 layers and between 256 and 512 tokens isolates one layer's
  per-token share. Fitted over four shapes as a·h + q·(heads x head_dim) + kv·(kv_heads x head_dim) + m·i
  (h the hidden size, i the MLP's intermediate size).
- under eager attention, the bytes one layer saves per head x length^2 (the fp32 softmax and its 16-bit
  copy: 6 in bf16; Gemma-2's soft-capping 8; gpt-oss's 16-bit softmax 2), by
  `eager_scores_bytes(model_type, dtype)`.
- the bytes of the logits per token x vocabulary entry that the loss saves for its backward (exact, as
  above, at two vocabulary sizes). Their peak, in the loss's backward, adds the two fp32 gradients of the
  same shape that log-softmax's backward takes and makes; peak resident memory was tried as a meter of
  the whole and is too coarse (4.8 to 12.3 bytes between runs of the same code), so it is not used.
- a LoRA layer: its base with frozen weights (`frozen=True`) and peft's adapters on it (`lora=Lora(...)`,
  DoRA's with `dora=True`), as a bf16 GPU run trains them (autocast, dropout's 1-byte mask), by
  `layer_bytes_per_token`.
- an MoE layer (`Routing`: experts, experts per token, expert width, shared experts), by
  `layer_bytes_per_token(model_type, shape, routing)`: the stack test holds the estimate's routed-pair,
  router and shared-expert terms to it (not printed here).
- a vision tower's block per patch (Qwen2-VL, Qwen2.5-VL, Qwen3-VL: VISION_TOWERS; CLIP, SigLIP, InternViT,
  Idefics3's, Pixtral's: IMAGE_TOWERS; or those named), trained, at 256 and 1024 patches and 2 and 4 blocks,
  fitted as a·vh + m·vi (vh the tower's width, vi its MLP's).

Saved tensors are what the CUDA kernels save as well (sdpa's flash and memory-efficient kernels keep q, k,
v, the output and the log-sum-exp, as the CPU one does). tests/stack/test_activation_bytes_real.py holds
the table to these.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from launcher.plan.layer_bytes import FROZEN_MEASURED, MEASURED, VISION_MEASURED, LayerBytes

HIDDEN = 256
HEADS = 4
TOKENS = (256, 512)
LAYERS = (2, 4)


@dataclass(frozen=True)
class LayerShape:
    """A decoder layer's widths: hidden, k/v heads (of HEADS), intermediate, head size."""

    hidden: int
    kv_heads: int
    intermediate: int
    head_dim: int = HIDDEN // HEADS

    @property
    def q_width(self) -> int:
        return HEADS * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim


# The base shape, then one wider in the MLP, one with more k/v heads, one with larger heads (q wider than h).
SHAPES = (
    LayerShape(HIDDEN, 2, 704),
    LayerShape(HIDDEN, 2, 1408),
    LayerShape(HIDDEN, 4, 704),
    LayerShape(HIDDEN, 2, 704, head_dim=2 * HIDDEN // HEADS),
)


@dataclass(frozen=True)
class Routing:
    """An MoE layer's experts: how many, how many per token, one expert's width, the shared experts' width."""

    experts: int
    per_token: int
    width: int
    shared: int = 0

    def config(self) -> dict[str, Any]:
        """Every family's spelling at once: Mixtral's experts are intermediate_size wide (num_local_experts),
        Qwen's moe_intermediate_size (num_experts); a config takes the keys it knows."""
        found: dict[str, Any] = {
            "num_experts": self.experts,
            "num_local_experts": self.experts,
            "num_experts_per_tok": self.per_token,
            "moe_intermediate_size": self.width,
            "decoder_sparse_step": 1,  # every layer an MoE layer
            "mlp_only_layers": [],
        }
        if self.shared:
            found["shared_expert_intermediate_size"] = self.shared
        return found


def _model(
    model_type: str,
    shape: LayerShape,
    layers: int,
    vocab: int,
    routing: Routing | None = None,
    attention: str = "sdpa",
    dtype: str = "bfloat16",
    attention_dropout: float = 0.0,
) -> Any:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(
        model_type,
        **(routing.config() if routing else {}),
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_attention_heads=HEADS,
        num_key_value_heads=shape.kv_heads,
        num_hidden_layers=layers,
        vocab_size=vocab,
        max_position_embeddings=8192,
        head_dim=shape.head_dim,  # Gemma's config would default to 256
        attention_dropout=attention_dropout,
        pad_token_id=0,  # the families' own token ids lie beyond these small vocabularies
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype), attn_implementation=attention)
    model.train()
    return model


def _saved_by(module: Any, forward: Any) -> int:
    """Bytes autograd saves for the backward while `forward()` runs: each storage once, `module`'s
    parameters left out (they are weights, not activations)."""
    import torch

    params = {p.untyped_storage().data_ptr() for p in module.parameters()}
    seen: dict[int, int] = {}

    def pack(tensor: Any) -> int:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        _KEPT.append(tensor)
        return len(_KEPT) - 1

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, _no_backward):
            forward()
    finally:
        _KEPT.clear()
    return sum(seen.values())


# Every tensor a measuring forward saves, alive until its count is done (no storage address is reused
# within it). The graph keeps an index and the hooks reach no tensor: a tensor packed as itself, or a list
# of them in the hook's closure, ties the graph to itself through C++, a cycle that is never freed (each
# forward leaked its model and activations).
_KEPT: list[Any] = []


def _no_backward(_: int) -> Any:
    raise RuntimeError("a measuring forward is never run backward")


@dataclass(frozen=True)
class Lora:
    """peft LoRA adapters as swift applies them: the linears adapted, the rank, lora_dropout (the adapters
    in fp32: peft's autocast for a 16-bit model, swift's default without --lora_dtype)."""

    targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    rank: int = 8
    dropout: float = 0.05
    dora: bool = False  # --use_dora true: peft's DoRA layer


@contextlib.contextmanager
def _dropout_as_on_cuda() -> Iterator[None]:
    """F.dropout (nn.Dropout's, and eager attention's own call) as CUDA runs it: torch.native_dropout, whose
    backward keeps a 1-byte bool mask. On the CPU it multiplies by a noise tensor and keeps that instead
    (at the input's width: 4 bytes an entry for peft's fp32 adapter input)."""
    import torch

    functional = torch.nn.functional.dropout

    def native(tensor: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
        if not training or p == 0:
            return tensor
        return torch.native_dropout(tensor, p, True)[0]

    torch.nn.functional.dropout = native  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.nn.functional.dropout = functional


def _with_lora(model: Any, lora: Lora) -> Any:
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=lora.rank, target_modules=list(lora.targets), lora_dropout=lora.dropout, use_dora=lora.dora)
    adapted = get_peft_model(model, config)
    adapted.train()
    return adapted


def _saved_bytes(model: Any, tokens: int, frozen: bool = False) -> int:
    """Bytes autograd saves for the backward in one forward with labels. `frozen`: the model's own weights
    frozen and its input embeddings requiring a gradient, as under LoRA (peft freezes the base, and
    swift's enable_input_require_grads lets checkpointed layers backpropagate), run as a bf16 GPU run
    trains: under bf16 autocast (accelerate's, for single-GPU and DDP runs; it computes peft's fp32
    adapters at 16 bits) with dropout as CUDA runs it."""
    import torch

    ids = torch.randint(0, model.config.vocab_size, (1, tokens))
    if not frozen:
        return _saved_by(model, lambda: model(input_ids=ids, labels=ids))
    embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)
    with _dropout_as_on_cuda(), torch.autocast("cpu", dtype=torch.bfloat16):
        return _saved_by(model, lambda: model(inputs_embeds=embeds, labels=ids))


def layer_bytes_per_token(
    model_type: str, shape: LayerShape, routing: Routing | None = None, frozen: bool = False, lora: Lora | None = None
) -> float:
    """One decoder layer's saved bytes per token (no gradient checkpointing); an MoE layer with `routing`
    (random weights route the tokens about evenly; what a token saves does not depend on where it goes);
    `frozen` with its weights frozen, and `lora` with peft's adapters on it as well."""
    per_token = []
    for layers in LAYERS:
        model = _model(model_type, shape, layers, vocab=4000, routing=routing)
        if frozen or lora:
            model.requires_grad_(False)
        if lora:
            model = _with_lora(model, lora)
        short, long = (_saved_bytes(model, tokens, frozen or lora is not None) for tokens in TOKENS)
        per_token.append((long - short) / (TOKENS[1] - TOKENS[0]))
    return (per_token[1] - per_token[0]) / (LAYERS[1] - LAYERS[0])


# An MoE family's eager attention is measured with two narrow experts, one per token: its experts' forward
# keeps each token's experts' weights (batched_mm), which at its default 32 experts and top-4 fills the
# host's memory, and the length^2 term does not depend on the MLP.
SMALL_MOE = (LayerShape(HIDDEN, 2, 64), Routing(2, 1, 64))


def _is_moe(model_type: str) -> bool:
    from transformers import AutoConfig

    config = AutoConfig.for_model(model_type)
    return any(hasattr(config, key) for key in ("num_local_experts", "num_experts"))


def eager_scores_bytes(model_type: str, dtype: str = "bfloat16", attention_dropout: float = 0.0) -> float:
    """Bytes per head x length^2 that one layer's eager attention saves: 2 and 4 layers isolate one layer's
    bytes, and 256 and 512 tokens their length^2 term (a layer's other tensors grow with the length). With
    `attention_dropout`, the dropout runs as on CUDA (its 1-byte mask)."""
    shape, routing = SMALL_MOE if _is_moe(model_type) else (SHAPES[0], None)
    per_layer = {}
    with _dropout_as_on_cuda():
        for tokens in TOKENS:
            two, four = (
                _saved_bytes(
                    _model(model_type, shape, layers, 4000, routing, "eager", dtype, attention_dropout), tokens
                )
                for layers in LAYERS
            )
            per_layer[tokens] = (four - two) / (LAYERS[1] - LAYERS[0])
    short, long = TOKENS
    # per_layer = c·heads·tokens^2 + d·tokens: scaling the shorter run's by long/short cancels d
    return (per_layer[long] - per_layer[short] * long / short) / (HEADS * (long**2 - short * long))


def logit_saved_bytes_per_entry(model_type: str, tokens: int = 512, vocabs: tuple[int, int] = (4000, 8000)) -> float:
    """Bytes per token x vocabulary entry the loss saves for its backward (exact: saved tensors)."""
    low, high = (_saved_bytes(_model(model_type, SHAPES[0], 2, vocab), tokens) for vocab in vocabs)
    return (high - low) / (tokens * (vocabs[1] - vocabs[0]))


def layer_coefficients(model_type: str, frozen: bool = False) -> LayerBytes:
    """a·h + q·q_width + kv·kv_width + m·i bytes per token from the four SHAPES, and the loss's bytes;
    `frozen`: of the layer with its weights frozen (LoRA's base, before its adapters)."""
    base, wider_mlp, wider_kv, wider_heads = (
        layer_bytes_per_token(model_type, shape, frozen=frozen) for shape in SHAPES
    )
    first, heads = SHAPES[0], SHAPES[3]
    m = (wider_mlp - base) / (SHAPES[1].intermediate - first.intermediate)
    kv = (wider_kv - base) / (SHAPES[2].kv_width - first.kv_width)
    # larger heads widen q and k/v together
    q = (wider_heads - base - kv * (heads.kv_width - first.kv_width)) / (heads.q_width - first.q_width)
    a = (base - q * first.q_width - kv * first.kv_width - m * first.intermediate) / first.hidden
    return LayerBytes(a, q, kv, m, logit_saved_bytes_per_entry(model_type))


# The vision towers measured (VISION_MEASURED). Those that take a flat run of patches and a grid_thw,
# keyed by the multimodal model's model_type: the tower's class.
VISION_TOWERS = {
    "qwen2_vl": "transformers.models.qwen2_vl.modeling_qwen2_vl.Qwen2VisionTransformerPretrainedModel",
    "qwen2_5_vl": "transformers.models.qwen2_5_vl.modeling_qwen2_5_vl.Qwen2_5_VisionTransformerPretrainedModel",
    "qwen3_vl": "transformers.models.qwen3_vl.modeling_qwen3_vl.Qwen3VLVisionModel",
}
# Those that take whole images (pixel_values: images x 3 x side x side), keyed by the tower's own
# model_type (vision_config.model_type): CLIP's (LLaVA, LLaVA-NeXT), SigLIP's (Gemma 3, PaliGemma,
# LLaVA-OneVision, Aya Vision), InternViT's (InternVL), Idefics3's (Idefics3, SmolVLM), Pixtral's (Mistral 3).
IMAGE_TOWERS = {
    "clip_vision_model": "transformers.CLIPVisionModel",
    "siglip_vision_model": "transformers.SiglipVisionModel",
    "internvl_vision": "transformers.InternVLVisionModel",
    "idefics3_vision": "transformers.models.idefics3.modeling_idefics3.Idefics3VisionTransformer",
    "pixtral": "transformers.PixtralVisionModel",
}
GRIDS = (16, 32)  # patches per image side: 256 and 1024 patches
PATCH = 14  # pixels per patch side of the image towers measured


def _class(path: str) -> Any:
    import importlib

    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def _tower(model_type: str, blocks: int, intermediate: int) -> Any:
    import torch
    from transformers import AutoConfig

    vision = AutoConfig.for_model(model_type).vision_config
    sizes = {
        "depth": blocks,
        "hidden_size": HIDDEN,
        "embed_dim": HIDDEN,  # Qwen2-VL's width
        "num_heads": HEADS,
        "out_hidden_size": HIDDEN,
        "intermediate_size": intermediate,
        "mlp_ratio": intermediate // HIDDEN,  # Qwen2-VL's MLP
    }
    for key, value in sizes.items():
        setattr(vision, key, value)
    vision.fullatt_block_indexes = []  # Qwen2.5-VL's windowed blocks attend the same per patch
    vision.deepstack_visual_indexes = []  # Qwen3-VL's deepstack mergers are not blocks
    vision._attn_implementation = "sdpa"
    torch.manual_seed(0)
    tower = _class(VISION_TOWERS[model_type])._from_config(vision, dtype=torch.bfloat16)
    tower.train()
    return tower


def _tower_saved_bytes(tower: Any, grid: int) -> int:
    """Bytes autograd saves in one forward of a grid x grid patch image through a trained tower."""
    import torch

    config = tower.config
    pixels = torch.randn(grid * grid, 3 * config.temporal_patch_size * config.patch_size**2, dtype=torch.bfloat16)
    return _saved_by(tower, lambda: tower(pixels, grid_thw=torch.tensor([[1, grid, grid]])))


def _image_tower_saved_bytes(tower_type: str, blocks: int, intermediate: int, grid: int) -> int:
    """Bytes autograd saves in one forward of one grid x grid patch image through a trained image tower
    (built for that image size: its position embeddings are one per patch)."""
    import torch
    from transformers import AutoConfig

    config = AutoConfig.for_model(tower_type)
    side = grid * PATCH
    pair = isinstance(config.image_size, list | tuple)  # InternViT's sizes are (height, width)
    sizes = {
        "hidden_size": HIDDEN,
        "num_attention_heads": HEADS,
        "head_dim": HIDDEN // HEADS,
        "intermediate_size": intermediate,
        "num_hidden_layers": blocks,
        "image_size": (side, side) if pair else side,
        "patch_size": (PATCH, PATCH) if pair else PATCH,
    }
    for key, value in sizes.items():
        setattr(config, key, value)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    tower = _class(IMAGE_TOWERS[tower_type])._from_config(config, dtype=torch.bfloat16)
    tower.train()
    image = torch.randn(1, 3, side, side, dtype=torch.bfloat16)
    sizes_arg = {"image_sizes": torch.tensor([[side, side]])} if tower_type == "pixtral" else {}
    return _saved_by(tower, lambda: tower(pixel_values=image, **sizes_arg))


def vision_block_bytes_per_patch(model_type: str, intermediate: int) -> float:
    """One vision block's saved bytes per patch: 2 and 4 blocks at 256 and 1024 patches (a class token or
    a pooling head is the same at 2 and 4 blocks, so it drops out)."""
    per_patch = []
    for blocks in LAYERS:
        if model_type in IMAGE_TOWERS:
            small, large = (_image_tower_saved_bytes(model_type, blocks, intermediate, grid) for grid in GRIDS)
        else:
            tower = _tower(model_type, blocks, intermediate)
            small, large = (_tower_saved_bytes(tower, grid) for grid in GRIDS)
        per_patch.append((large - small) / (GRIDS[1] ** 2 - GRIDS[0] ** 2))
    return (per_patch[1] - per_patch[0]) / (LAYERS[1] - LAYERS[0])


def vision_coefficients(model_type: str) -> LayerBytes:
    """a·vh + m·vi bytes per patch, at MLP widths 4 and 8 x the tower's width."""
    narrow, wide = (vision_block_bytes_per_patch(model_type, k * HIDDEN) for k in (4, 8))
    m = (wide - narrow) / (4 * HIDDEN)
    return LayerBytes((narrow - m * 4 * HIDDEN) / HIDDEN, 0, 0, m)


def _layer_terms(found: LayerBytes) -> str:
    return f"{found.hidden:.2f} h + {found.q:.2f} q + {found.kv:.2f} kv + {found.mlp:.2f} i"


def _terms(found: LayerBytes) -> str:
    return f"{_layer_terms(found)}; loss {found.logit_saved:.2f}"


def main() -> int:
    import transformers

    asked = sys.argv[1:]
    all_towers = [*VISION_TOWERS, *IMAGE_TOWERS]
    families = [t for t in asked if t not in all_towers] if asked else list(MEASURED)
    towers = [t for t in asked if t in all_towers] if asked else all_towers
    print(f"transformers {transformers.__version__}, bf16, sdpa, CPU: bytes saved for the backward per token")
    print("(eager: what one layer saves per head x length^2)")
    print()
    print("| model_type | measured: per layer; per logit entry | launcher/plan/layer_bytes.py | eager, per score |")
    print("| --- | --- | --- | --- |")
    for model_type in families:
        ours = MEASURED.get(model_type)
        held = "not in the table" if ours is None else _terms(ours)
        eager = f"{eager_scores_bytes(model_type):.2f}"
        print(f"| {model_type} | {_terms(layer_coefficients(model_type))} | {held} | {eager} |")
    print()
    print("The same layers frozen, as LoRA leaves its base (bf16 autocast):")
    print()
    print("| model_type | measured | launcher/plan/layer_bytes.py FROZEN_MEASURED |")
    print("| --- | --- | --- |")
    for model_type in families:
        frozen = FROZEN_MEASURED.get(model_type)
        held = "not in the table" if frozen is None else _layer_terms(frozen)
        print(f"| {model_type} | {_layer_terms(layer_coefficients(model_type, frozen=True))} | {held} |")
    print()
    print("Vision towers, bytes saved per patch and block (vh the tower's width, vi its MLP's):")
    print()
    print("| model_type | measured | launcher/plan/layer_bytes.py |")
    print("| --- | --- | --- |")
    for model_type in towers:
        found, held = vision_coefficients(model_type), VISION_MEASURED.get(model_type)
        ours = "not in the table" if held is None else f"{held.hidden:.2f} vh + {held.mlp:.2f} vi"
        print(f"| {model_type} | {found.hidden:.2f} vh + {found.mlp:.2f} vi | {ours} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
