"""Fault injection for the real-stack tests, loaded into every rank by `--external_plugins`.

Activated with `--callbacks safe_sft_fault` and configured by environment variables:
  SAFE_SFT_FAULT        KIND:STEP:RANK with KIND one of
                        oom_step  raise torch.OutOfMemoryError at the end of that step,
                        oom_save  raise it while that step's checkpoint is being written (leaving it incomplete),
                        oom_forward / oom_backward  raise it inside the model's forward / backward pass (a
                                  module hook on a middle decoder layer) in the LAST micro-batch of the
                                  optimizer step after STEP: mid-step, the earlier micro-batches'
                                  gradients already accumulated, as a real OOM leaves them,
                        host_oom  move the rank into a small memory cgroup and allocate: a real kernel OOM kill,
                        neighbour_oom_kill  a process in a memory cgroup outside the run's (a neighbouring
                                  container) is OOM-killed by the kernel, then this rank is SIGKILLed by
                                  someone else: a rank's kill that is not the run's OOM,
                        stop      SIGSTOP itself: a real hang (its peers wait in the next collective),
                        corrupt_oom  cut the newest checkpoint's model.safetensors to half its size (as a
                                  full disk or a crash leaves it), then raise torch.OutOfMemoryError.
                        unloadable_oom  replace the newest checkpoint's optimizer.pt by a readable optimizer
                                  state of no parameter groups (complete on disk, yet loading it fails, as a
                                  state saved by another model's run does), then raise torch.OutOfMemoryError.
  SAFE_SFT_STEP_SLEEP   seconds each rank sleeps at the start of every optimizer step (a slow step to signal into).
  SAFE_SFT_FAULT_OOM_GIB  oom_step/oom_save: the GPU size (GiB) the OOM message reports, as PyTorch words it,
                        with the process holding all of it (what the guided ladder reads on a machine
                        without NVML).
  SAFE_SFT_FAULT_ONCE   a marker file: the fault fires only while it does not exist, and creates it.
  SAFE_SFT_FAULT_RECORD a folder: each rank writes rank-N.json (pid, memlock limits) at start, and
                        samples-rank-N-PID.jsonl: per optimizer step, a key for each sample it trained on.
(On the CPU, ZeRO-3 needs the gloo process group before the model is built: safe-sft's worker starts it.)
"""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import torch
from swift.callbacks import callbacks_map
from swift.callbacks.base import TrainerCallback


