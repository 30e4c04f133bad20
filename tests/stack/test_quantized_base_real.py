"""A quantized LoRA base as the installed bitsandbytes and ms-swift run it.

launcher/plan/estimate.py counts a bitsandbytes 4-bit base as a frozen layer (its matmul keeps no input
for the backward), an 8-bit one as a trained layer (its GPU matmul keeps the input), and
launcher/plan/sizing.py counts `--quant_bits` without `--quant_method` as no quantization at all. Each is
held here against the real code: bitsandbytes' autograd functions (their saved tensors sit on the context,
where saved-tensor hooks do not see them, so the context itself is read) and swift's quantization arguments.
"""

from __future__ import annotations

import dataclasses
import inspect

from launcher.plan.estimate import QUANT_KEEPS_NO_INPUT


def test_a_4bit_linear_keeps_only_its_quantized_weight(stack_installed: None) -> None:
    import bitsandbytes as bnb
    import torch

    weight = torch.randn(512, 256, dtype=torch.bfloat16)
    linear = bnb.nn.Linear4bit(256, 512, bias=False, compute_dtype=torch.bfloat16, quant_type="nf4")
    linear.weight = bnb.nn.Params4bit(weight, requires_grad=False, quant_type="nf4").to("cpu")  # quantizes
    x = torch.randn(8, 256, dtype=torch.bfloat16, requires_grad=True)  # LoRA's path: the input needs a gradient
    saved: list[torch.Tensor] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        y = linear(x)
    assert type(y.grad_fn).__name__ == "MatMul4BitBackward"  # the training path, on every device
    kept = [t for t in y.grad_fn.tensors if t is not None]  # type: ignore[union-attr]
    assert saved == [] and len(kept) == 1 and kept[0].dtype == torch.uint8  # the packed weight, no input
    y.float().sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape
    assert ("bnb", 4) in QUANT_KEEPS_NO_INPUT


def test_the_8bit_gpu_matmul_keeps_its_input(stack_installed: None) -> None:
    from bitsandbytes.autograd import _functions

    source = inspect.getsource(_functions.MatMul8bitLt.forward)
    assert "ctx.tensors = (CAt, subA, A)" in source  # A: the 16-bit input, kept whenever it needs a gradient
    assert ("bnb", 8) not in QUANT_KEEPS_NO_INPUT


def test_swift_quantizes_nothing_without_a_method(stack_installed: None) -> None:
    import torch
    from swift.arguments.base_args.quant_args import QuantizeArguments

    @dataclasses.dataclass
    class Args(QuantizeArguments):
        torch_dtype: torch.dtype = torch.bfloat16  # what the full argument class carries

    assert Args(quant_bits=4).get_quantization_config() is None
    assert type(Args(quant_bits=4, quant_method="bnb").get_quantization_config()).__name__ == "BitsAndBytesConfig"
