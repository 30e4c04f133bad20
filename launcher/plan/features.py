"""swift's training features, read once from its arguments into the terms of the memory estimate.

Contract: pure. `read_features(swift, model, env)` returns what launcher.plan.estimate's TrainShape needs
beyond sizes and batch: which parameters carry gradients and optimizer state, how sequence parallelism
splits the tokens, whether batches are padding-free, where logits are computed, the MoE experts
implementation and the image-token limit, plus warnings for set-ups ms-swift 4.6 itself refuses.
What each argument does is read from ms-swift 4.6's source:

- `--tuner_type` lora (default) / full / lora_llm (LoRA on the LLM, the ViT and aligner fully trained);
  LLaMA-Factory's `freeze` (read by its backend as this field) trains the decoder's last
  `freeze_trainable_layers` layers (2; the first ones where negative) and its `freeze_extra_modules`;
  `--target_modules` (default `all-linear`; `--target_regex` replaces
  it); `--modules_to_save`; `--trainable_parameters` (prefixes made trainable whatever froze them);
  `--freeze_llm` (False), `--freeze_vit` (True), `--freeze_aligner` (True): for full tuning they freeze
  that part (swift/arguments/tuner_args.py `_init_multimodal_full`); for LoRA with all-linear they keep
  adapters off that part. `--freeze_parameters_ratio` (the first share of the parameters, bottom up) and
  `--freeze_parameters` (embeddings, head, vision tower by name) freeze more of a full tuning.
- `--sequence_parallel_size S` (swift/sequence_parallel): a forward pre-hook splits every sample's tokens
  S ways; Ulysses all-to-alls q/k/v over gcd(kv heads, S) ranks, and the remaining factor runs ring
  attention, which needs `--padding_free true`. The loss is gathered, the logits stay local; with
  CELOSS_PARALLEL_SIZE set, the cross-entropy runs in chunks of that many tokens. use_logits_to_keep is
  off under sequence parallelism.
- `--padding_free` / `--packing` (packing implies padding_free): flash-attention's varlen kernel, no
  padding; swift 4.6 refuses both without a flash `--attn_impl`.
- `--use_logits_to_keep` (default: on where the model's forward takes `logits_to_keep`, transformers 5):
  logits only from the first label on.
- `--experts_impl grouped_mm | batched_mm | eager` (transformers 5's MoE experts forward).
- `--target_modules`, `--lora_rank`, `--lora_dropout` (0.05), `--use_dora`: LoRA's adapters, whose
  inputs (and under DoRA outputs) the activations count (`lora_adapters`).
- `--quant_bits` without `--quant_method`: swift quantizes nothing (a warning; launcher/plan/sizing.py
  counts the weights unquantized).
The warnings of what ms-swift itself refuses or ignores (padding-free without flash attention, quant_bits
without a method) are `swift_warnings`, apart: another trainer (LLaMA-Factory packs with any attention,
and quantizes with bitsandbytes by default) does not share them.
- `--attn_impl`: unset, eager where swift's loader or transformers chooses it
  (launcher/plan/attention_default.py), sdpa otherwise.
- IMAGE_MAX_TOKEN_NUM (Qwen-VL families via qwen_vl_utils; it wins over MAX_PIXELS, which swift converts
  to it only when it is unset), MAX_PIXELS, `--max_pixels`; none set, the cap of the family's processor
  (launcher/plan/vision_budget.py: 16384 tokens for Qwen-VL).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from math import gcd

from launcher.model import ModelFacts
from launcher.plan.attention_default import swift_runs_eager
from launcher.plan.estimate import (
    LORA_FALLBACK_FRACTION,
    VISION_PATCH,
    Adapters,
    adapted_mlp_width,
    inputs_of,
    layer_linears,
    lora_trainable_params,
    outputs_of,
    planned_length,
    q_kv_widths,
)
from launcher.plan.image_tiles import fixed_image, image_merge, model_tiling, tiles_budget
from launcher.plan.swift_args import SwiftArgs
from launcher.plan.vision_budget import (
    ASSUMED_IMAGE_PIXELS,
    IMAGE_MAX_TOKEN_NUM,
    MAX_PIXELS,
    TILES,
    budget_family,
    budget_pixels,
    budget_value,
    vision_budget_for,
)

FLASH_IMPLS = frozenset({"flash_attn", "flash_attention_2", "flash_attention_3", "flash_attention_4"})
VISION_PREFIXES = ("visual", "vision_tower", "vision_model", "vit", "vpm")
EMBEDDING_NAMES = ("embed_tokens", "lm_head")
VISION_LORA_PER_HIDDEN = 16  # qkv (vh + 3vh), proj (2vh), fc1 (vh + 4vh), fc2 (4vh + vh): 16vh per layer


@dataclass(frozen=True)
class Features:
    """The features' part of a TrainShape, and what the plan should warn about."""

    trainable_params: int
    vision_trainable: bool
    sequence_parallel: int
    sequence_ring: bool
    padding_free: bool
    packing: bool
    logits_on_labels: bool
    loss_chunk_tokens: int
    experts_impl: str | None
    eager_attention: bool
    image_pixels: int
    adapters: Adapters | None = None  # LoRA on the decoder layers: what their activations add
    warnings: tuple[str, ...] = ()
    swift_warnings: tuple[str, ...] = ()  # of what ms-swift itself refuses or ignores: for its backend alone


