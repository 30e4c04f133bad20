"""An OOM during evaluation is its own kind (its rung halves per_device_eval_batch_size), told apart by
the evaluation frames in the traceback; a save or a training step keeps its own kind."""

from __future__ import annotations

import pytest

from launcher.model import FailureKind
from launcher.run.classify import classify_text

HEAD = """Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/swift/pipelines/train/sft.py", line 263, in train
    trainer.train(resume_checkpoint)
  File "/venv/lib/python3.11/site-packages/transformers/trainer.py", line 2245, in train
    return inner_training_loop(
  File "/venv/lib/python3.11/site-packages/transformers/trainer.py", line 2627, in _inner_training_loop
    self._maybe_log_save_evaluate(
"""
EVAL = """  File "/venv/lib/python3.11/site-packages/transformers/trainer.py", line 3096, in _maybe_log_save_evaluate
    metrics = self._evaluate(trial, ignore_keys_for_eval)
  File "/venv/lib/python3.11/site-packages/transformers/trainer.py", line 3045, in _evaluate
    metrics = self.evaluate(ignore_keys=ignore_keys_for_eval)
  File "/venv/lib/python3.11/site-packages/transformers/trainer.py", line 4154, in evaluate
    output = eval_loop(
  File "/venv/lib/python3.11/site-packages/transformers/trainer.py", line 4348, in evaluation_loop
    losses, logits, labels = self.prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)
  File "/venv/lib/python3.11/site-packages/swift/trainers/seq2seq_trainer.py", line 121, in prediction_step
    return super().prediction_step(model, inputs, prediction_loss_only=prediction_loss_only, ignore_keys=ignore_keys)
"""
SAVE = """  File "/venv/lib/python3.11/site-packages/transformers/trainer.py", line 3105, in _maybe_log_save_evaluate
    self._save_checkpoint(model, trial)
  File "/venv/lib/python3.11/site-packages/swift/trainers/mixin.py", line 1012, in _save_checkpoint
    result = super()._save_checkpoint(*args, **kwargs)
"""
STEP = """  File "/venv/lib/python3.11/site-packages/transformers/trainer.py", line 2555, in _inner_training_loop
    tr_loss_step = self.training_step(model, inputs, num_items_in_batch)
"""
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.32 GiB"


@pytest.mark.parametrize(
    ("frames", "kind"),
    [
        pytest.param(HEAD + EVAL, FailureKind.CUDA_OOM_EVAL, id="evaluation"),
        pytest.param(HEAD + SAVE, FailureKind.CUDA_OOM_SAVE, id="save-through-maybe-log-save-evaluate"),
        pytest.param(HEAD.rsplit("  File", 1)[0] + STEP, FailureKind.CUDA_OOM, id="training-step"),
    ],
)
def test_the_phase_of_an_oom(frames: str, kind: FailureKind) -> None:
    found = classify_text([*frames.splitlines(), OOM], steps_seen=True)
    assert found is not None and found[0] is kind
    if kind is FailureKind.CUDA_OOM_EVAL:  # the OOM line, then the evaluation frame that proves the phase
        assert found[1][0] == OOM and found[1][1].endswith(("in _evaluate", "in prediction_step", "in evaluation_loop"))


MODEL_FORWARD = """  File "/venv/site-packages/transformers/models/qwen2/modeling_qwen2.py", line 4, in forward
    logits = self.lm_head(hidden_states[:, slice_indices, :])
"""
FORWARD = (
    """  File "/venv/lib/python3.11/site-packages/transformers/trainer.py", line 4512, in prediction_step
    loss, outputs = self.compute_loss(model, inputs, return_outputs=True)
  File "/venv/lib/python3.11/site-packages/transformers/trainer.py", line 3801, in compute_loss
    outputs = model(**inputs)
"""
    + MODEL_FORWARD
)
SCRIPT_EVAL = """Traceback (most recent call last):
  File "train.py", line 108, in main
    test(epoch, model, testloader, evaluator)
  File "train.py", line 193, in test
    stats = evaluator.evaluate_predictions(results, topk=args.topk)
  File "/home/u/models/common.py", line 363, in score_fast_model
    scores[~mask] += bias
"""
LIGHTNING_EVAL = """Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/lightning/pytorch/loops/evaluation_loop.py", line 411, in _evaluation_step
    output = call._call_strategy_hook(trainer, hook_name, *step_args)
  File "/home/u/model.py", line 88, in validation_step
    out = self(batch)
  File "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1751, in forward
    return self._call_impl(*args, **kwargs)
"""


@pytest.mark.parametrize(
    ("frames", "kind"),
    [
        # a real evaluation OOM goes on into the model: its innermost frames are a loss and a forward
        pytest.param(HEAD + EVAL + FORWARD, FailureKind.CUDA_OOM_EVAL, id="evaluation-into-the-forward"),
        pytest.param(SCRIPT_EVAL, FailureKind.CUDA_OOM_EVAL, id="a-scripts-own-test-function"),
        pytest.param(LIGHTNING_EVAL, FailureKind.CUDA_OOM_EVAL, id="lightning-validation-step"),
        pytest.param(
            HEAD.rsplit("  File", 1)[0] + STEP + MODEL_FORWARD, FailureKind.CUDA_OOM, id="a-training-steps-forward"
        ),
    ],
)
def test_a_forward_inside_evaluation_is_the_evaluations(frames: str, kind: FailureKind) -> None:
    found = classify_text([*frames.splitlines(), OOM], steps_seen=True)
    assert found is not None and found[0] is kind


CUT_TRACEBACK = ["Traceback (most recent call last):", "....", "RuntimeError: CUDA error: out of memory"]


@pytest.mark.parametrize(
    ("bar", "kind"),
    [
        ("Validation DataLoader 0:   3%|▍            | 1/32 [00:01<00:46,  1.50s/it]", FailureKind.CUDA_OOM_EVAL),
        ("Evaluating:  40%|████      | 4/10 [00:03<00:05,  1.1it/s]", FailureKind.CUDA_OOM_EVAL),
        ("2/10 * Epoch (valid):  12% 4/32 [00:02<00:16,  1.7it/s, loss=0.9]", FailureKind.CUDA_OOM_EVAL),
        # a training bar whose postfix names the last validation's loss: only the bar's own name counts
        ("Epoch 3:  45%|████▌     | 45/100 [00:30<00:37, v_num=0, val_loss=0.412]", FailureKind.CUDA_OOM),
        ("Epoch (train):  45% 45/100 [00:30<00:37, loss=0.412]", FailureKind.CUDA_OOM),
    ],
)
def test_a_traceback_cut_to_nothing_takes_its_phase_from_the_progress_bar_it_ended(bar: str, kind: FailureKind) -> None:
    """A pasted traceback whose frames the user elided: the progress bar it cut short names the phase."""
    found = classify_text([bar, *CUT_TRACEBACK], steps_seen=True)
    assert found is not None and found[0] is kind
