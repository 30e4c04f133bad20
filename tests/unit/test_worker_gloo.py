"""The ZeRO stage the workers read from a trainer's resolved --deepspeed (launcher/worker_gloo.py); the
group itself is started on the real stack (tests/stack/test_zero3_cpu_real.py)."""

from __future__ import annotations

import json
from pathlib import Path

from launcher.worker_gloo import gloo_before_zero3_on_cpu, zero_stage


def test_the_stage_is_read_from_a_dict_or_a_json_path_and_none_otherwise(tmp_path: Path) -> None:
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    assert zero_stage({"zero_optimization": {"stage": 2}}) == 2
    assert zero_stage(str(config)) == 3
    assert zero_stage(str(tmp_path / "absent.json")) is None
    (tmp_path / "bad.json").write_text("{not json")
    assert zero_stage(str(tmp_path / "bad.json")) is None
    assert zero_stage(None) is None and zero_stage({"zero_optimization": 3}) is None


def test_nothing_is_started_off_the_cpu_alone_or_below_zero3(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import sys

    monkeypatch.setitem(sys.modules, "deepspeed", None)  # an import would raise: nothing may reach it
    monkeypatch.setenv("WORLD_SIZE", "2")
    zero3 = {"zero_optimization": {"stage": 3}}
    gloo_before_zero3_on_cpu(False, zero3)  # on GPUs: transformers and DeepSpeed make the NCCL group
    gloo_before_zero3_on_cpu(True, {"zero_optimization": {"stage": 2}})
    gloo_before_zero3_on_cpu(True, None)
    monkeypatch.setenv("WORLD_SIZE", "1")
    gloo_before_zero3_on_cpu(True, zero3)  # one process: no group to make
