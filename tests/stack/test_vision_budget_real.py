"""The image budget a Qwen-VL run gets when the user sets none, held against qwen_vl_utils and ms-swift.

launcher/plan/vision_budget.py says an unset budget lets one image bring 16384 merged tokens (qwen_vl_utils'
default) and names the variables swift patches into it. Both are read again here from the installed code:
qwen_vl_utils' module constants by parsing its source (importing it needs torchvision, which the CPU stack
does not carry), and swift's patch by reading the keys it copies from the environment.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
from pathlib import Path

from launcher.model import ModelFacts
from launcher.plan.features import read_features
from launcher.plan.swift_args import parse_swift_argv
from launcher.plan.vision_budget import IMAGE_MAX_TOKEN_NUM, MAX_PIXELS, OVIS_MAX_PIXELS, vision_budget_for


def _constants(path: Path) -> dict[str, int]:
    """The module's top-level integer constants, products of integers included (16384 * 28 * 28)."""
    found: dict[str, int] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                value = eval(compile(ast.Expression(node.value), str(path), "eval"), {"__builtins__": {}}, found)
            except Exception:  # a call, a name from an import: not a constant
                continue
            if isinstance(value, int):
                found[node.targets[0].id] = value
    return found


def _qwen_vl_utils_constants() -> dict[str, int]:
    spec = importlib.util.find_spec("qwen_vl_utils")
    assert spec is not None and spec.submodule_search_locations, (
        "qwen_vl_utils IS NOT INSTALLED: run `bash scripts/setup.sh` (it installs it for this test)"
    )
    return _constants(Path(next(iter(spec.submodule_search_locations))) / "vision_process.py")


def test_an_unset_budget_is_qwen_vl_utils_default(stack_installed: None) -> None:
    constants = _qwen_vl_utils_constants()
    merge = constants["SPATIAL_MERGE_SIZE"]
    assert merge == 2
    if "IMAGE_MAX_TOKEN_NUM" in constants:  # qwen_vl_utils 0.0.12 and later count tokens
        assert constants["IMAGE_MAX_TOKEN_NUM"] == IMAGE_MAX_TOKEN_NUM.default
        assert IMAGE_MAX_TOKEN_NUM.default * (14 * merge) ** 2 == MAX_PIXELS.default
    else:  # earlier releases count pixels at 28-pixel tokens
        assert constants["MAX_PIXELS"] == MAX_PIXELS.default


def test_swift_patches_the_budget_from_the_environment(stack_installed: None) -> None:
    from swift.model.models import qwen

    source = inspect.getsource(qwen.patch_qwen_vl_utils)
    for key in ("'max_pixels'", "'image_max_token_num'"):
        assert key in source  # get_env_args(key, ...) reads MAX_PIXELS / IMAGE_MAX_TOKEN_NUM
    assert "'MAX_PIXELS': 'IMAGE_MAX_TOKEN_NUM'" in inspect.getsource(qwen.compat_qwen_vl_utils)


def test_the_plan_counts_the_default_image_up_to_max_length(stack_installed: None) -> None:
    qwen25_vl = ModelFacts(
        name="Qwen2.5-VL-7B", total_params=8_292_166_656, source="config", hidden_size=3584, num_layers=28,
        vocab_size=152064, is_multimodal=True, model_type="qwen2_5_vl", vision_hidden_size=1280, vision_layers=32,
        vision_patch_size=14,
    )  # fmt: skip
    long = parse_swift_argv(["--model", "m", "--max_length", "32768"], {})
    default = _qwen_vl_utils_constants().get("IMAGE_MAX_TOKEN_NUM", 16384)
    assert read_features(long, qwen25_vl, {}, 1).image_pixels == default * 28 * 28


def _product(node: ast.expr) -> int:
    """A default written as a number or a product of numbers (1344 * 1792)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    assert isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult), ast.dump(node)
    return _product(node.left) * _product(node.right)


def test_ovis2_5s_template_reads_max_pixels_with_its_own_default(stack_installed: None) -> None:
    """swift's Ovis2.5 template reads MAX_PIXELS (and MIN_PIXELS) itself, with its own values, and that is
    the template swift registers for the ovis2_5 model type."""
    from swift.model.register import MODEL_MAPPING
    from swift.template.register import TEMPLATE_MAPPING
    from swift.template.templates.qwen import Ovis2_5Template

    meta = MODEL_MAPPING["ovis2_5"]
    templates = {group.template or meta.template for group in meta.model_groups}
    assert {TEMPLATE_MAPPING[t].template_cls for t in templates} == {Ovis2_5Template}
    calls = {
        node.args[0].value: node.args[2]
        for node in ast.walk(ast.parse(inspect.getsource(Ovis2_5Template.init_env_args).strip()))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "get_env_args"
    }
    values = {name: _product(node) for name, node in calls.items() if name.endswith("pixels")}
    assert (values["max_pixels"], values["min_pixels"]) == (OVIS_MAX_PIXELS.default, OVIS_MAX_PIXELS.minimum)
    assert vision_budget_for("ovis2_5", {}) is OVIS_MAX_PIXELS