def tuner_of(swift: SwiftArgs) -> str:
    return swift.get("tuner_type") or swift.get("train_type") or "lora"


# swift 4.6 quantizes at load only with --quant_method set (swift/arguments/base_args/quant_args.py
# get_quantization_config: no method, no quantization_config); fp8 takes no --quant_bits.
LOAD_TIME_METHODS = frozenset({"bnb", "hqq", "eetq", "quanto"})


def quantized_at_load(swift: SwiftArgs) -> tuple[int, str] | None:
    """(bits, method) where swift quantizes the model as it loads it: --quant_method with --quant_bits."""
    bits, method = swift.get("quant_bits"), swift.get("quant_method")  # swift also takes `float8`
    return (int(bits), method) if method in LOAD_TIME_METHODS and bits in ("2", "3", "4", "8") else None


def quantization_of(swift: SwiftArgs, model: ModelFacts) -> tuple[int | None, str | None]:
    """The frozen weights' (bits, method: bnb, hqq, gptq, awq, ...): swift's quantization at load, else a
    pre-quantized checkpoint's."""
    return quantized_at_load(swift) or (model.quant_bits, model.quant_method)


# transformers' quantizers for FP8 checkpoints: neither is trainable (is_trainable False), and both dequantize to
# bf16 on GPUs older than compute capability 8.9
FP8_METHODS = frozenset({"fp8", "fbgemm_fp8"})


def is_lora(swift: SwiftArgs) -> bool:
    """An adapter tuner (LoRA and its kin): the base weights stay frozen; not full, not LLaMA-Factory's freeze."""
    return tuner_of(swift) not in ("full", "freeze")


def _words(swift: SwiftArgs, key: str) -> tuple[str, ...]:
    value = swift.get(key)
    return tuple(value.replace(",", " ").split()) if value else ()


def _int_env(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name, "").strip()
    return int(value) if value.isdigit() else None


