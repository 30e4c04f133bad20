"""The calibration table of published, measured runs, and the estimators held against it.

A library for scripts/fit_memory.py, scripts/bench_memory.py and tests/unit/test_calibration.py:

- `load(path)` reads a table (JSON Lines, one run per line; the schema is in
  tests/data/calibration/README.md) into `Row`s;
- `ESTIMATORS` are the four estimators compared, each a function row -> GiB per GPU, or None where it
  does not apply: `new` (launcher.plan.estimate, with the fitted constants or others passed in), `old`
  (the estimate at commit 566cec5, scripts/memory_baselines/), `deepspeed` (DeepSpeed's own
  estimate_zero2/zero3_model_states_mem_needs, model states only) and `accelerate` (accelerate's
  `estimate-memory` rule: the largest of its model / gradient / optimizer / step sizes);
- `score(rows, estimator)` is what BENCHMARKS.md reports: fit/OOM agreement, the rows where the
  estimate says "fits" and the run ran out of GPU memory, and the estimate/measured ratio.

Mapping a row to the planner's terms: `single` is one process without DeepSpeed (the planner's `ddp`
with one GPU); `device_map` (one process, layers spread over the GPUs) is launcher/plan/device_map.py's
estimate of swift's own placement (no max_memory), the GPU with the largest need (the `old` baseline
keeps spreading the single-process estimate's states evenly); a row's ZeRO config is the shipped one
(the rows rarely state theirs). A `total_all_gpus_gib` figure is divided by the GPU count.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from memory_baselines import estimate_566cec5 as old_estimate  # noqa: E402

from launcher.model import Strategy  # noqa: E402
from launcher.plan import device_map  # noqa: E402
from launcher.plan import estimate as new_estimate  # noqa: E402
from launcher.plan.attention_default import swift_runs_eager, transformers_runs_eager  # noqa: E402
from launcher.plan.ds_config import SHIPPED_ZERO, ZeroSettings, zero_settings  # noqa: E402
from launcher.probe.model_size import typical_shape  # noqa: E402
from launcher.units import GiB  # noqa: E402

TABLE = REPO / "tests" / "data" / "calibration" / "table.jsonl"
# The joined table: the first table and two held-out tables measured on earlier estimates and then joined
# (rows byte for byte as gathered, each file its own source groups; tests/data/calibration/README.md)
JOINED = (TABLE, TABLE.with_name("heldout2.jsonl"), TABLE.with_name("heldout3.jsonl"))
WITHIN = 0.15  # "within 15 %" of the measured peak
AT_LIMIT = 0.95  # a run whose peak is at least this share of its card "fit only at the limit"
DECIMAL_GB = 1e9 / GiB  # one GB in GiB
DECIMAL_GB_NOTE = "/1e9 (decimal gb"  # how a row's notes say its source prints decimal GB


# Strategies safe-sft does not plan (`megatron sft` is another command): such rows are not scored.
NOT_PLANNED = ("megatron",)


@dataclass(frozen=True)
class Row:
    raw: dict[str, Any] = field(repr=False)

    @property
    def id(self) -> str:
        return str(self.raw["id"])

    @property
    def source(self) -> str:
        return str(self.raw.get("source_group") or self.raw["source"])

    @property
    def scorable(self) -> bool:
        """The row has what scoring needs: the card's size, the model's size, the GPU count and a figure
        (a peak, a sum over the GPUs, or an OOM), and a strategy `swift sft` runs (not Megatron's)."""
        raw, measured = self.raw, self.raw.get("measured") or {}
        kinds = ("peak_per_gpu_gib", "total_all_gpus_gib", "oom")
        return (
            not self.strategy.startswith(NOT_PLANNED)
            and raw.get("gpu_mem_gib") is not None
            and raw.get("params_b") is not None
            and raw.get("gpus") is not None
            and measured.get("kind") in kinds
            and (measured["kind"] == "oom" or measured.get("value") is not None)
        )

    @property
    def card_gib(self) -> float:
        return float(self.raw["gpu_mem_gib"])

    @property
    def oom(self) -> bool:
        return bool(self.raw["measured"]["kind"] == "oom")

    @property
    def measured_gib(self) -> float | None:
        """The measured peak per GPU in GiB; None for an OOM. A figure the source's own code prints in decimal
        GB (litgpt: `max_memory_allocated() / 1e9`, "GB") is converted; an unclear unit is read as GiB."""
        measured = self.raw["measured"]
        if measured["kind"] == "oom":
            return None
        value = float(measured["value"]) * (DECIMAL_GB if _notes_say(self, DECIMAL_GB_NOTE) else 1.0)
        return value / self.raw["gpus"] if measured["kind"] == "total_all_gpus_gib" else value

    @property
    def at_limit(self) -> bool:
        peak = self.measured_gib
        return peak is not None and peak >= AT_LIMIT * self.card_gib

    @property
    def strategy(self) -> str:
        return str(self.raw["strategy"])


def load(paths: Path | Sequence[Path] = JOINED) -> list[Row]:
    """The tables' scorable rows (see Row.scorable); `load_all` keeps the others too."""
    return [row for row in load_all(paths) if row.scorable]


def load_all(paths: Path | Sequence[Path] = JOINED) -> list[Row]:
    files = [paths] if isinstance(paths, Path) else list(paths)
    return [Row(json.loads(line)) for path in files for line in path.read_text().splitlines() if line.strip()]


# ---- mapping a row to the estimate's inputs -----------------------------------------------------------


def _params(row: Row) -> int:
    return int(float(row.raw["params_b"]) * 1e9)


def _arch(row: Row) -> dict[str, Any]:
    """The row's shapes; one it leaves out is the nearest typical decoder's, as the planner would take it."""
    typical = typical_shape(row.id, _params(row))
    fallback = {
        "hidden": typical.hidden_size,
        "layers": typical.num_layers,
        "vocab": typical.vocab_size,
        "intermediate": typical.intermediate_size,
        "heads": typical.num_attention_heads,
    }
    arch = dict(row.raw.get("arch") or {})  # a row whose architecture its gatherer did not know: typical
    return {**arch, **{k: v for k, v in fallback.items() if arch.get(k) is None}}


# The families whose decoder layer saves more than Llama's (launcher/plan/layer_bytes.py), by the row's
# model name, with their config.json's head_dim where q is wider than hidden / heads; other names are
# counted as Llama, as the planner counts an unmeasured model_type.
_FAMILY_BY_NAME = (
    (r"qwen3(?![.-]?(?:next|5|\.5))", "qwen3", 128),
    (r"gemma-?3n", None, None),  # Gemma-3n's layers are of another kind, not measured
    (r"gemma-?3-27b", "gemma3_text", 128),
    (r"gemma-?3-", "gemma3_text", 256),
    (r"gemma-?2-27b", "gemma2", 128),
    (r"gemma-?2-", "gemma2", 256),
    (r"gemma-", "gemma", 256),
    (r"phi-?3", "phi3", None),
    (r"phi-?2", "phi", None),
    (r"olmo-?2", "olmo2", None),
    (r"glm-4-.*0414", "glm4", None),
    (r"starcoder-?2", "starcoder2", None),
    (r"gpt-oss", "gpt_oss", 64),  # not measured (Llama's layer), but its own eager attention and head_dim
)


# The attention a row ran where it states none, as the plan reads an unset --attn_impl
# (launcher/plan/attention_default.py): frameworks that run transformers' model code fall back to eager for
# a model with no sdpa path (BLOOM, gpt-oss), and ms-swift's loaders pick eager for Gemma-3; litgpt,
# torchtune and the other frameworks run attention code of their own.
_ATTENTION_TYPE_BY_NAME = ((r"bloom", "bloom"), (r"gpt-oss", "gpt_oss"), (r"gemma-?3-", "gemma3_text"))
TRANSFORMERS_MODEL_CODE = frozenset(
    {"ms-swift", "transformers", "hf-trainer", "llama-factory", "llamafactory", "trl", "axolotl", "deepspeed-chat"}
)


def _eager(row: Row) -> bool:
    """The row ran eager attention: stated, or its framework's default for its model."""
    stated = row.raw.get("attn_impl")
    framework = row.raw.get("framework")
    if stated is not None or framework not in TRANSFORMERS_MODEL_CODE:
        return stated == "eager"
    name = str(row.raw["model"]).lower()
    model_type = next((t for pattern, t in _ATTENTION_TYPE_BY_NAME if re.search(pattern, name)), None)
    return swift_runs_eager(model_type) if framework == "ms-swift" else transformers_runs_eager(model_type)


def _family(row: Row) -> tuple[str | None, int | None]:
    """(model_type, head_dim) of the row's model, by its name; (None, None) for Llama's layout."""
    name = str(row.raw["model"]).lower()
    for pattern, model_type, head_dim in _FAMILY_BY_NAME:
        if re.search(pattern, name):
            return model_type, head_dim
    return None, None


# An MoE row's routing, which the schema has no column for: experts per token and the shared experts' MLP
# width, from each model's published config.json (num_experts_per_tok; shared_expert_intermediate_size);
# and whether the routed experts were linears in the transformers code the run had (a list of MLPs, as
# Mixtral, Qwen2-MoE, Qwen3-MoE and Qwen3-Next were in transformers 4), so that a LoRA on every linear gave
# each expert an adapter. Qwen3-VL-MoE and gpt-oss shipped with fused expert parameters from the start.
# A row's `intermediate` is one expert's width, as its config's moe_intermediate_size (Mixtral's layout
# has only intermediate_size, which is one expert's).
_MOE_BY_NAME = (
    (r"mixtral", 2, None, True),
    (r"qwen3-next", 10, 512, True),
    (r"qwen3-vl", 8, None, False),
    (r"qwen3", 8, None, True),
    (r"qwen2-57b-a14b", 8, 20480, True),
    (r"gpt-oss", 4, None, False),
)


def _moe(row: Row) -> dict[str, int | None]:
    """The row's MoE fields in TrainShape's terms; empty for a dense model."""
    arch = _arch(row)
    experts = arch.get("moe_experts")
    if not experts or experts < 2:
        return {}
    top_k, shared, _ = _routing(row)
    return {
        "num_experts": int(experts),
        "experts_per_token": top_k,
        "moe_intermediate_size": arch.get("intermediate"),
        "shared_expert_intermediate_size": shared,
    }


def _routing(row: Row) -> tuple[int | None, int | None, bool]:
    name = str(row.raw["model"]).lower()
    found = next((entry[1:] for entry in _MOE_BY_NAME if re.search(entry[0], name)), None)
    return found or (None, None, False)


def _largest(row: Row) -> int:
    arch = _arch(row)
    h, i, vocab = arch["hidden"], arch.get("intermediate") or 4 * arch["hidden"], arch["vocab"]
    return int(max(vocab * h, 4 * h * h + 3 * h * i))


def _saved_modules(row: Row) -> int:
    """peft's modules_to_save (the row states the embedding and output layer train beside the adapters):
    each becomes a trainable copy beside its frozen original."""
    if row.raw["tuner"] == "full":
        return 0
    if not any(_notes_say(row, word) for word in ("modules_to_save", "embedding and lm_head", "lora (emb)")):
        return 0
    arch = _arch(row)
    return 2 * int(arch["vocab"]) * int(arch["hidden"])


def _q_kv_widths(row: Row) -> tuple[int, int]:
    arch = _arch(row)
    return new_estimate.q_kv_widths(arch["hidden"], arch.get("heads"), arch.get("kv_heads"), _family(row)[1])


def _trainable(row: Row) -> int:
    """A LoRA row's trained parameters: its adapters on the linears it targets (`_adapter_targets`), routed
    experts that were linears (`_routing`) each with its own, and the modules it saves whole."""
    if row.raw["tuner"] == "full":
        return _params(row)
    arch, moe, targets = _arch(row), _moe(row), _adapter_targets(row)
    hidden, expert_width = int(arch["hidden"]), moe.get("moe_intermediate_size")
    experts = 0
    if moe and expert_width and _routing(row)[2]:
        expert_linears = new_estimate.layer_linears(None, hidden, 0, 0, expert_width)
        expert_mlp = {name: widths for name, widths in expert_linears.items() if name in _MLP}
        experts = moe["num_experts"] * new_estimate.adapted_widths(expert_mlp, targets)
    lora = new_estimate.lora_trainable_params(
        _linears(row), targets, arch["layers"], int(row.raw.get("lora_rank") or 8), experts
    )
    return lora + _saved_modules(row)


_MLP = ("gate_proj", "up_proj", "down_proj")


def _linears(row: Row) -> dict[str, tuple[int, int]]:
    """(input, output) width of each linear of the row's decoder layer, by Llama's names; an MoE layer's MLP
    linears are its shared experts'."""
    arch, moe = _arch(row), _moe(row)
    mlp = new_estimate.adapted_mlp_width(
        arch.get("intermediate"), bool(moe), moe.get("shared_expert_intermediate_size")
    )
    q_width, kv_width = _q_kv_widths(row)
    return new_estimate.layer_linears(None, int(arch["hidden"]), q_width, kv_width, mlp)


ALL_LINEAR = new_estimate.LORA_LINEARS
# A LoRA row's adapted linears, from what its notes say (the first pattern found), else its framework's
# default: ms-swift 3/4's all-linear; peft's for a Llama-family model (q_proj, v_proj), which litgpt's and
# most torchtune recipes' defaults match. A fused q/k/v projection is counted as q, k and v.
_TARGETS_BY_NOTE = (
    ("this row: lora target all", ALL_LINEAR),
    ("lm_head only", ()),
    ("target all", ALL_LINEAR),
    ("targets all", ALL_LINEAR),
    ("lora_target all", ALL_LINEAR),
    ("target_modules all", ALL_LINEAR),
    ("all-linear", ALL_LINEAR),  # peft's own name for it
    ("all linear", ALL_LINEAR),
    ("q/k/v/o", ALL_LINEAR[:4]),
    ("k_proj v_proj o_proj", ALL_LINEAR[:4]),
    ("qkv", ALL_LINEAR[:3]),
    ("q_proj,k_proj,v_proj", ALL_LINEAR[:3]),
    ("query_key_value", ALL_LINEAR[:3]),
    ("q_proj,v_proj", ("q_proj", "v_proj")),
    ("q_proj v_proj", ("q_proj", "v_proj")),
)


# `lora_targets` names as sources' configs give them -> Llama's projections (a fused linear is its parts)
_TARGET_ALIASES = {
    "all-linear": ALL_LINEAR,
    "all": ALL_LINEAR,
    "query_key_value": ALL_LINEAR[:3],
    "qkv_proj": ALL_LINEAR[:3],
    "c_attn": ALL_LINEAR[:3],
    "w_pack": ALL_LINEAR[:3],
    "gate_up_proj": ALL_LINEAR[4:6],
    "dense": ("o_proj",),
    "c_proj": ("o_proj",),
    "wqkv": ALL_LINEAR[:3],
    "wo": ("o_proj",),
    "w1": ("gate_proj",),
    "w3": ("up_proj",),
    "w2": ("down_proj",),  # InternLM2's and Mixtral's w1/w3/w2 are the MLP's gate, up and down
    "query": ("q_proj",),  # litgpt's and BERT's names
    "key": ("k_proj",),
    "value": ("v_proj",),
}


def _stated_targets(row: Row) -> tuple[str, ...] | None:
    """The row's `lora_targets` field ("all-linear" or module names) in Llama's names; None where absent."""
    stated = row.raw.get("lora_targets")
    names = [stated] if isinstance(stated, str) else stated if isinstance(stated, list) else None
    if not names:
        return None
    found: list[str] = []
    for name in (str(n).lower().rsplit(".", 1)[-1] for n in names):
        found += [t for t in _TARGET_ALIASES.get(name, (name,)) if t in ALL_LINEAR and t not in found]
    return tuple(t for t in ALL_LINEAR if t in found)


def _adapter_targets(row: Row) -> tuple[str, ...]:
    """The row's stated `lora_targets`, else what its notes say, else its framework's default."""
    stated = _stated_targets(row)
    if stated is not None:
        return stated
    for note, targets in _TARGETS_BY_NOTE:
        if _notes_say(row, note):
            return targets
    return ALL_LINEAR if row.raw.get("framework") == "ms-swift" else ("q_proj", "v_proj")


def _adapters(row: Row) -> new_estimate.Adapters | None:
    """A LoRA row's adapters on the decoder layers (`_adapter_targets`), dropout on as every framework's
    default has it; DoRA where its notes say so."""
    if row.raw["tuner"] == "full":
        return None
    linears, targets = _linears(row), _adapter_targets(row)
    dora = new_estimate.outputs_of(linears, targets) if _notes_say(row, "dora") else 0
    rank = int(row.raw.get("lora_rank") or 8)
    return new_estimate.Adapters(new_estimate.inputs_of(linears, targets), rank, dora_outputs=dora)


def _gpus(row: Row) -> tuple[int, int]:
    """(GPUs per node, nodes) as the estimate sees them: one process for single and device_map."""
    if row.strategy in ("single", "device_map"):
        return 1, 1
    nodes = int(row.raw.get("nodes") or 1)
    return max(int(row.raw["gpus"]) // nodes, 1), nodes


def train_shape(row: Row) -> new_estimate.TrainShape:
    arch = _arch(row)
    total = _params(row)
    per_node, nodes = _gpus(row)
    quant = row.raw.get("quant_bits")
    embeddings = arch["vocab"] * arch["hidden"] * 2
    image_tokens = row.raw.get("image_tokens") or 0
    model_type, head_dim = _family(row)
    eager = _eager(row)
    return new_estimate.TrainShape(
        total_params=total + _saved_modules(row),
        trainable_params=_trainable(row),
        largest_layer_params=_largest(row),
        hidden_size=arch["hidden"],
        num_layers=arch["layers"],
        vocab_size=arch["vocab"],
        micro_batch=int(row.raw.get("micro_batch") or 1),
        grad_accum=int(row.raw["grad_accum"]) if row.raw.get("grad_accum") else None,
        seq_len=int(row.raw.get("seq_len") or new_estimate.DEFAULT_SEQ_LEN),
        gradient_checkpointing=_checkpointing(row),
        gpus_per_node=per_node,
        nnodes=nodes,
        sequence_parallel=_sequence_parallel(row),
        intermediate_size=arch.get("intermediate"),
        num_heads=arch.get("heads"),
        weight_bytes=4 if row.raw.get("torch_dtype") == "float32" else 2,
        quant_bits=int(quant) if quant else None,
        quant_method=_quant_method(row),
        quantized_params=max(total - embeddings, 0),
        eager_attention=eager,
        adapters=_adapters(row),
        # packed rows run flash-attention's varlen kernel, except under eager attention, which has none
        packing=bool(row.raw.get("packing")) and not eager,
        vision_hidden_size=1280 if arch.get("vision") else None,
        vision_layers=32 if arch.get("vision") else None,
        image_pixels=int(image_tokens) * 28 * 28,
        fused_cross_entropy=_liger(row) or bool((row.raw.get("settings") or {}).get("fused_cross_entropy")),
        vocab_logits=not _notes_say(row, "sequence-classification"),
        pure_dtype=str(row.raw.get("precision") or "").startswith("bf16-true") or _notes_say(row, "bf16-true"),
        upcast_unquantized=_kbit_upcast(row),
        model_type=model_type,
        head_dim=head_dim,
        **_moe(row),
        **{k: v for k, v in _stated_settings(row).items() if k != "fused_cross_entropy"},
    )


# Frameworks whose gradient checkpointing is off unless the run turns it on (HF TrainingArguments, axolotl's
# config, DeepSpeed-Chat's flag); ms-swift and LLaMA-Factory turn it on by default, and a framework not
# named here is read as on.
CHECKPOINTING_OFF_BY_DEFAULT = frozenset({"transformers", "hf-trainer", "trl", "axolotl", "deepspeed-chat"})
# Sources whose own training script turns it on whatever the config says: both THUDM fine-tuning demos
# call model.gradient_checkpointing_enable() before building the Trainer (GLM-4 finetune_demo/finetune.py
# at 081f0fb, the cited commit; ChatGLM3 finetune_demo/finetune_hf.py at 00930ac).
SCRIPT_TURNS_CHECKPOINTING_ON = frozenset(
    {"THUDM/GLM-4 finetune_demo/README_en.md", "THUDM/ChatGLM3 finetune_demo/README_en.md"}
)


def _checkpointing(row: Row) -> bool:
    """The row's gradient checkpointing: as stated, else what its source's script or framework does."""
    stated = row.raw.get("gradient_checkpointing")
    if stated is not None:
        return bool(stated)
    if row.source in SCRIPT_TURNS_CHECKPOINTING_ON:
        return True
    return row.raw.get("framework") not in CHECKPOINTING_OFF_BY_DEFAULT


def _stated_settings(row: Row) -> dict[str, Any]:
    """The row's `settings` (what its source states that has no column) in the estimate's terms."""
    settings = row.raw.get("settings") or {}
    found: dict[str, Any] = {}
    if settings.get("fused_cross_entropy"):
        found["fused_cross_entropy"] = True
    chunks = int(settings.get("loss_output_chunks") or 0)
    if chunks > 1:  # torchtune's chunked-output loss: 16-bit logits whole, the fp32 loss a chunk at a time
        found["loss_chunk_tokens"] = -(
            -int(row.raw.get("micro_batch") or 1) * int(row.raw.get("seq_len") or 0) // chunks
        )
    for key in ("optimizer_bits", "optimizer_paged", "optimizer_in_backward", "activation_offload"):
        if key in settings:
            found[key] = settings[key]
    return found


# Frameworks that prepare a bitsandbytes-quantized model with peft's prepare_model_for_kbit_training, which
# upcasts every unquantized weight (embeddings, output layer, norms) to fp32.
KBIT_UPCAST = frozenset({"transformers", "hf-trainer", "trl", "axolotl", "llama-factory", "llamafactory"})


def _kbit_upcast(row: Row) -> bool:
    """A bitsandbytes QLoRA run through peft's prepare_model_for_kbit_training (GPTQ/AWQ checkpoints are not)."""
    return row.raw["tuner"] == "qlora" and row.raw.get("framework") in KBIT_UPCAST and _quant_method(row) == "bnb"


def _quant_method(row: Row) -> str | None:
    """A quantized row's method: the one its quote names (the source's own words), else GPTQ or AWQ where its
    notes say so, else bitsandbytes (QLoRA's). The quote comes first: a note about the source's other rows
    ("gptq/int8 rows: fp16 compute likely") does not make a bitsandbytes row GPTQ."""
    if not row.raw.get("quant_bits"):
        return None
    quote = str(row.raw.get("quote", "")).lower()
    named = [method for method in ("gptq", "awq", "bnb") if method in quote]
    if len(named) == 1:
        return named[0]
    return next((method for method in ("gptq", "awq") if _notes_say(row, method)), "bnb")


_NEGATED_BEFORE = re.compile(r"\b(?:no|not|without)\b")
_NEGATED_AFTER = re.compile(r"^\S*\s+(?:removed|off|disabled|false)\b")


def _liger(row: Row) -> bool:
    """The row ran liger's fused cross-entropy: a mention of liger in its notes that no word in its clause
    negates (ms-swift's liger example publishes both runs, "Using use_liger_kernel ..." and "Not using
    use_liger_kernel ..."; a gatherer writes "no --use_liger passed", "only liger removed")."""
    text = _notes_text(row)
    for match in re.finditer("liger", text):
        before = re.split(r"[;,.(]", text[: match.start()])[-1]
        after = re.split(r"[;,.)]", text[match.start() :])[0]
        if not _NEGATED_BEFORE.search(before) and not _NEGATED_AFTER.search(after):
            return True
    return False


def _notes_text(row: Row) -> str:
    """A row's quote, note and inferred notes as one lower-case text."""
    return " ".join(
        [str(row.raw.get("quote", "")), str(row.raw.get("note", "")), *map(str, row.raw.get("inferred") or [])]
    ).lower()


def _notes_say(row: Row, word: str) -> bool:
    """A setting the source states but the table has no field for (liger kernel, a classification head)."""
    return word in _notes_text(row)


def allocated_measure(row: Row) -> bool:
    """The figure is torch's allocated bytes (max_memory_allocated, torchtune's 'Peak Memory Active'): what
    the parts allocate, without the CUDA context and what the caching allocator reserves beyond them."""
    method = str((row.raw.get("measured") or {}).get("method") or "")
    return (
        method in ("torch_allocated", "allocated")
        or _notes_say(row, "max_memory_allocated")
        or _notes_say(row, "peak memory active")
    )


def zero_for(row: Row, strategy: Strategy, hidden: int | None) -> ZeroSettings | None:
    """The shipped ZeRO config of the row's stage; ZeRO-2 or ZeRO-3 with only the optimizer offloaded where
    the row says so (the schema has no value for it)."""
    if strategy is Strategy.DDP:
        return None
    zero = zero_settings(SHIPPED_ZERO[strategy.value], hidden)
    offloaded = _notes_say(row, "offload_optimizer cpu") or row.strategy == "zero2_offload"
    if strategy in (Strategy.ZERO2, Strategy.ZERO3) and offloaded:
        zero = replace(zero, offload_optimizer=True)
    return zero


def _strategy(row: Row) -> Strategy:
    """The row's strategy as the planner's: FSDP's full shard is ZeRO-3 (the tables' convention), with its
    CPU offload ZeRO-3's offload; a `+` names what runs beside it (sequence parallelism)."""
    return {
        "zero2": Strategy.ZERO2,
        "zero2_offload": Strategy.ZERO2,  # with the optimizer offloaded: zero_for
        "zero3": Strategy.ZERO3,
        "fsdp": Strategy.ZERO3,
        "zero3_offload": Strategy.ZERO3_OFFLOAD,
        "fsdp_offload": Strategy.ZERO3_OFFLOAD,
    }.get(row.strategy.split("+")[0], Strategy.DDP)


def _sequence_parallel(row: Row) -> int:
    """swift's --sequence_parallel_size, where the row's strategy names it (`ddp+ulysses_sp8`)."""
    found = re.search(r"\bsp(\d+)$|_sp(\d+)$", row.strategy)
    return int(next(g for g in found.groups() if g)) if found else 1


STATE_PARTS = ("gpu_weights", "gpu_gradients", "gpu_optimizer", "gpu_zero_buckets")


def _spread(row: Row, parts: dict[str, int], context: int, fragmentation: float) -> float:
    """device_map: weights and optimizer state spread over the GPUs, activations on one."""
    n = int(row.raw["gpus"])
    gpu = {k: v for k, v in parts.items() if k.startswith("gpu_") and k not in ("gpu_fragmentation_margin",)}
    spread = sum(v / n if k in STATE_PARTS else v for k, v in gpu.items() if k != "gpu_cuda_context")
    return (spread + context) * (1 + fragmentation)


def model_gpus(row: Row) -> int:
    """The GPUs one model copy is split over: all of them, or N where DDP processes each split it (MP + DDP)."""
    notes = " ".join(map(str, row.raw.get("inferred", [])))
    found = re.search(r"each model split over (\d+) GPUs", notes)
    return int(found.group(1)) if found else int(row.raw["gpus"])


def estimate_device_map(row: Row, calibration: new_estimate.Calibration) -> float | None:
    """device_map rows through launcher/plan/device_map.py: swift's own placement (device_map='auto', no
    max_memory, each GPU's budget its card), the GPU whose need is largest."""
    shape = train_shape(row)
    pieces = device_map.pieces_of(shape)
    if pieces is None:
        return None
    card = int(row.card_gib * GiB)
    n = model_gpus(row)
    found = device_map.estimate_device_map(shape, pieces, [card] * n, None, budgets=[card] * n, calibration=calibration)
    return None if found is None else found[0].gpu_need_bytes / GiB


def estimate_new(row: Row, calibration: new_estimate.Calibration | None = None) -> float | None:
    calibration = calibration or new_estimate.Calibration()
    if row.strategy == "device_map":
        return estimate_device_map(row, calibration)
    strategy = _strategy(row)
    shape = train_shape(row)
    est = new_estimate.estimate(strategy, shape, None, None, zero_for(row, strategy, shape.hidden_size), calibration)
    need = est.gpu_need_bytes
    if allocated_measure(row) and not row.oom:
        need -= est.parts["gpu_cuda_context"] + est.parts["gpu_fragmentation_margin"]
    return need / GiB


def estimate_old(row: Row) -> float:
    strategy = {Strategy.DDP: Strategy.ZERO2}.get(_strategy(row), _strategy(row))
    shape = train_shape(row)
    old_shape = old_estimate.TrainShape(
        total_params=shape.total_params,
        trainable_params=shape.trainable_params,
        largest_layer_params=shape.largest_layer_params,
        hidden_size=shape.hidden_size,
        num_layers=shape.num_layers,
        vocab_size=shape.vocab_size,
        micro_batch=shape.micro_batch,
        seq_len=shape.seq_len,
        gradient_checkpointing=shape.gradient_checkpointing,
        gpus_per_node=shape.gpus_per_node,
        nnodes=shape.nnodes,
    )
    est = old_estimate.estimate(strategy, old_shape, None, None)
    if row.strategy == "device_map":
        parts = {"gpu_weights": est.parts["gpu_model_states"], "gpu_activations": est.parts["gpu_activations"]}
        return _spread(row, parts, old_estimate.CUDA_CONTEXT_BYTES, old_estimate.FRAGMENTATION_MARGIN) / GiB
    return est.gpu_need_bytes / GiB


def estimate_deepspeed(row: Row) -> float:
    """DeepSpeed's estimators as a user would call them: every parameter trainable, model states only."""
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    per_node, nodes = _gpus(row)
    params = _params(row)
    if row.strategy in ("zero3", "zero3_offload"):
        offload = row.strategy == "zero3_offload"
        _, gpu, _ = estimate_zero3_model_states_mem_needs(
            params, _largest(row), per_node, nodes, cpu_offload=offload, cpu_offload_params=offload
        )
    else:
        _, gpu = estimate_zero2_model_states_mem_needs(params, per_node, nodes, cpu_offload=False)
    if row.strategy == "device_map":
        gpu = gpu / int(row.raw["gpus"])
    return float(gpu) / GiB


def estimate_accelerate(row: Row) -> float:
    """`accelerate estimate-memory`'s "Training using Adam" for the row's dtype, one process, batch 1."""
    from accelerate.commands.estimate import estimate_training_usage

    dtype = "float32" if row.raw.get("torch_dtype") == "float32" else "bfloat16"
    sizes = estimate_training_usage(4 * _params(row), dtype)
    need = float(max(sizes.values()))
    if row.strategy == "device_map":
        need /= int(row.raw["gpus"])
    return need / GiB


ESTIMATORS: dict[str, Callable[[Row], float | None]] = {
    "new": estimate_new,
    "old (566cec5)": estimate_old,
    "deepspeed": estimate_deepspeed,
    "accelerate": estimate_accelerate,
}


# ---- scoring ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Score:
    rows: int
    agreement: float  # share of rows where "fits" / "OOM" matches the source
    fits_but_oom: int  # rows the estimate calls fitting that ran out of GPU memory
    ooms: int
    median_ratio: float  # estimate / measured, rows with a peak below the card
    within: float  # share of those within 15 %
    ratio_rows: int
    limit_low: int  # at-the-limit rows where the estimate is more than 10 % below the measured peak
    limit_rows: int
    ratios: dict[str, float] = field(default_factory=dict, repr=False)


def score(rows: Iterable[Row], estimator: Callable[[Row], float | None]) -> Score:
    agree = total = fits_but_oom = ooms = limit_low = limit_rows = 0
    ratios: dict[str, float] = {}
    for row in rows:
        est = estimator(row)
        if est is None:
            continue
        total += 1
        says_fits = est <= row.card_gib
        if row.oom:
            ooms += 1
            agree += not says_fits
            fits_but_oom += says_fits
            continue
        agree += says_fits
        peak = row.measured_gib
        assert peak is not None
        if row.at_limit:
            limit_rows += 1
            limit_low += est < 0.9 * peak
        if peak < row.card_gib:
            ratios[row.id] = est / peak
    values = list(ratios.values())
    return Score(
        rows=total,
        agreement=agree / total if total else 0.0,
        fits_but_oom=fits_but_oom,
        ooms=ooms,
        median_ratio=statistics.median(values) if values else 0.0,
        within=sum(abs(v - 1) <= WITHIN for v in values) / len(values) if values else 0.0,
        ratio_rows=len(values),
        limit_low=limit_low,
        limit_rows=limit_rows,
        ratios=ratios,
    )