def _shared() -> ModuleType:
    """tests/stack/hf_rank_hooks/trainer_faults.py, by path: swift loads this plugin by path too."""
    path = Path(__file__).resolve().parents[1] / "hf_rank_hooks" / "trainer_faults.py"
    spec = importlib.util.spec_from_file_location("safe_sft_trainer_faults", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tf = _shared()
OOM_TEXT = tf.OOM_TEXT


def _record() -> None:
    folder = os.environ.get("SAFE_SFT_FAULT_RECORD")
    if not folder:
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    Path(folder).mkdir(parents=True, exist_ok=True)
    data = {"pid": os.getpid(), "memlock_soft": soft, "memlock_hard": hard}
    (Path(folder) / f"rank-{tf.rank()}-{os.getpid()}.json").write_text(json.dumps(data))


def _host_oom() -> None:
    """Allocate inside a 256 MiB memory cgroup (v1) until the kernel kills this process."""
    line = next(x for x in Path("/proc/self/cgroup").read_text().splitlines() if ":memory:" in x)
    here = Path("/sys/fs/cgroup/memory") / line.split(":", 2)[2].lstrip("/")
    if not here.exists():
        here = Path("/sys/fs/cgroup/memory")
    group = here / f"safe-sft-test-oom-{os.getpid()}"
    group.mkdir()
    record = os.environ.get("SAFE_SFT_FAULT_RECORD")
    if record:
        (Path(record) / "oom-cgroup").write_text(str(group))
    (group / "memory.limit_in_bytes").write_text(str(256 * 1024 * 1024))
    (group / "cgroup.procs").write_text(str(os.getpid()))
    hog = []
    while True:
        hog.append(bytearray(64 * 1024 * 1024))


def _neighbour_oom_kill() -> None:
    """A real kernel OOM kill in a memory cgroup at the v1 root, outside this run's, then a SIGKILL of this
    rank (an administrator's, a reaper's): the host-wide /proc/vmstat count moves, this run's cgroup's not."""
    group = Path("/sys/fs/cgroup/memory") / f"safe-sft-test-neighbour-{os.getpid()}"
    group.mkdir()
    record = os.environ.get("SAFE_SFT_FAULT_RECORD")
    if record:
        (Path(record) / "neighbour-cgroup").write_text(str(group))
    (group / "memory.limit_in_bytes").write_text(str(64 * 1024 * 1024))
    hog = (
        "import os, sys\nopen(sys.argv[1], 'w').write(str(os.getpid()))\n"
        "h = []\nwhile True: h.append(bytearray(8 << 20))"
    )
    neighbour = subprocess.run([sys.executable, "-c", hog, str(group / "cgroup.procs")], check=False)
    assert neighbour.returncode == -signal.SIGKILL, neighbour.returncode  # the kernel's OOM killer, in its cgroup
    os.kill(os.getpid(), signal.SIGKILL)


def _middle_layer(model):  # type: ignore[no-untyped-def]
    """A decoder layer in the middle of the model: an OOM there is deep inside forward and backward."""
    layers = [module for name, module in model.named_modules() if name.split(".")[-2:-1] == ["layers"]]
    return layers[len(layers) // 2]


def _hook_oom(trainer, model, accum: int, kind: str, step: int) -> None:  # type: ignore[no-untyped-def]
    """Raise the OOM from a module hook during the last micro-batch of optimizer step `step` + 1."""
    seen = {"step": -1, "micro": 0}

    def last_micro_batch_of_the_step() -> bool:
        if trainer.state.global_step != step or seen["micro"] != accum or not tf.claim():
            return False
        folder = os.environ.get("SAFE_SFT_FAULT_RECORD")
        if folder:  # where it fired: the test checks it was mid-step
            where = {"kind": kind, "completed_steps": step, "micro_batch": seen["micro"], "accumulation": accum}
            (Path(folder) / "oom-fired.json").write_text(json.dumps(where))
        return True

    def count(_module, _args, _kwargs) -> None:  # type: ignore[no-untyped-def]
        """On the whole model (gradient checkpointing re-runs a layer's forward, never the model's)."""
        if not torch.is_grad_enabled():
            return  # evaluation
        if seen["step"] != trainer.state.global_step:
            seen["step"], seen["micro"] = trainer.state.global_step, 0
        seen["micro"] += 1

    def forward(_module, _args) -> None:  # type: ignore[no-untyped-def]
        if torch.is_grad_enabled() and last_micro_batch_of_the_step():
            raise torch.OutOfMemoryError(OOM_TEXT)

    def backward(_module, _grad_input, _grad_output) -> None:  # type: ignore[no-untyped-def]
        if last_micro_batch_of_the_step():
            raise torch.OutOfMemoryError(OOM_TEXT)

    model.register_forward_pre_hook(count, with_kwargs=True)
    layer = _middle_layer(model)
    if kind == "oom_forward":
        layer.register_forward_pre_hook(forward)
    else:
        layer.register_full_backward_hook(backward)


class FaultCallback(TrainerCallback):
    def __init__(self, args, trainer) -> None:  # type: ignore[no-untyped-def]
        super().__init__(args, trainer)
        self.fault = tf.fault()
        _record()
        tf.record_samples(trainer)
        if self.fault and self.fault[0] == "oom_save" and self.fault[2] == tf.rank():
            tf.fail_saving_at(trainer, self.fault[1])

    def on_train_begin(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        """The model exists only now; hooks on it fire inside forward and backward."""
        if self.fault and self.fault[0] in ("oom_forward", "oom_backward") and self.fault[2] == tf.rank():
            model = kwargs["model"]
            _hook_oom(self.trainer, model, args.gradient_accumulation_steps, self.fault[0], self.fault[1])

    def on_step_begin(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        pause = float(os.environ.get("SAFE_SFT_STEP_SLEEP") or 0)
        if pause:
            time.sleep(pause)

    def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        if not self.fault:
            return
        kind, step, rank = self.fault
        if state.global_step != step or tf.rank() != rank:
            return
        if kind == "oom_step" and tf.claim():
            raise torch.OutOfMemoryError(tf.oom_text())
        if kind == "host_oom" and tf.claim():
            _host_oom()
        if kind == "neighbour_oom_kill" and tf.claim():
            _neighbour_oom_kill()
        if kind == "stop" and tf.claim():
            os.kill(os.getpid(), signal.SIGSTOP)
        if kind == "corrupt_oom" and tf.claim():
            _cut_newest_checkpoint(Path(args.output_dir))
            raise torch.OutOfMemoryError(OOM_TEXT)
        if kind == "unloadable_oom" and tf.claim():
            torch.save({"state": {}, "param_groups": []}, _newest_checkpoint(Path(args.output_dir)) / "optimizer.pt")
            raise torch.OutOfMemoryError(OOM_TEXT)


def _newest_checkpoint(output_dir: Path) -> Path:
    return max(output_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))


def _cut_newest_checkpoint(output_dir: Path) -> None:
    weights = _newest_checkpoint(output_dir) / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])


callbacks_map["safe_sft_fault"] = FaultCallback