def lora_params(
    model: ModelFacts,
    rank: int,
    targets: tuple[str, ...],
    *,
    llm: bool,
    vision: bool,
    parameters: tuple[str, ...] = (),
) -> tuple[int, tuple[str, ...]]:
    """LoRA parameters: rank x (in + out) per targeted linear of each layer; `all-linear` targets every
    linear (of the LLM unless frozen, of the ViT when not frozen).

    An MoE layer's routed experts are no linears in transformers 5: each layer keeps them as two fused 3-D
    parameters (`mlp.experts.gate_up_proj`, `mlp.experts.down_proj`), which swift's all-linear (modules
    whose class name says Linear) and a q/k/v/o/gate/up/down name pass over. Only the shared experts'
    MLP is a linear there; `--target_parameters` naming the fused parameters gives every routed expert its
    own rank-r adapter (peft's ParamWrapper)."""
    h, i, layers = model.hidden_size, model.intermediate_size, model.num_layers
    if not (h and i and layers):
        return int((model.total_params or 0) * LORA_FALLBACK_FRACTION), ()
    linears = decoder_linears(model)
    if "all-linear" in targets or not targets:
        names, unknown = tuple(linears), []
    else:
        names = targets
        unknown = [t for t in targets if t not in linears]
    total = 0
    if llm:
        experts = 0
        if model.num_experts and model.moe_intermediate_size:
            experts = model.num_experts * routed_expert_adapters(h, model.moe_intermediate_size, parameters)
        total += lora_trainable_params(linears, names, layers, rank, experts)
    if vision and model.vision_hidden_size and model.vision_layers and "all-linear" in targets:
        total += model.vision_layers * rank * VISION_LORA_PER_HIDDEN * model.vision_hidden_size
    return total, tuple(unknown)


def decoder_linears(model: ModelFacts) -> dict[str, tuple[int, int]]:
    """(input, output) width of each linear LoRA can adapt in one decoder layer, by the family's names: q is
    heads x head_dim wide, k and v kv_heads x head_dim (GQA); an MoE layer's MLP linears are its shared
    experts' (its routed experts are fused parameters, none where it has no shared experts)."""
    h = model.hidden_size or 0
    q, kv = q_kv_widths(h, model.num_attention_heads, model.num_key_value_heads, model.head_dim)
    mlp = adapted_mlp_width(model.intermediate_size, bool(model.num_experts), model.shared_expert_intermediate_size)
    return layer_linears(model.decoder_type or model.model_type, h, q, kv, mlp)


def lora_adapters(swift: SwiftArgs, model: ModelFacts) -> Adapters | None:
    """LoRA's adapters on one decoder layer, as the activations see them: the input width of each adapted
    q/k/v/o and MLP projection (an MoE layer's MLP adapters are its shared experts'; its routed experts are
    parameters, not linears), the rank and --lora_dropout (--lora_dtype does not matter: a bf16 run computes
    the adapters at 16 bits either way). None without LoRA on the LLM.
    A family's fused linears (Phi-3's qkv_proj and gate_up_proj, GPT-NeoX's query_key_value) are one
    adapter each, by the family's own names (launcher.plan.estimate.FAMILY_LINEARS)."""
    h = model.hidden_size
    frozen_llm = swift.get_bool("freeze_llm", False) and model.is_multimodal
    if not is_lora(swift) or frozen_llm or not h:
        return None
    linears = decoder_linears(model)
    targets = _words(swift, "target_modules") or ("all-linear",)
    if "all-linear" in targets or swift.get("target_regex"):
        targets = tuple(linears)
    dora = outputs_of(linears, targets) if swift.get_bool("use_dora", False) else 0
    rank, dropout = swift.get_int("lora_rank", 8), _dropout_on(swift.get("lora_dropout"))
    return Adapters(inputs_of(linears, targets), rank, dropout, dora)


def _ratio(value: str | None) -> float:
    """A ratio between 0 and 1; a value that is not a number is left to swift to refuse (0 here)."""
    try:
        return min(max(float(value or 0), 0.0), 1.0)
    except ValueError:
        return 0.0


def _dropout_on(value: str | None) -> bool:
    """--lora_dropout above 0 (swift's default 0.05); a value that is not a number is left to swift to refuse."""
    try:
        return value is None or float(value) > 0
    except ValueError:
        return True


