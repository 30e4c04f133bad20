"""The LLaMA-Factory backend: `safe-sft llamafactory train CONFIG [key=value ...]`, drop-in for
`llamafactory-cli train CONFIG [key=value ...]`, run in every rank by launcher/hf_worker.py under
@record as LLaMA-Factory's own per-rank entry (`llamafactory.launcher`, what its CLI hands torchrun).

LLaMA-Factory reads the YAML/JSON config and then the `key=value` overrides (OmegaConf: later wins),
and so does safe-sft, refusing what LLaMA-Factory cannot use (llamafactory_args.py): the config's keys and
the overrides become swift's names (`cutoff_len` is
max_length, `disable_gradient_checkpointing` the opposite of gradient_checkpointing), and the ladder's
changes go back as more `key=value` overrides after the user's, the config file untouched. Its
trainer is transformers' Trainer, so checkpoints, resume and save_only_model are HF's. Started on an
output dir with checkpoints, it resumes from the newest by itself, complete or not; safe-sft names the
newest complete one instead (and refuses when there is none). It lacks
device_map training, resume_only_model and add_version (an attempt that would save over a
checkpoint gets a fresh `<output_dir>/v<N>-<run>` as its output_dir). Its image budget is an argument,
`image_max_pixels` (pixels, 768 x 768 by default), which the ladder turns where swift's would turn MAX_PIXELS.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from functools import partial
from pathlib import Path

from launcher.backends.base import WORKER_DIR, Backend, BackendArgs
from launcher.backends.llamafactory_args import check_llamafactory_config_file, check_llamafactory_values
from launcher.backends.llamafactory_data import check_llamafactory_datasets
from launcher.errors import SafeSftError
from launcher.model import EnvSetting
from launcher.plan.swift_args import CONFIG_SUFFIXES, KeyValueSpelling, SwiftArgs, negate, normalize_key

ENTRY = "llamafactory.launcher"  # the module torchrun runs in each rank under llamafactory-cli train
# LLaMA-Factory 0.9.5's names for the fields the plan reads (hparams/finetuning_args.py, model_args.py), so that
# its estimate counts what LLaMA-Factory trains: `finetuning_type: full` is a full fine-tune, not LoRA
SPELLING = KeyValueSpelling(
    names={
        "max_length": "cutoff_len",
        "tuner_type": "finetuning_type",  # lora, oft, freeze (its last layers), full
        "target_modules": "lora_target",
        "modules_to_save": "additional_target",
        "quant_bits": "quantization_bit",
        "quant_method": "quantization_method",
        "freeze_vit": "freeze_vision_tower",
        "freeze_aligner": "freeze_multi_modal_projector",
        "freeze_llm": "freeze_language_model",
        "use_liger_kernel": "enable_liger_kernel",
        "attn_impl": "flash_attn",
    },
    negated={"gradient_checkpointing": "disable_gradient_checkpointing"},
    # swift's fields safe-sft may add that LLaMA-Factory has no counterpart for (it truncates on its own)
    dropped=frozenset({"truncation_strategy", "max_memory", "resume_only_model", "add_version", "device_map"}),
    # its AttentionFunction's words; `auto` leaves transformers' default, as an unset --attn_impl does
    words={
        # transformers' Trainer.train(resume_from_checkpoint=False): no resume, and no search for one either
        "resume_from_checkpoint": {"false": ""},
        "target_modules": {"all": "all-linear"},
        "attn_impl": {"auto": "", "disabled": "eager", "fa2": "flash_attention_2", "fa3": "flash_attention_3"},
    },
)
# LLaMA-Factory's defaults where they differ from swift's: transformers' TrainingArguments, and its own
# cutoff_len 2048, gradient checkpointing on (disable_gradient_checkpointing false), image_max_pixels 768 x 768,
# lora_dropout 0, bitsandbytes for quantization_bit, and logits for every position (transformers' loss, where
# swift computes them for the labelled tokens alone)
DEFAULTS = {
    "lora_dropout": "0",
    "quant_method": "bnb",
    "use_logits_to_keep": "false",
    "per_device_train_batch_size": "8",
    "per_device_eval_batch_size": "8",
    "gradient_accumulation_steps": "1",
    "gradient_checkpointing": "true",
    "max_length": "2048",
    "dataloader_num_workers": "0",
    "output_dir": "trainer_output",
    "add_version": "false",
    "ddp_timeout": "1800",
    "image_max_pixels": str(768 * 768),
}
USAGE = "use it as `safe-sft llamafactory train [OPTIONS] config.yaml [key=value ...]`"


def read(argv: list[str]) -> BackendArgs:
    """`CONFIG [key=value ...]` (what follows `train`) -> the config path for the worker, and the args."""
    from launcher.swift_config import load_swift_config, omegaconf_scalar

    if not argv:
        raise SafeSftError("no LLaMA-Factory config given", USAGE)
    config, overrides = argv[0], argv[1:]
    if not config.endswith(CONFIG_SUFFIXES) or config.startswith("-"):
        raise SafeSftError(
            f"{config} where LLaMA-Factory's YAML or JSON config should come first",
            f"{USAGE}; `--key value` arguments without a config file are not read by safe-sft yet",
        )
    path = Path(config)
    if not path.is_file():
        raise SafeSftError(f"LLaMA-Factory config {config} does not exist", USAGE)
    check_llamafactory_config_file(path)
    loaded = load_swift_config([config], omegaconf=True) or {}
    merged: dict[str, object] = {}  # what LLaMA-Factory parses: the config's keys, then the overrides'
    where: dict[str, str] = {}  # where each came from
    values: dict[str, str] = {}
    for key, raw in loaded.items():
        merged[str(key)], where[str(key)] = raw, config
        if _resumes_newest(str(key), raw):
            continue
        name, negated = SPELLING.swift_key(normalize_key(str(key)))
        if raw is None and name in DEFAULTS:  # a YAML null: LLaMA-Factory takes its default
            continue
        text = SPELLING.swift_value(name, _text(raw))
        values[name] = negate(text) if negated else text
    items: list[tuple[str, tuple[str, ...]]] = []
    for before, token in zip(["", *overrides], overrides, strict=False):
        key, eq, value = token.partition("=")
        if not eq and before.endswith("=") and not before.startswith("-"):  # `key= value`: the shell made two words
            raise SafeSftError(
                f"`{before}` then `{token}`: a space after = makes two words of one override",
                f"write `{before}{token}`, without the space",
            )
        if not eq or not key or key.startswith("-"):
            raise SafeSftError(
                f"{token}: LLaMA-Factory's overrides after the config are key=value",
                f"write it as `{key.lstrip('-') or 'key'}=value`",
            )
        top = key.split(".")[0]  # OmegaConf's dotted key sets a field of a mapping argument
        merged[top], where[top] = (omegaconf_scalar(value) if top == key else {}), f"`{token}`"
        if _resumes_newest(key, merged[top]):
            continue
        if key == "resume_from_checkpoint" and merged[top] is False:
            value = "false"  # no resume (OmegaConf's false, no, off): swift's empty value, written back as false
        name, negated = SPELLING.swift_key(normalize_key(key))
        if merged[top] is None and top == key and name in DEFAULTS:
            # `key=` is OmegaConf's null: LLaMA-Factory takes its default (`output_dir=` with OUT unset
            # writes to trainer_output/, not the working directory), over the config's value too
            values.pop(name, None)
            items = [item for item in items if item[0] != f"--{name}"]
            continue
        value = SPELLING.swift_value(name, value)
        items.append((f"--{name}", (negate(value) if negated else value,)))
    check_llamafactory_values(merged, where)
    stage = str(merged.get("stage", "sft"))
    # LLaMA-Factory packs for neat_packing, and for pre-training unless told not to (hparams/parser.py)
    # (a bool field takes the value as it is: Python's truth of it, quoted "true" too)
    if bool(merged.get("neat_packing")) or (stage == "pt" and merged.get("packing") is None):
        values["packing"] = "true"
    args = SwiftArgs(tuple(items), config_values=values, defaults=DEFAULTS, spelling=SPELLING)
    datasets = partial(check_llamafactory_datasets, merged, where, Path.cwd())
    warnings = (stage_warning(stage, args.get("tuner_type") or "lora", merged),)
    return BackendArgs(
        ("-m", ENTRY, str(path.resolve())),
        args,
        check_named=datasets,
        warnings=tuple(w for w in warnings if w),
        reread=(str(path.resolve()),),
    )


STAGES = ("pt", "sft", "rm", "ppo", "dpo", "kto")  # 0.9.5's FinetuningArguments.stage


def stage_warning(stage: str, tuner: str, merged: Mapping[str, object]) -> str | None:
    """What the estimate, which counts a supervised fine-tune (sft, pt), leaves out of LLaMA-Factory's other
    stages (0.9.5's train/*/workflow.py): a preference pair's two sequences in one forward, and the frozen
    reference model (another copy of the weights) that dpo (but for orpo and simpo) and kto load for a
    full or freeze tuning, or from `ref_model`."""
    if stage in ("sft", "pt"):
        return None
    if stage not in STAGES:  # LLaMA-Factory refuses it in every rank (its Literal): a typo, most likely
        near = difflib.get_close_matches(stage, STAGES, n=1)
        guess = f" (did you mean {near[0]}?)" if near else ""
        return f"stage: {stage} is none of LLaMA-Factory's stages ({', '.join(STAGES)}){guess}: it stops on it"
    left = {"rm": ["each pair's two sequences (twice the tokens a micro-batch holds)", "the value head"],
            "ppo": ["the reward model", "the reference model", "the value head", "generation"]}.get(
        stage, ["each pair's two sequences (twice the tokens a micro-batch holds)"])  # fmt: skip
    loss = str(merged.get("pref_loss", "sigmoid"))
    uses_reference = stage == "kto" or (stage == "dpo" and loss not in ("orpo", "simpo"))
    if uses_reference and (merged.get("ref_model") or tuner not in ("lora", "oft")):
        left.append("the frozen reference model (one more copy of the weights)")
    return (
        f"stage: {stage}: the memory estimate counts a supervised fine-tune's; it leaves out {', '.join(left)}, "
        "so a strategy it calls a fit may not be: the OOM ladder then takes over"
    )


def launch_env(env: Mapping[str, str]) -> tuple[EnvSetting, ...]:
    """What `llamafactory-cli train` sets for its torchrun ranks unless OPTIM_TORCH is off (its launcher.py)."""
    if env.get("OPTIM_TORCH", "1").lower() not in ("true", "y", "1"):
        return ()
    why = "as llamafactory-cli train sets it for torchrun; OPTIM_TORCH=0 turns it off"
    return (
        EnvSetting("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", why),
        EnvSetting("TORCH_NCCL_AVOID_RECORD_STREAMS", "1", why),
    )


def _resumes_newest(key: str, value: object) -> bool:
    """`resume_from_checkpoint: true`: transformers' Trainer takes the newest checkpoint, as LLaMA-Factory does
    by itself (Backend.resumes_by_itself), and safe-sft names the newest complete one instead: not a path."""
    return key == "resume_from_checkpoint" and value is True


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)  # LLaMA-Factory's lists (dataset, lora_target) are comma lists
    return str(value)


LLAMAFACTORY = Backend(
    name="llamafactory",
    command="safe-sft llamafactory train",
    worker=WORKER_DIR / "hf_worker.py",
    read=read,
    missing=frozenset({"device_map", "resume_only_model", "add_version"}),
    budget_args={"MAX_PIXELS": "image_max_pixels"},  # pixels per image, for every vision-language family
    model_key="model_name_or_path",
    dataset_key=None,  # datasets are names in its dataset_info.json
    checked_data_keys=(),
    device_map=False,
    resumes_latest=True,
    launch_env=launch_env,
    trainer=("llamafactory", "llamafactory"),
    writes_args_json=False,
)
