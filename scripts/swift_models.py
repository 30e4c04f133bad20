"""Write launcher/backends/swift_models.txt: how the installed ms-swift names a model's type and template,
and the names its registries hold for its name-valued options.

swift sft decides a model's `model_type` (and from it the template) before it loads anything
(swift/model/model_meta.py `get_model_info_meta`): by the model's name among the ids it registers, else
by the `model_type` of an args.json in the model's folder (swift writes one beside what it trains and
exports), else by config.json's first architecture, which must name exactly one type; with several it
stops ("Failed to automatically match `model_type`"). It also stops on a `--model_type` or `--template`
it does not have, and, once the model has loaded, on an `--optimizer`, `--callbacks`, `--loss_type`,
`--eval_metric` or `--loss_scale` name its registries do not hold (a bare KeyError, or a TypeError).
safe-sft makes the same decisions from this file, without importing swift. Lines:

    type NAME TEMPLATE CANDIDATES      a model type, its template (- for none) and its candidate templates
    name NAME TYPE TEMPLATE            a registered id's last part, lower case: its type and group template
    arch ARCHITECTURE TYPE...          the types registered for an architecture (`null`: none given)
    template NAME LATIN WIDE DIGITS OTHER   a template and its default system prompt's characters by script
    registered OPTION NAME...          the names swift's registry takes for a name-valued option
                                       (--optimizer, --callbacks, --loss_type, --eval_metric, --loss_scale)
    loss_scale_base NAME...            the base strategies a --loss_scale may begin with
                                       (`[BASE+]NAME[+NAME...]`, or a base alone: swift/loss_scale/mapping.py)

tests/stack/test_swift_models_real.py holds the file to the installed swift.

    python scripts/swift_models.py          # rewrite the file
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from launcher.probe.dataset import chars

OUT = Path(__file__).resolve().parents[1] / "launcher" / "backends" / "swift_models.txt"


def lines() -> list[str]:
    """The table's lines, in swift's own registration order (its name match takes the first)."""
    import swift
    from swift.model.model_meta import MODEL_MAPPING, _get_arch_mapping
    from swift.template import TEMPLATE_MAPPING

    out = [f"# swift's model types and templates (ms-swift {swift.__version__}): scripts/swift_models.py writes this"]
    names: list[str] = []
    seen: set[str] = set()
    for model_type, meta in MODEL_MAPPING.items():
        candidates = ",".join(meta.candidate_templates) or "-"
        out.append(f"type {model_type} {meta.template or '-'} {candidates}")
        for group in meta.model_groups:
            for model in group.models:
                for key in ("ms_model_id", "hf_model_id", "model_path"):
                    value = getattr(model, key)
                    if not isinstance(value, str):
                        continue
                    name = value.rsplit("/", 1)[-1].lower()
                    if name and name not in seen and " " not in name:
                        seen.add(name)
                        names.append(f"name {name} {model_type} {group.template or '-'}")
    out += names
    for arch, types in _get_arch_mapping().items():
        out.append(f"arch {arch} {' '.join(types)}")
    for name, meta in TEMPLATE_MAPPING.items():
        latin, wide, digits, other = chars(meta.default_system or "")
        out.append(f"template {name} {latin} {wide} {digits} {other}")
    for option, names in registered_names().items():
        out.append(f"registered {option} {' '.join(names)}")
    from swift.loss_scale.base import ALL_BASE_STRATEGY

    out.append(f"loss_scale_base {' '.join(ALL_BASE_STRATEGY)}")
    return out


def registered_names() -> dict[str, tuple[str, ...]]:
    """The registries swift looks a name-valued option's value up in, once the model has loaded."""
    from swift.callbacks.mapping import callbacks_map
    from swift.loss.mapping import loss_map
    from swift.loss_scale.mapping import loss_scale_map
    from swift.metrics.mapping import eval_metrics_map
    from swift.optimizers.mapping import optimizers_map

    registries = {"optimizer": optimizers_map, "callbacks": callbacks_map, "loss_type": loss_map}
    registries.update({"eval_metric": eval_metrics_map, "loss_scale": loss_scale_map})
    return {option: tuple(registry) for option, registry in registries.items()}


def main() -> int:
    OUT.write_text("\n".join(lines()) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
