"""Model facts without loading weights.

A local directory: config.json for the shape, and the safetensors headers (8-byte length + JSON) for the
exact parameter count, dtype and largest layer. A hub id: the same from the ModelScope or Hugging Face
cache when it is there. Otherwise the size written in the name ("Qwen2.5-7B-Instruct": about 7B), with a
warning. `--model-params` overrides the count. A size config.json sets to something that is no size (text, a
fraction, a negative) is read as absent, and named in a warning.
"""

from __future__ import annotations

import json
import re
import stat
import struct
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace
from math import prod
from pathlib import Path
from typing import NamedTuple

from launcher.errors import SafeSftError
from launcher.model import ModelFacts, modules_of
from launcher.probe.config_count import (
    ConfigShape,
    config_params,
    gated,
    kv_heads,
    linear_mixer,
    mlp_width,
    tied_unstated,
    vocab_head,
)
from launcher.probe.model_cache import cached_model_dir
from launcher.probe.weight_bytes import (
    DTYPE_BYTES,
    REDOWNLOAD,
    UNREADABLE,
    refuse_lfs_pointer,
    refuse_missing,
    torch_weights,
)

_LAYER_RE = re.compile(r"^(.*?\.(?:layers|h|blocks|layer)\.\d+)\.")
_NAME_SIZE_RE = re.compile(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)\s*([BbMm])(?![A-Za-z])")


class TensorEntry(NamedTuple):
    dtype: str
    shape: tuple[int, ...]


