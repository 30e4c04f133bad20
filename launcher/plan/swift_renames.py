"""The `swift sft` options earlier ms-swift versions had, and what ms-swift 4 takes instead.

Contract: `EARLIER_OPTIONS[key]` gives, for an option name (no dashes) that an earlier ms-swift took and
ms-swift 4 does not, what to write now: the new option (with the value it takes where the value changed
too), or how the same is said now where the option was removed. Data only; the
warning and the refusal that use it are launcher.plan.swift_args.unknown_flag_warning's.

Sources: ms-swift's own release notes, docs/source_en/Instruction/ReleaseNote3.0.md ("Parameter
Differences": 2.x to 3.x), and ms-swift 4's rename of train_type to tuner_type; the 2.x dataset options
(custom_train_dataset_path, dataset_test_ratio) as ms-swift 2's command-line docs named them.
"""

from __future__ import annotations

# old name -> what ms-swift 4 takes instead
EARLIER_OPTIONS = {
    "sft_type": "--tuner_type",
    "train_type": "--tuner_type",
    "model_id_or_path": "--model",
    "template_type": "--template",
    "quantization_bit": "--quant_bits",
    "check_model_is_latest": "--check_model",
    "batch_size": "--per_device_train_batch_size",
    "eval_batch_size": "--per_device_eval_batch_size",
    "use_flash_attn": "--attn_impl flash_attn",
    "bnb_4bit_comp_dtype": "--bnb_4bit_compute_dtype",
    "dtype": "--torch_dtype (bfloat16, float16 or float32)",
    "add_output_dir_suffix": "--add_version",
    "lora_target_modules": "--target_modules (ALL is now all-linear)",
    "custom_train_dataset_path": "--dataset",
    "custom_val_dataset_path": "--val_dataset",
    "dataset_test_ratio": "--split_dataset_ratio",
    "train_dataset_sample": "--dataset PATH#N (N rows of PATH)",
    "val_dataset_sample": "--val_dataset PATH#N (N rows of PATH)",
    "do_sample": "--temperature (0 is greedy)",
}