def routed_expert_adapters(hidden: int, expert_width: int, parameters: tuple[str, ...]) -> int:
    """in + out of one routed expert's fused parameters that --target_parameters names: gate_up_proj maps
    the hidden size to gate and up (2 x the expert's width), down_proj maps back."""
    widths = {"gate_up_proj": hidden + 2 * expert_width, "down_proj": expert_width + hidden}
    return sum(width for suffix, width in widths.items() if any(p.endswith(suffix) for p in parameters))


def _named_params(model: ModelFacts, names: tuple[str, ...]) -> tuple[int, tuple[str, ...]]:
    """Parameters of modules named by prefix (trainable_parameters, modules_to_save): the embeddings, the
    head, the vision tower; other names are not known without loading the model."""
    vocab_h = (model.vocab_size or 0) * (model.hidden_size or 0)
    embeddings = {e for name in names for e in EMBEDDING_NAMES if e in name}
    vision = any(_is_vision(name) for name in names)
    unknown = tuple(n for n in names if not _is_vision(n) and not any(e in n for e in EMBEDDING_NAMES))
    shared = model.tie_word_embeddings and embeddings
    total = vocab_h * (1 if shared else len(embeddings)) + (model.vision_params if vision else 0)
    return total, unknown


def last_layers_params(model: ModelFacts, layers: int) -> int:
    """Parameters of `layers` decoder layers (LLaMA-Factory's freeze tuning; negative: its first ones, as
    many): the decoder's share of the model, the embeddings, the head and the vision tower left out."""
    total, count = model.total_params or 0, model.num_layers or 0
    if not count:
        return total
    embeddings = (model.vocab_size or 0) * (model.hidden_size or 0) * (1 if model.tie_word_embeddings else 2)
    decoder = max(total - embeddings - model.vision_params, 0)
    return decoder * min(abs(layers), count) // count


def _is_vision(name: str) -> bool:
    return any(part in VISION_PREFIXES for part in name.split("."))


def trainable_params(
    swift: SwiftArgs, model: ModelFacts, adapters: Adapters | None
) -> tuple[int, bool, tuple[str, ...]]:
    """(parameters carrying gradients and optimizer state, whether the vision tower is trained, warnings);
    `adapters` are the run's (lora_adapters): under DoRA each adapted output trains a magnitude."""
    total = model.total_params or 0
    warnings: list[str] = []
    freeze_llm = swift.get_bool("freeze_llm", False) and model.is_multimodal
    freeze_vit = swift.get_bool("freeze_vit", True)
    targets = _words(swift, "target_modules") or ("all-linear",)
    if swift.get("target_regex"):
        targets = ("all-linear",)
        warnings.append("--target_regex is counted as all-linear (its matches are not known before loading)")
    extra_names = _words(swift, "trainable_parameters") + _words(swift, "modules_to_save")
    extra, unknown_extra = _named_params(model, extra_names)
    vision_named = any(_is_vision(n) for n in extra_names)
    if is_lora(swift):
        rank = swift.get_int("lora_rank", 8)
        parameters = _words(swift, "target_parameters")
        lora, unknown = lora_params(
            model, rank, targets, llm=not freeze_llm, vision=not freeze_vit, parameters=parameters
        )
        if unknown:
            warnings.append(
                f"--target_modules {' '.join(unknown)}: not a linear of this model's decoder layers "
                f"({', '.join(decoder_linears(model))}), its LoRA parameters are not counted"
            )
        magnitudes = (model.num_layers or 0) * adapters.dora_outputs if adapters is not None else 0
        trainable = lora + magnitudes + extra
        vision_trained = not freeze_vit or vision_named
        if (swift.get("tuner_type") or "") == "lora_llm" and not vision_named:
            # swift/tuner_plugin/lora_llm.py: LoRA on the LLM, the vision tower and aligner fully trained
            trainable += model.vision_params
            vision_trained = model.vision_params > 0
    elif tuner_of(swift) == "freeze":
        named, unknown_named = _named_params(model, _words(swift, "freeze_extra_modules"))
        trainable = last_layers_params(model, swift.get_int("freeze_trainable_layers", 2)) + named
        vision_trained = False
        if unknown_named:
            warnings.append(
                f"freeze_extra_modules {' '.join(unknown_named)}: their size is not known before loading, not counted"
            )
    else:
        trainable = total
        if freeze_vit and not vision_named:
            trainable -= model.vision_params
        if freeze_llm:
            trainable -= max(total - model.vision_params, 0)
            trainable += extra if not vision_named else 0
        # swift's freeze_parameters(): the first --freeze_parameters_ratio of the parameters, in the model's
        # order (the embeddings, then the layers from the bottom up), and the modules --freeze_parameters names.
        # Where both are given, the larger counts (the embeddings lie inside the first share): trainable at most
        frozen_named, _unknown = _named_params(model, _words(swift, "freeze_parameters"))
        frozen = max(int(total * _ratio(swift.get("freeze_parameters_ratio"))), frozen_named)
        trainable = min(trainable, total - frozen)
        vision_trained = (not freeze_vit or vision_named) and model.vision_params > 0
    if unknown_extra:
        warnings.append(
            f"--trainable_parameters/--modules_to_save {' '.join(unknown_extra)}: their size is not known "
            "before loading, not counted"
        )
    return max(min(trainable, total), 0), vision_trained, tuple(warnings)