def read_safetensors_header(path: Path) -> dict[str, TensorEntry]:
    """Each tensor's dtype and shape from a safetensors file's header; SafeSftError where the file is not one
    (a download cut short, a header of another shape)."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):  # a FIFO would block the read for ever
            raise ValueError("it is not a regular file")
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise ValueError("shorter than the 8 bytes of its header's length")
            (length,) = struct.unpack("<Q", prefix)
            size = path.stat().st_size
            if length > size - 8:
                raise ValueError(f"its header's length, {length} bytes, runs past the end of the file")
            header = json.loads(handle.read(length))
        if not isinstance(header, dict):
            raise ValueError("its header is not a JSON object")
        header.pop("__metadata__", None)
        need = 8 + length + max((_data_end(info) for info in header.values()), default=0)
        if size < need:  # a copy or download cut short: the header whole, the tensors not
            raise ValueError(f"it is cut short, {size:,} bytes where its header describes {need:,}")
        if size > need:  # the safetensors loader refuses a file its header does not cover to the end
            raise ValueError(f"it has {size - need:,} bytes beyond the {need:,} its header describes")
        return {tensor: _tensor_entry(tensor, info) for tensor, info in header.items()}
    except PermissionError as err:  # the bytes may be whole: this user may not read them
        raise SafeSftError(f"{path} cannot be read by this user: {err.strerror}", UNREADABLE) from None
    except (OSError, ValueError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise SafeSftError(f"{path} is not a readable safetensors file: {err}", REDOWNLOAD) from None


def _data_end(info: object) -> int:
    """Where a tensor's bytes end in the file's data (its data_offsets' end; 0 where it gives none)."""
    offsets = info.get("data_offsets") if isinstance(info, dict) else None
    if isinstance(offsets, list) and len(offsets) == 2 and isinstance(offsets[1], int):
        return offsets[1]
    return 0


WEIGHTS_INDEX = "model.safetensors.index.json"


def weight_files(directory: Path) -> list[Path]:
    """The safetensors files transformers loads from a model dir: the ones its index names, else
    model.safetensors, else every *.safetensors there. Mistral's repos also ship the same weights whole as
    consolidated.safetensors, which summing every file would count twice. A file the index names that is
    not there (a download cut short), or a Git LFS pointer in a weight file's place, is a SafeSftError."""
    index = directory / WEIGHTS_INDEX
    if index.exists():
        try:
            if not stat.S_ISREG(index.stat().st_mode):
                raise ValueError("it is not a regular file")
            weight_map = json.loads(index.read_bytes()).get("weight_map")
            if not isinstance(weight_map, dict) or not all(isinstance(f, str) for f in weight_map.values()):
                raise ValueError("it has no weight_map of tensor names to file names")
        except PermissionError as err:
            raise SafeSftError(f"{index} cannot be read by this user: {err.strerror}", UNREADABLE) from None
        except (OSError, ValueError, AttributeError, RecursionError) as err:
            raise SafeSftError(f"{index} cannot be read: {err}", REDOWNLOAD) from None
        named = sorted({directory / name for name in weight_map.values()})
        refuse_missing([path for path in named if not path.exists()], WEIGHTS_INDEX)
    else:
        single = directory / "model.safetensors"
        named = [single] if single.exists() else sorted(directory.glob("*.safetensors"))
    for path in named:
        refuse_lfs_pointer(path)
    return named


def _tensor_entry(tensor: str, info: object) -> TensorEntry:
    """A tensor's entry as the safetensors library requires it: a dtype, and a shape of whole numbers >= 0."""
    shape = info.get("shape") if isinstance(info, dict) else None
    if not isinstance(info, dict) or not isinstance(info.get("dtype"), str):
        raise ValueError(f"tensor {tensor!r} has no dtype")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise ValueError(f"tensor {tensor!r} has the shape {json.dumps(shape)[:40]}, not a list of sizes")
    return TensorEntry(info["dtype"], tuple(shape))


def _read_config(path: Path) -> dict[str, object]:
    """config.json as an object; SafeSftError where it is not one."""
    try:
        config = json.loads(path.read_text())
    except PermissionError:
        raise  # a file this user may not read: the CLI names it with the fix (permissions), not a download
    except (OSError, ValueError) as err:
        raise SafeSftError(f"{path} is not readable JSON: {err}", "download the model's config.json again") from None
    if not isinstance(config, dict):
        what = {"NoneType": "null", "list": "a list", "str": "a string", "int": "a number", "float": "a number"}
        shown = what.get(type(config).__name__, type(config).__name__)
        raise SafeSftError(f"{path} holds {shown}, not a JSON object", "download it again")
    return config


def _text_config(config: Mapping[str, object]) -> Mapping[str, object]:
    for key in ("text_config", "llm_config", "language_config"):
        sub = config.get(key)
        if isinstance(sub, Mapping) and "hidden_size" in sub:
            return sub
    return config


def _str(config: Mapping[str, object], key: str) -> str | None:
    value = config.get(key)
    return value if isinstance(value, str) and value else None


def _size(value: object) -> int | None:
    """A size: a positive integer (a bool, zero or a negative is no size)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _int(config: Mapping[str, object], *keys: str) -> int | None:
    """The first of `keys` that holds a size."""
    return next((size for key in keys if (size := _size(config.get(key))) is not None), None)


_VISION_RE = re.compile(r"(?:^|\.)(?:visual|vision_tower|vision_model|vit|vpm)\.")
_PACKED_DTYPE_BITS = {"I32": 32, "U8": 8, "I8": 8}  # GPTQ/AWQ pack int32, bnb packs uint8


def quant_bits_of(config: Mapping[str, object]) -> int | None:
    """Bits per weight of a pre-quantized checkpoint (bnb, GPTQ, AWQ), from config.json's quantization_config."""
    quant = config.get("quantization_config")
    if not isinstance(quant, Mapping):
        return None
    if quant.get("load_in_4bit"):
        return 4
    if quant.get("load_in_8bit"):
        return 8
    bits = quant.get("bits", quant.get("w_bit"))
    return bits if isinstance(bits, int) and 1 < bits < 16 else None


# swift's own order (swift/utils/hf_config.py get_max_model_len): the smallest of these the config sets
MAX_LENGTH_KEYS = (
    "seq_length", "max_position_embeddings", "n_positions", "model_max_length", "seq_len", "max_seq_len",
    "max_sequence_length", "max_seq_length",
)  # fmt: skip


def max_model_len_of(config: Mapping[str, object]) -> int | None:
    """swift's limit on a sample's tokens when --max_length is unset: the smallest length key the config
    (or its text config) sets."""
    found = [size for cfg in (config, _text_config(config)) for key in MAX_LENGTH_KEYS if (size := _size(cfg.get(key)))]
    return min(found) if found else None


# The names config.json gives the dropout on attention probabilities (transformers' eager attention applies
# it while training): Llama's and most families', GPT-2's and StarCoder's, BERT's, Qwen (v1)'s.
ATTENTION_DROPOUT_KEYS = ("attention_dropout", "attn_pdrop", "attention_probs_dropout_prob", "attn_dropout_prob")
# The generative model types whose config class drops attention probabilities (0.1) when config.json names
# no dropout key: transformers then trains with the class default. Every other family defaults to 0.
# tests/stack/test_attention_dropout_defaults_real.py holds this set to the installed transformers.
DROPOUT_BY_DEFAULT = frozenset(
    {"bert", "bert-generation", "big_bird", "biogpt", "camembert", "data2vec-text", "electra", "emu3", "ernie",
     "git", "gpt-sw3", "gpt2", "gpt_bigcode", "gpt_neox_japanese", "kosmos-2", "megatron-bert", "openai-gpt",
     "plbart", "prophetnet", "roberta", "roberta-prelayernorm", "roc_bert", "roformer", "seed_oss", "xglm", "xlm",
     "xlm-roberta", "xlm-roberta-xl", "xmod"}
)  # fmt: skip


def attention_dropout_of(config: Mapping[str, object]) -> bool:
    """Whether the (text) config drops attention probabilities: the first of its dropout keys it sets, > 0;
    where it sets none, its model type's default (DROPOUT_BY_DEFAULT)."""
    text = _text_config(config)
    key = next((key for key in ATTENTION_DROPOUT_KEYS if key in text), None)
    if key is None:
        return not DROPOUT_BY_DEFAULT.isdisjoint({_str(text, "model_type"), _str(config, "model_type")})
    value = text[key]
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def quant_method_of(config: Mapping[str, object]) -> str | None:
    """A pre-quantized checkpoint's method in swift's terms (bnb, gptq, awq, ...), from quantization_config."""
    quant = config.get("quantization_config")
    if not isinstance(quant, Mapping):
        return None
    method = quant.get("quant_method")
    if method == "bitsandbytes" or quant.get("load_in_4bit") or quant.get("load_in_8bit"):
        return "bnb"
    return method.lower() if isinstance(method, str) else None


def _vision_shape(config: Mapping[str, object]) -> dict[str, int | str | None]:
    """The vision tower's width, blocks, MLP width, patch and image sides and own model_type from vision_config.
    Qwen2-VL's hidden_size there is the language model's (what the merger maps to): its tower's width is
    embed_dim."""
    vision = config.get("vision_config", config.get("vit_config"))  # Ovis2.5's remote config: vit_config
    if not isinstance(vision, Mapping):
        return {}
    width = _int(vision, "embed_dim", "hidden_size", "width")
    ratio = vision.get("mlp_ratio")
    from_ratio = int(ratio * width) if isinstance(ratio, int | float) and ratio > 0 and width else None
    patch, image = vision.get("patch_size"), vision.get("image_size")  # InternVL's are pairs
    return {
        "vision_hidden_size": width,
        "vision_layers": _int(vision, "depth", "num_hidden_layers", "layers"),
        "vision_intermediate_size": _int(vision, "intermediate_size") or from_ratio,
        "vision_patch_size": _size(patch[0] if isinstance(patch, list) and patch else patch),
        "vision_model_type": _str(vision, "model_type"),
        "vision_image_size": _size(image[0] if isinstance(image, list) and image else image),
        **_slicing(config),
    }


PROCESSOR_CONFIG = "preprocessor_config.json"


def _processor_max_tiles(path: Path, warnings: list[str]) -> int | None:
    """The image processor's own most tiles (transformers' InternVL: max_patches; MiniCPM-V: max_slice_nums)
    from preprocessor_config.json, where the directory has one; launcher.plan.image_tiles reads it only for
    the families that tile."""
    if not path.is_file():
        return None
    try:
        processor = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        warnings.append(f"{path} is not readable JSON ({err}): the processor's default tiles are assumed")
        return None
    return _int(processor, "max_patches", "max_slice_nums") if isinstance(processor, dict) else None


def _slicing(config: Mapping[str, object]) -> dict[str, int | None]:
    """MiniCPM-V's slicing: slice_config's scale_resolution and max_slice_nums (remote code), else the
    top-level image_size transformers' MiniCPM-V 4.6 keeps its side in (launcher.plan.image_tiles)."""
    found = config.get("slice_config")
    slices: Mapping[str, object] = found if isinstance(found, Mapping) else {}
    return {
        "vision_tile_side": _int(slices, "scale_resolution") or _int(config, "image_size"),
        "vision_max_tiles": _int(slices, "max_slice_nums"),
    }


# The keys each size goes by in config.json, first found first read (_int).
HIDDEN_KEYS = ("hidden_size", "n_embd", "n_embed", "d_model")
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
INTERMEDIATE_KEYS = ("intermediate_size", "ffn_hidden_size", "ffn_dim", "n_inner", "inner_hidden_size")
HEAD_KEYS = ("num_attention_heads", "n_head", "num_heads", "n_heads")
KV_HEAD_KEYS = ("num_key_value_heads", "multi_query_group_num", "num_kv_heads", "n_head_kv")
VOCAB_KEYS = ("padded_vocab_size", "vocab_size")  # ChatGLM and Qwen-1 embed the padded vocabulary
HEAD_DIM_KEYS = ("head_dim", "kv_channels")
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
EXPERT_WIDTH_KEYS = ("moe_intermediate_size", "expert_intermediate_size", "expert_ffn_hidden_size")
SHARED_WIDTH_KEYS = ("shared_expert_intermediate_size", "shared_intermediate_size")
SHARED_EXPERT_KEYS = ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts")
EXPERTS_PER_TOKEN_KEYS = ("num_experts_per_tok", "moe_topk", "top_k", "num_selected_experts", "moe_k")

# The decoder's size keys this module reads (each a positive whole number), and those where 0 means none (no
# shared experts, a dense layer, head_dim left to hidden / heads, as transformers' own GLM-5 default has it).
# A list is left alone: some families give a width per layer. top_k is never flagged: older configs also
# keep generation's top_k there, a sampling setting, not a size.
SIZE_KEYS = (
    *HIDDEN_KEYS, *LAYER_KEYS, *INTERMEDIATE_KEYS, *VOCAB_KEYS, *HEAD_KEYS, *KV_HEAD_KEYS, *EXPERT_WIDTH_KEYS,
    *MAX_LENGTH_KEYS,
)  # fmt: skip
ZERO_MEANS_NONE_KEYS = (
    *HEAD_DIM_KEYS, *SHARED_WIDTH_KEYS, *EXPERT_KEYS, *SHARED_EXPERT_KEYS,
    *(key for key in EXPERTS_PER_TOKEN_KEYS if key != "top_k"),
)  # fmt: skip


def unusable_sizes(text: Mapping[str, object]) -> list[str]:
    """The size keys of a (text) config that hold no size, each as `key value` (`hidden_size "abc"`): a
    string, a bool, a fraction, a negative, or 0 for a key that needs a size. null and lists are not flagged."""
    bad = []
    for key in (*SIZE_KEYS, *ZERO_MEANS_NONE_KEYS):
        value = text.get(key)
        if value is None or isinstance(value, list | dict):
            continue
        floor = 0 if key in ZERO_MEANS_NONE_KEYS else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < floor:
            bad.append(f"{key} {json.dumps(value)}")
    return bad


def _moe_fields(text: Mapping[str, object]) -> dict[str, int | None]:
    """An MoE decoder's routed experts, the experts each token goes through, one expert's MLP width and the
    shared experts' width. Mixtral's layout (Mixtral, PhiMoE, gpt-oss, OLMoE, GraniteMoE) has no
    moe_intermediate_size: its intermediate_size is one expert's. DeepSeek's and GLM-4.5's shared experts
    are n_shared_experts experts wide; Qwen2-MoE and Qwen3-Next state the width. One expert is a dense MLP."""
    experts = _int(text, *EXPERT_KEYS)
    if experts is None or experts < 2:
        return {
            "num_experts": None,
            "experts_per_token": None,
            "moe_intermediate_size": None,
            "shared_expert_intermediate_size": None,
        }
    width = _int(text, *EXPERT_WIDTH_KEYS)
    width = width or _int(text, "intermediate_size", "ffn_dim")
    shared = _int(text, *SHARED_WIDTH_KEYS)
    shared_experts = _int(text, *SHARED_EXPERT_KEYS)
    if shared is None and shared_experts and width:
        shared = shared_experts * width
    return {
        "num_experts": experts,
        "experts_per_token": _int(text, *EXPERTS_PER_TOKEN_KEYS),
        "moe_intermediate_size": width,
        "shared_expert_intermediate_size": shared,
    }


def _shape_fields(config: Mapping[str, object]) -> dict[str, object]:
    """The ModelFacts fields config.json gives beyond the parameter count."""
    text = _text_config(config)
    decoder_type = _str(text, "model_type") or _str(config, "model_type")
    tied = text.get("tie_word_embeddings", config.get("tie_word_embeddings", tied_unstated(decoder_type)))
    return {
        "num_attention_heads": _int(text, *HEAD_KEYS),
        "num_key_value_heads": kv_heads(text, _int(text, *KV_HEAD_KEYS)),
        **_moe_fields(text),
        "head_dim": _int(text, *HEAD_DIM_KEYS),
        "decoder_type": decoder_type,
        "tie_word_embeddings": bool(tied),
        "quant_bits": quant_bits_of(config),
        "quant_method": quant_method_of(config),
        "max_model_len": max_model_len_of(config),
        "attention_dropout": attention_dropout_of(config),
        **_vision_shape(config),
    }


def facts_from_dir(directory: Path, name: str) -> ModelFacts:
    warnings: list[str] = []
    config: dict[str, object] = {}
    config_path = directory / "config.json"
    if config_path.is_file():
        config = _read_config(config_path)
    else:
        warnings.append(f"{config_path} not found: model shape unknown")
    text = _text_config(config)
    if bad := unusable_sizes(text):
        verb = "is not a positive whole number" if len(bad) == 1 else "are not positive whole numbers"
        warnings.append(
            f"{config_path}: {', '.join(bad)} {verb}: the memory estimate does without, and swift builds the "
            "model from this file (if it was edited, restore the model's own config.json)"
        )
    naming = _naming(config if config_path.is_file() else None, directory / SWIFT_ARGS)
    extra = {**_shape_fields(config), **naming}
    hidden = _int(text, *HIDDEN_KEYS)
    layers = _int(text, *LAYER_KEYS)
    decoder_type = extra["decoder_type"] if isinstance(extra["decoder_type"], str) else None
    stated_width = _int(text, *INTERMEDIATE_KEYS)
    # the estimate's layers take a stated width as config.json writes it: Qwen-1's (its two projections
    # summed) matches the measured peaks of its heavier remote code better than the per-matrix width
    # (BENCHMARKS.md); the count takes each family's real matrices
    intermediate = stated_width or mlp_width(text, decoder_type, hidden, None)
    vocab = _int(text, *VOCAB_KEYS)
    multimodal = any(k in config for k in ("vision_config", "vit_config", "visual", "vision_tower", "audio_config"))
    model_type = _str(config, "model_type")
    if "vision_max_tiles" in extra and extra["vision_max_tiles"] is None:
        extra["vision_max_tiles"] = _processor_max_tiles(directory / PROCESSOR_CONFIG, warnings)
    quant_bits = extra["quant_bits"]
    files = weight_files(directory)
    if files:
        groups: dict[str, int] = defaultdict(int)
        dtypes: dict[str, int] = defaultdict(int)
        vision = 0
        tensors: list[str] = []
        for file in files:
            for tensor, (dtype, shape) in read_safetensors_header(file).items():
                tensors.append(tensor)
                count = prod(shape)
                if isinstance(quant_bits, int) and dtype in _PACKED_DTYPE_BITS:
                    count = count * _PACKED_DTYPE_BITS[dtype] // quant_bits  # packed weights: real count
                match = _LAYER_RE.match(tensor)
                groups[match.group(1) if match else tensor] += count
                dtypes[dtype] += count
                if _VISION_RE.search(tensor):
                    vision += count
        total = sum(groups.values())
        return ModelFacts(
            name=name,
            total_params=total,
            source="safetensors",
            largest_layer_params=max(groups.values()),
            hidden_size=hidden,
            num_layers=layers,
            intermediate_size=intermediate,
            vocab_size=vocab,
            dtype=max(dtypes, key=lambda d: dtypes[d]) if quant_bits is None else _config_dtype(config),
            is_multimodal=multimodal,
            model_type=model_type,
            warnings=tuple(warnings),
            vision_params=vision,
            module_paths=modules_of(tensors),
            **extra,  # type: ignore[arg-type]
        )
    config_dtype = _config_dtype(config)
    shape_facts: dict[str, object] = {
        "hidden_size": hidden,
        "num_layers": layers,
        "intermediate_size": intermediate,
        "vocab_size": vocab,
        "dtype": config_dtype,
        "is_multimodal": multimodal,
        "model_type": model_type,
    }
    counted = None
    if hidden and layers and vocab:
        width = mlp_width(text, decoder_type, hidden, stated_width)
        counted = config_params(_config_shape(text, decoder_type, hidden, layers, width, vocab, extra))
    weight_bytes, indexed = torch_weights(directory)
    bin_modules = None if indexed is None else modules_of(indexed)  # an index names the .bin checkpoint's tensors
    shape_facts["module_paths"] = bin_modules
    if weight_bytes and config_dtype in DTYPE_BYTES and quant_bits is None:
        # PyTorch .bin weights: their bytes at config.json's dtype are the count; the shapes give the layer
        return ModelFacts(
            name=name,
            total_params=weight_bytes // DTYPE_BYTES[config_dtype],
            source="weights_size",
            largest_layer_params=counted[1] if counted else None,
            warnings=tuple(warnings),
            **shape_facts,  # type: ignore[arg-type]
            **extra,  # type: ignore[arg-type]
        )
    if counted:
        warnings.append(f"no safetensors in {directory}: parameter count estimated from config.json")
        return ModelFacts(
            name=name,
            total_params=counted[0],
            source="config",
            largest_layer_params=counted[1],
            vision_params=counted[2],
            warnings=tuple(warnings),
            **shape_facts,  # type: ignore[arg-type]
            **extra,  # type: ignore[arg-type]
        )
    sizes = (("hidden_size", hidden), ("num_hidden_layers", layers), ("vocab_size", vocab))  # by their usual keys
    missing = [key for key, value in sizes if not value]
    if config_path.is_file() and missing and not bad:  # a value that is there but no size is named above
        warnings.append(
            f"{config_path} has no {', '.join(missing)}, and {directory} no weights to count: the model's size is "
            "unknown, and no strategy can be chosen (give it with --model-params, e.g. --model-params 8B)"
        )
    return ModelFacts(
        name=name,
        total_params=None,
        source="unknown",
        warnings=tuple(warnings),
        module_paths=bin_modules,
        **naming,  # type: ignore[arg-type]
    )


SWIFT_ARGS = "args.json"  # swift writes it beside what it trains and exports
# the keys whose presence swift reads as a multimodal model's (swift/utils/hf_config.py is_multimodal)
SWIFT_MULTIMODAL_KEYS = ("language_config", "llm_config", "text_config", "vit_config", "vision_config",
                         "audio_config", "thinker_config")  # fmt: skip


def _naming(config: Mapping[str, object] | None, args_path: Path) -> dict[str, object]:
    """What swift names the model's type by beyond its name: config.json's architectures (None without a
    config.json) and whether it reads it as a multimodal model's, and the model_type and template of an
    args.json swift wrote in the folder; its model_type only where ms-swift 4 wrote it, as swift reads it
    (BaseArguments.load_args_from_ckpt: 3.x named its types otherwise). An args.json that is not a JSON
    object is passed over: what swift makes of it is swift's to say."""
    architectures = config.get("architectures") if config is not None else None
    names = tuple(a for a in architectures if isinstance(a, str)) if isinstance(architectures, list) else ()
    saved: object = {}
    if args_path.is_file():
        try:
            saved = json.loads(args_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            saved = {}
    saved = saved if isinstance(saved, dict) else {}
    writer = re.match(r"\d+", _str(saved, "swift_version") or "")
    return {
        "architectures": names if config is not None else None,
        "saved_model_type": _str(saved, "model_type") if writer and int(writer.group()) >= 4 else None,
        "saved_template": _str(saved, "template"),
        "swift_multimodal": config is not None and any(key in config for key in SWIFT_MULTIMODAL_KEYS),
    }


def _config_shape(
    text: Mapping[str, object],
    decoder_type: str | None,
    hidden: int,
    layers: int,
    intermediate: int | None,
    vocab: int,
    extra: Mapping[str, object],
) -> ConfigShape:
    def size(key: str) -> int | None:
        value = extra.get(key)
        return value if isinstance(value, int) else None

    linear = linear_mixer(text, hidden, layers)
    return ConfigShape(
        hidden=hidden,
        layers=layers,
        vocab=vocab,
        intermediate=intermediate,
        heads=size("num_attention_heads"),
        kv_heads=size("num_key_value_heads"),
        head_dim=size("head_dim"),
        tied=bool(extra.get("tie_word_embeddings")),
        # ChatGLM-6B v1 writes its plain GeLU MLP's width as inner_hidden_size; ChatGLM2 on, gated, ffn_hidden_size
        gated=gated(decoder_type) and not (decoder_type == "chatglm" and "inner_hidden_size" in text),
        num_experts=size("num_experts"),
        moe_intermediate=size("moe_intermediate_size"),
        shared_intermediate=size("shared_expert_intermediate_size"),
        dense_layers=_int(text, "first_k_dense_replace") or 0,
        linear_layers=linear[0],
        linear_mixer=linear[1],
        q_gate=text.get("attn_output_gate") is True,
        vocab_head=vocab_head(extra.get("architectures")),
        vision_hidden=size("vision_hidden_size"),
        vision_layers=size("vision_layers"),
        vision_intermediate=size("vision_intermediate_size"),
    )


def _config_dtype(config: Mapping[str, object]) -> str | None:
    text = _text_config(config)
    value = text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or config.get("dtype")
    return str(value) if value else None


def params_from_name(name: str) -> int | None:
    match = _NAME_SIZE_RE.search(name)
    if not match:
        return None
    scale = 10**9 if match.group(2).lower() == "b" else 10**6
    return int(float(match.group(1)) * scale)


# (params, hidden, layers, intermediate, vocab, heads, kv heads, tied): the Qwen2.5 family, a typical
# decoder at each size.
_TYPICAL_SHAPES = (
    (0.5e9, 896, 24, 4864, 151936, 14, 2, True),
    (1.5e9, 1536, 28, 8960, 151936, 12, 2, True),
    (3e9, 2048, 36, 11008, 151936, 16, 2, True),
    (7e9, 3584, 28, 18944, 152064, 28, 4, False),
    (14e9, 5120, 48, 13824, 152064, 40, 8, False),
    (32e9, 5120, 64, 27648, 152064, 40, 8, False),
    (72e9, 8192, 80, 29568, 152064, 64, 8, False),
)


def typical_shape(name: str, total_params: int) -> ModelFacts:
    """Facts for a model known only by its size: the shape of the nearest typical decoder."""
    params, hidden, layers, intermediate, vocab, heads, kv_heads, tied = min(
        _TYPICAL_SHAPES, key=lambda row: abs(row[0] - total_params) / row[0]
    )
    return ModelFacts(
        name=name,
        total_params=total_params,
        source="name",
        largest_layer_params=vocab * hidden,
        hidden_size=hidden,
        num_layers=layers,
        intermediate_size=intermediate,
        vocab_size=vocab,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        tie_word_embeddings=tied,
        is_multimodal=bool(re.search(r"(?i)[-_]vl\b|-vl-", name)),
        warnings=(f"layer shapes assumed like a typical {params / 1e9:g}B decoder",),
    )


def probe_model(model: str, env: Mapping[str, str], home: Path, params_override: int | None = None) -> ModelFacts:
    path = Path(model).expanduser()
    facts: ModelFacts | None = None
    if path.is_dir():
        facts = facts_from_dir(path, model)  # a local folder swift cannot complete: what is wrong stops the run
    else:
        found = cached_model_dir(model, env, home)
        why = "is not a local directory nor in the ModelScope/Hugging Face cache"
        try:
            facts = facts_from_dir(found, model) if found else None
        except SafeSftError as err:
            # a hub id: swift's download completes a cached copy cut short, so the run goes on
            why = f"has an incomplete copy in the hub cache ({err.message}; swift downloads the rest)"
        if facts is None:
            facts = _from_name(model, why, params_override)
    if params_override is not None:  # the count is the flag's: a warning on how the files were counted is moot
        kept = tuple(w for w in facts.warnings if "parameter count estimated from" not in w)
        return replace(facts, total_params=params_override, source="flag", warnings=kept)
    return facts


def _from_name(model: str, why: str, params_override: int | None) -> ModelFacts:
    """Facts for a model whose files cannot be read here: the size its name says, a typical shape."""
    count = params_from_name(model)
    warning = (
        f"{model} {why}: "
        + (f"size {count / 1e9:.1f}B read from its name" if count else "size unknown")
        + " (pass --model-params to be exact)"
    )
    if count is None and params_override is None:
        return ModelFacts(name=model, total_params=None, source="unknown", warnings=(warning,))
    facts = typical_shape(model, params_override or count or 0)
    return facts if params_override is not None else replace(facts, warnings=(warning, *facts.warnings))
