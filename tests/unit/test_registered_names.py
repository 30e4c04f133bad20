"""A name swift's registries do not hold, for --optimizer, --callbacks, --loss_type or --eval_metric, is
refused before anything starts (launcher.backends.swift.check_registered_names); swift takes it and stops
on a bare KeyError once the model has loaded (tests/stack/test_swift_models_real.py runs real swift)."""

from __future__ import annotations

import pytest

from launcher.backends import swift as swift_backend
from launcher.backends.swift import SWIFT
from launcher.errors import SafeSftError

BASE = ["--model", "m", "--use_cpu", "true"]


@pytest.mark.parametrize(
    ("args", "said", "fix"),
    [
        (["--optimizer", "adamw_torch"], "--optimizer 'adamw_torch' is no name swift sft 4.6.0 registers for it: ",
         "use one of default, galore, lorap, muon, muonclip, multimodal; torch's optimizer is --optim (--optim "
         "adamw_torch)"),
        (["--optimizer", "galor"], "--optimizer 'galor' is no name swift sft 4.6.0 registers for it (did you mean "
         "galore?)", "use one of default, galore"),
        (["--callbacks", "early_stop", "earlystop"], "--callbacks 'earlystop' is no name", "use one of "
         "activation_cpu_offload, adalora"),
        (["--loss_type", "cross-entropy"], "--loss_type 'cross-entropy' is no name swift sft 4.6.0 registers for it "
         "(did you mean cross_entropy?)", "use one of cross_entropy"),
        (["--eval_metric", "accuracy"], "--eval_metric 'accuracy' is no name", "use one of acc, nlg"),
    ],
)  # fmt: skip
def test_a_name_swift_does_not_register_is_refused_with_the_names_it_has(args: list[str], said: str, fix: str) -> None:
    with pytest.raises(SafeSftError) as err:
        SWIFT.read([*BASE, *args])
    assert err.value.message.startswith(said)
    assert err.value.message.endswith("swift stops on it with a bare KeyError in every rank once the model has loaded")
    assert err.value.hint.startswith(fix) and err.value.hint.endswith(
        "a name of your own comes with --external_plugins"
    )


@pytest.mark.parametrize("value", ["default", "all", "hermes", "last_round+hermes", "hermes+ignore_empty_think"])
def test_a_loss_scale_as_swift_composes_it_passes(value: str) -> None:
    SWIFT.read([*BASE, "--loss_scale", value])


@pytest.mark.parametrize("value", ["no_such", "last_round+herms", "default+", "hermes+last_round"])
def test_a_loss_scale_swift_cannot_compose_is_refused(value: str) -> None:
    """A base strategy (default, last_round, all) only first, then the registry's names joined by +."""
    with pytest.raises(SafeSftError) as err:
        SWIFT.read([*BASE, "--loss_scale", value])
    assert err.value.message == (
        f"--loss_scale {value!r} is no name swift sft 4.6.0 registers for it: swift stops on it in every rank "
        "once the model has loaded"
    )
    assert "(after one of default, last_round, all and +, or joined by +)" in err.value.hint


def test_registered_names_pass_and_a_plugin_or_another_swift_lets_any_name_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    SWIFT.read([*BASE, "--optimizer", "galore", "--callbacks", "early_stop", "lisa", "--loss_type", "infonce"])
    SWIFT.read([*BASE, "--optimizer", "mine", "--external_plugins", "plugin.py"])
    SWIFT.read([*BASE, "--loss_type", "mine", "--custom_register_path", "register.py"])
    monkeypatch.setattr(swift_backend, "installed_swift_like", lambda table: None)
    SWIFT.read([*BASE, "--optimizer", "mine"])