def image_token_side(model: ModelFacts) -> int:
    """Pixels on the side of the square one image token covers (merged patches)."""
    return image_merge(model.model_type) * (model.vision_patch_size or VISION_PATCH)


def image_pixels(swift: SwiftArgs, model: ModelFacts, env: Mapping[str, str]) -> int:
    """One image's pixels at most: its fixed tiles in a family that cuts images into them
    (launcher.plan.image_tiles), else IMAGE_MAX_TOKEN_NUM, else MAX_PIXELS or `--max_pixels`, else the cap
    of the family's processor when unset (16384 tokens for Qwen-VL), else an assumed image. Where one token
    is one merged patch square (the families with tiles or a budget), an image brings at most max_length
    tokens: swift drops a longer sample (truncation_strategy delete), and cutting one would split its image
    tokens."""
    token_side = image_token_side(model)
    max_length = planned_length(swift.batch.max_length)
    budget = vision_budget_for(budget_family(swift.get("model_type"), model), env)
    tiling = model_tiling(model)
    reads = budget is not None and budget is tiles_budget(model.model_type)
    fixed = fixed_image(model.model_type, model.vision_image_size, env, tiling=tiling, reads_budget=reads)
    if fixed is not None:
        return min(fixed.pixels, max_length * token_side**2)
    if budget is not None and budget.unit == TILES:  # tiles of a size config.json did not give: not counted
        budget = None
    if budget is not None:  # the variables this processor reads: a value swift would stop on stops the plan
        qwen_vl = budget is MAX_PIXELS or budget is IMAGE_MAX_TOKEN_NUM  # Ovis2.5 reads no token budget
        tokens = budget_value(env, IMAGE_MAX_TOKEN_NUM) if qwen_vl else None
        # MAX_PIXELS with the family's own values (Ovis2.5's), so a bad value's fix names its default
        set_pixels = budget_value(env, budget if budget.env == MAX_PIXELS.env else MAX_PIXELS)
    else:
        tokens, set_pixels = None, _int_env(env, MAX_PIXELS.env)
    given = swift.get_int("max_pixels") or set_pixels
    if tokens:
        pixels = tokens * token_side**2
    elif given:
        pixels = given
    elif budget:
        pixels = budget_pixels(budget, budget.default, token_side)
    else:
        return ASSUMED_IMAGE_PIXELS
    if budget is None:
        return pixels
    return min(pixels, max_length * token_side**2)


def read_features(swift: SwiftArgs, model: ModelFacts, env: Mapping[str, str], world_size: int) -> Features:
    """Every feature of swift's argv (and the swift config's ENV block under `env`) the estimate models."""
    warnings: list[str] = []
    swift_warnings: list[str] = []
    adapters = lora_adapters(swift, model)
    trainable, vision_trained, train_warnings = trainable_params(swift, model, adapters)
    warnings.extend(train_warnings)
    attn = (swift.get("attn_impl") or "").lower()
    packing = swift.get_bool("packing", False)
    padding_free = packing or swift.get_bool("padding_free", False)
    if padding_free and attn not in FLASH_IMPLS:
        feature = "--packing" if packing else "--padding_free"
        swift_warnings.append(
            f"{feature} true needs a flash attention --attn_impl (flash_attn, flash_attention_2/3/4): "
            f"ms-swift 4.6 refuses it with --attn_impl {attn or 'unset'}"
        )
    bits = swift.get("quant_bits")
    if bits is not None and not swift.get("quant_method"):
        swift_warnings.append(
            f"--quant_bits {bits} without --quant_method: ms-swift 4.6 loads the model unquantized, and the "
            "plan counts it so (add --quant_method bnb to quantize it as it loads)"
        )
    quant_bits, quant_method = quantization_of(swift, model)
    if quant_method in FP8_METHODS:
        warnings.append(
            f"{model.name} is saved in FP8 ({quant_method}): on GPUs of compute capability 8.9 or later (4090, L40, "
            "H100, H200) transformers keeps it FP8, which it cannot train (its Trainer stops every rank), unless "
            "quantization_config sets dequantize; on earlier GPUs it loads it as bf16, as the plan counts it"
        )
    if quant_bits and not is_lora(swift):
        what = f"{quant_method}, {quant_bits}-bit"
        if quantized_at_load(swift) is not None:
            what = f"--quant_method {quant_method} --quant_bits {quant_bits}"
        warnings.append(
            f"a {tuner_of(swift)} fine-tune of a quantized model ({what}): transformers' Trainer stops every rank "
            'on it ("You cannot perform fine-tuning on purely quantized models"), and the plan counts the weights '
            "unquantized; train adapters on it (LoRA), or load it unquantized"
        )
    sp = swift.batch.sequence_parallel
    kv_heads = model.num_key_value_heads or model.num_attention_heads
    ring = sp > 1 and kv_heads is not None and sp // gcd(kv_heads, sp) > 1
    if sp > 1:
        if world_size % sp:
            warnings.append(
                f"--sequence_parallel_size {sp} does not divide the {world_size} training processes: "
                "swift's device mesh cannot be built"
            )
        if ring and not padding_free:
            warnings.append(
                f"--sequence_parallel_size {sp} with {kv_heads} key/value heads needs ring attention, which "
                "swift runs only with --padding_free true"
            )
    logits_on_labels = sp == 1 and swift.get_bool("use_logits_to_keep", True)
    chunk = (_int_env(env, "CELOSS_PARALLEL_SIZE") or 0) if sp > 1 else 0
    experts = (swift.get("experts_impl") or "").lower() or None
    pixels = image_pixels(swift, model, env) if model.is_multimodal and model.vision_hidden_size else 0
    return Features(
        trainable_params=trainable,
        vision_trainable=vision_trained,
        sequence_parallel=sp,
        sequence_ring=ring,
        padding_free=padding_free,
        packing=packing,
        logits_on_labels=logits_on_labels,
        loss_chunk_tokens=chunk,
        experts_impl=experts,
        eager_attention=attn == "eager" or (not attn and swift_runs_eager(model.model_type)),
        image_pixels=pixels,
        adapters=adapters,
        warnings=tuple(warnings),
        swift_warnings=tuple(swift_warnings),
    )
