"""One process, the model split over the GPUs (swift's device_map layout): the need of each GPU, and the
`max_memory` that evens their peaks out.

Contract: pure functions of a TrainShape (estimate.py's, with one process: gpus_per_node 1), the model's
tied embeddings and vision tower, and the GPUs' capacities. This is what plain `swift sft` does with
several visible GPUs and no NPROC_PER_NODE: one process, `device_map='auto'`, and transformers places the
modules in order (vision tower, embeddings, decoder layers, final norm, lm_head) on GPU 0, 1, ... until each
GPU's budget is spent. Where each part lands decides each GPU's memory:

    first GPU   the embeddings and the vision tower (their activations, and with tied embeddings the head)
    each GPU    its decoder layers' weights, their gradients and optimizer state (LoRA: the adapters live
                with their layer), the saved activations of its layers (one layer's recompute at its peak),
                one CUDA context
    head's GPU  the lm_head and the logits (the last GPU that holds anything; the first with tied weights)

The parts are estimate.py's own functions (weight_parts for the whole model in one process, split by
parameters; activation_parts for the GPU's own layers), with the same fitted CUDA context and margin.

How transformers 5 turns `max_memory` into a placement (integrations/accelerate.py, `device_map='auto'`):
get_balanced_memory caps every GPU but the last at `model bytes / GPUs + 1.25 x the largest module`, then
infer_auto_device_map fills the GPUs in order, keeping room for the largest module on the first GPU. `place`
mirrors that; `balance` picks the layers per GPU that make the GPUs' needs (as a share of each one's free
memory) most even, and writes the budgets that make transformers choose exactly that split.
"""

from __future__ import annotations

import ast
import functools
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from launcher.errors import SafeSftError
from launcher.model import DeviceMapLayout, Estimate, Strategy
from launcher.plan.estimate import (
    HOST_BYTES_PER_PROCESS,
    Calibration,
    TrainShape,
    activation_parts,
    lever_changes,
    weight_parts,
)
from launcher.units import parse_size

BALANCE_BUFFER = 1.25  # transformers' get_balanced_memory: the buffer above model / GPUs, in largest modules
LOAD_QUANT_FACTOR = 0.9  # transformers' bnb/quanto/torchao quantizers: adjust_max_memory takes 90 % of each budget
# the quantization methods whose transformers quantizer keeps that 10 % (adjust_max_memory), a checkpoint saved
# quantized included; GPTQ's, AWQ's, HQQ's keep the budgets as given
BUDGET_TRIMMING_METHODS = frozenset({"bnb", "quanto", "torchao", "bitnet"})
STATE_PARTS = ("gpu_weights", "gpu_gradients", "gpu_optimizer")


@dataclass(frozen=True)
class Piece:
    """A run of modules placed together: weights (what transformers counts when placing), gradients, optimizer."""

    weights: int
    gradients: int = 0
    optimizer: int = 0

    def times(self, k: int) -> Piece:
        return Piece(self.weights * k, self.gradients * k, self.optimizer * k)

    def plus(self, other: Piece) -> Piece:
        return Piece(self.weights + other.weights, self.gradients + other.gradients, self.optimizer + other.optimizer)


@dataclass(frozen=True)
class Pieces:
    """The model as transformers places it: the first modules, N equal decoder layers, the head."""

    first: Piece  # vision tower + embeddings (+ the head when tied)
    layer: Piece  # one decoder layer
    head: Piece  # final norm + lm_head (zero when tied to the embeddings)
    num_layers: int
    largest_module: int  # bytes of the largest module transformers will not split (a layer, the embeddings)
    tied: bool
    load_factor: float = 1.0  # quantizing at load (bnb, quanto, torchao) keeps 10 % of every budget for buffers

    @property
    def total_weights(self) -> int:
        return self.first.weights + self.layer.weights * self.num_layers + self.head.weights


def pieces_of(shape: TrainShape, *, tied: bool = False, vision_params: int = 0) -> Pieces | None:
    """The model's pieces, from estimate.py's whole-model parts in one process; None without its shapes."""
    if not shape.num_layers or not shape.hidden_size or not shape.vocab_size:
        return None
    one = replace(shape, gpus_per_node=1, nnodes=1)
    whole = weight_parts(Strategy.DDP, one, None)
    w = shape.weight_bytes
    embed = shape.vocab_size * shape.hidden_size
    head = 0 if tied else embed
    full = shape.trainable_params >= shape.total_params - vision_params  # full: embeddings and head train too
    per_param = {k: whole[k] / max(shape.trainable_params, 1) for k in ("gpu_gradients", "gpu_optimizer")}

    def trained(params: int) -> Piece:
        return Piece(params * w, int(params * per_param["gpu_gradients"]), int(params * per_param["gpu_optimizer"]))

    first = trained(embed) if full else Piece(embed * w)
    first = first.plus(Piece(vision_params * w))
    last = trained(head) if full else Piece(head * w)
    n = shape.num_layers
    rest = Piece(
        max(whole["gpu_weights"] - first.weights - last.weights, 0),
        max(whole["gpu_gradients"] - first.gradients - last.gradients, 0),
        max(whole["gpu_optimizer"] - first.optimizer - last.optimizer, 0),
    )
    layer = Piece(rest.weights // n, rest.gradients // n, rest.optimizer // n)
    largest = max(layer.weights, embed * w)
    trims = bool(shape.quant_bits) and shape.quant_method in BUDGET_TRIMMING_METHODS
    return Pieces(first, layer, last, n, largest, tied, LOAD_QUANT_FACTOR if trims else 1.0)


def gpu_parts(
    shape: TrainShape, pieces: Pieces, layout: DeviceMapLayout, gpu: int, calibration: Calibration | None = None
) -> dict[str, int]:
    """The named parts of one GPU's need under `layout` (estimate.py's names; they add up)."""
    calibration = calibration or Calibration()
    k = layout.layers[gpu]
    held = pieces.layer.times(k)
    if gpu == layout.first_gpu:
        held = held.plus(pieces.first)
    if gpu == layout.head_gpu:
        held = held.plus(pieces.head)
    own = activation_parts(replace(shape, num_layers=k)) if k else {}
    whole = activation_parts(shape)
    parts = {
        "gpu_weights": held.weights,
        "gpu_gradients": held.gradients,
        "gpu_optimizer": held.optimizer,
        "gpu_activations": own.get("gpu_activations", 0),
        "gpu_attention_scores": own.get("gpu_attention_scores", 0),
        "gpu_logits": whole["gpu_logits"] if gpu == layout.head_gpu else 0,
        "gpu_vision": whole["gpu_vision"] if gpu == layout.first_gpu else 0,
        "gpu_cuda_context": calibration.cuda_context_bytes if (k or gpu in (layout.first_gpu, layout.head_gpu)) else 0,
    }
    parts["gpu_fragmentation_margin"] = int(sum(parts.values()) * calibration.fragmentation)
    return parts


def balanced_cap(pieces: Pieces, gpus: int) -> int:
    """transformers' cap on every GPU but the last under device_map='auto' (get_balanced_memory)."""
    return pieces.total_weights // gpus + int(BALANCE_BUFFER * pieces.largest_module)


def first_gpu_of(pieces: Pieces, caps: Sequence[int]) -> int:
    """The GPU the first modules (embeddings, vision tower) land on: the first whose cap holds them. A quantized
    decoder is small beside its 16-bit embeddings, and transformers' cap on GPU 0 (model / GPUs plus a buffer,
    less the room it keeps there for the largest module) can be below them; it then leaves GPU 0 empty."""
    return next((i for i, cap in enumerate(caps) if pieces.first.weights <= cap), len(caps))


def place(pieces: Pieces, budgets: Sequence[int]) -> DeviceMapLayout | None:
    """The layers per GPU transformers chooses for these `max_memory` budgets (bytes of weights per GPU);
    None when the weights do not fit on the GPUs (transformers would offload to disk)."""
    n = len(budgets)
    cap = balanced_cap(pieces, n)
    caps = [int((min(b, cap) if i < n - 1 else b) * pieces.load_factor) for i, b in enumerate(budgets)]
    caps[0] -= pieces.largest_module  # infer_auto_device_map keeps room for the largest module on GPU 0
    used = [0] * n
    layers = [0] * n
    gpu = 0

    def put(size: int) -> int | None:
        nonlocal gpu
        while gpu < n and used[gpu] + size > caps[gpu]:
            gpu += 1
        if gpu == n:
            return None
        used[gpu] += size
        return gpu

    first = put(pieces.first.weights)
    if first is None:
        return None
    left, size = pieces.num_layers, pieces.layer.weights
    while left:  # layer after layer as transformers places them, a GPU's share at a time
        at = put(size)
        if at is None:
            return None
        more = left - 1 if size == 0 else min(left - 1, (caps[at] - used[at]) // size)
        used[at] += more * size
        layers[at] += 1 + more
        left -= 1 + more
    head = first if pieces.tied else put(pieces.head.weights)
    if head is None:
        return None
    return DeviceMapLayout(layers=tuple(layers), first_gpu=first, head_gpu=head, max_memory=tuple(budgets))


def layout_needs(
    shape: TrainShape, pieces: Pieces, layout: DeviceMapLayout, calibration: Calibration | None = None
) -> tuple[int, ...]:
    return tuple(sum(gpu_parts(shape, pieces, layout, i, calibration).values()) for i in range(len(layout.layers)))


def budgets_for(pieces: Pieces, layers: Sequence[int], capacities: Sequence[int], first: int = 0) -> tuple[int, ...]:
    """The max_memory that makes transformers place exactly `layers` per GPU: each GPU's weights plus half a
    layer (the next layer does not fit), GPU 0 also the room transformers keeps there; the last GPU its whole
    capacity (it takes whatever is left, so nothing can spill past it). `first`: the GPU the first modules
    land on (first_gpu_of)."""
    n = len(layers)
    out = []
    for i, k in enumerate(layers[:-1]):
        weights = k * pieces.layer.weights + (pieces.first.weights if i == first else 0)
        room = weights + pieces.layer.weights // 2 + (pieces.largest_module if i == 0 else 0)
        out.append(math.ceil(room / pieces.load_factor))
    out.append(max(capacities[n - 1], pieces.head.weights + layers[-1] * pieces.layer.weights))
    return tuple(out)


def balance(
    shape: TrainShape, pieces: Pieces, capacities: Sequence[int], calibration: Calibration | None = None
) -> DeviceMapLayout | None:
    """The split whose largest need, as a share of each GPU's capacity, is smallest, within transformers'
    caps; with its max_memory. None for fewer than two GPUs or when the weights cannot be placed."""
    n = len(capacities)
    if n < 2:
        return None
    cap = balanced_cap(pieces, n)
    cap = int(cap * pieces.load_factor)
    caps = [cap - pieces.largest_module] + [cap] * (n - 2)
    first = first_gpu_of(pieces, caps)  # n - 1 where no capped GPU holds them: the last GPU's budget is its own

    @functools.cache  # the bisection asks for the same (GPU, layers) thousands of times: a plan stays fast
    def need(gpu: int, k: int) -> int:
        layers = tuple(k if i == gpu else 0 for i in range(n))
        head = first if pieces.tied else n - 1
        trial = DeviceMapLayout(layers=layers, first_gpu=first, head_gpu=head, max_memory=())
        return sum(gpu_parts(shape, pieces, trial, gpu, calibration).values())

    def fill(ratio: float) -> list[int] | None:
        left, layers = pieces.num_layers, []
        for i in range(n - 1):
            if i < first:  # transformers places in order: nothing goes before the first modules
                layers.append(0)
                continue
            fixed = pieces.first.weights if i == first else 0

            def room(k: int, i: int = i, fixed: int = fixed) -> bool:
                return fixed + k * pieces.layer.weights <= caps[i] and need(i, k) <= ratio * capacities[i]

            # the most layers this GPU takes: both tests grow with k, so a bisection finds it in log(layers)
            low_k, high_k = 0, left
            while low_k < high_k:
                mid_k = (low_k + high_k + 1) // 2
                low_k, high_k = (mid_k, high_k) if room(mid_k) else (low_k, mid_k - 1)
            layers.append(low_k)
            left -= low_k
        layers.append(left)
        return layers if need(n - 1, left) <= ratio * capacities[n - 1] else None

    low, high = 0.0, 1.0
    while fill(high) is None and high < 1e6:
        low, high = high, high * 2
    best = fill(high)
    if best is None:
        return None
    for _ in range(40):
        mid = (low + high) / 2
        found = fill(mid)
        if found is None:
            low = mid
        else:
            high, best = mid, found
    spread = _spread(best, need, caps, pieces, capacities, first)
    return place(pieces, budgets_for(pieces, spread, capacities, first))


def _spread(
    layers: list[int],
    need: Callable[[int, int], int],
    caps: Sequence[int],
    pieces: Pieces,
    capacities: Sequence[int],
    first: int,
) -> list[int]:
    """The bisection fills GPUs front first at the best largest share; below that share, move single layers
    from the fuller GPU to an emptier one while that lowers the larger of the two (within transformers' caps),
    so the GPUs that do not set the largest share are even too."""
    n = len(layers)
    layers = list(layers)
    for _ in range(n * max(sum(layers), 1)):
        share = [need(i, layers[i]) / capacities[i] for i in range(n)]
        order = sorted(range(n), key=lambda i: -share[i])
        move = next(
            (
                (hot, cool)
                for hot in order
                if layers[hot]
                for cool in reversed(order)
                if cool != hot
                and cool >= first
                and (
                    cool == n - 1
                    or (pieces.first.weights if cool == first else 0) + (layers[cool] + 1) * pieces.layer.weights
                    <= caps[cool]
                )
                and max(need(hot, layers[hot] - 1) / capacities[hot], need(cool, layers[cool] + 1) / capacities[cool])
                < share[hot]
            ),
            None,
        )
        if move is None:
            break
        layers[move[0]] -= 1
        layers[move[1]] += 1
    return layers


def estimate_device_map(
    shape: TrainShape,
    pieces: Pieces,
    gpu_free: Sequence[int | None],
    cpu_free_bytes: int | None,
    *,
    budgets: Sequence[int] | None = None,
    calibration: Calibration | None = None,
) -> tuple[Estimate, DeviceMapLayout] | None:
    """The device_map estimate: the GPU whose need is the largest share of its free memory, with its parts,
    and the layout (balanced, or the one `budgets` gives). None when the weights cannot be placed.

    Host RAM: one process; transformers loads each shard straight onto its GPU, so no model copy is held."""
    known = [f for f in gpu_free if f is not None]
    capacities = [f if f is not None else (max(known) if known else 1) for f in gpu_free]
    layout = place(pieces, budgets) if budgets is not None else balance(shape, pieces, capacities, calibration)
    if layout is None:
        return None
    needs = layout_needs(shape, pieces, layout, calibration)
    worst = max(range(len(needs)), key=lambda i: needs[i] / max(capacities[i], 1))
    parts = gpu_parts(shape, pieces, layout, worst, calibration)
    parts["cpu_model_states"] = 0
    parts["cpu_processes"] = HOST_BYTES_PER_PROCESS
    est = Estimate(
        strategy=Strategy.DEVICE_MAP,
        gpu_need_bytes=needs[worst],
        cpu_need_bytes=HOST_BYTES_PER_PROCESS,
        gpu_free_bytes=gpu_free[worst],
        cpu_free_bytes=cpu_free_bytes,
        parts=parts,
    )
    return est, replace(layout, need_bytes=needs, free_bytes=tuple(gpu_free))


def max_memory_arg(budgets: Sequence[int]) -> str:
    """`--max_memory` as swift parses it (ast.literal_eval: integer GPU keys, byte values)."""
    return "{" + ", ".join(f"{i}: {b}" for i, b in enumerate(budgets)) + "}"


def parse_max_memory(text: str | None, gpus: int) -> tuple[int, ...] | None:
    """swift's --max_memory (`{0: '20GiB', 1: 21474836480}`) as bytes per GPU 0..gpus-1; None when it is not
    given, names a GPU out of range, or is not a dict swift would read (the balanced split is used then)."""
    if not text:
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        try:
            value = json.loads(text)
        except ValueError:
            return None
    if not isinstance(value, dict):
        return None
    out = []
    for i in range(gpus):
        raw = value.get(i, value.get(str(i)))
        if raw is None:
            return None
        try:
            out.append(int(raw) if isinstance(raw, int) else parse_size(str(raw), "--max_memory"))
        except SafeSftError:
            return None
    return tuple(out)


REBALANCE_MIN_SPREAD = 0.10  # peaks closer than this share of the GPUs' memory are even: no rebalance


def rebalance(
    shape: TrainShape,
    pieces: Pieces,
    budgets: Sequence[int],
    peaks: Sequence[int],
    capacities: Sequence[int],
    calibration: Calibration | None = None,
) -> DeviceMapLayout | None:
    """After a CUDA OOM of a device_map run: move layers off the GPU whose measured peak was the largest share
    of its memory onto the GPUs with the most room, as many as its excess over the mean peak is worth by the
    estimate of one layer there; within transformers' caps. None when the peaks were even, nothing can move,
    or the measured peaks are missing."""
    n = len(budgets)
    current = place(pieces, budgets)
    if current is None or len(peaks) != n or len(capacities) != n or not all(capacities) or not any(peaks):
        return None
    share = [p / c for p, c in zip(peaks, capacities, strict=True)]
    hot = max(range(n), key=lambda i: share[i])
    if share[hot] - min(share) < REBALANCE_MIN_SPREAD or current.layers[hot] == 0:
        return None
    with_layer = layout_needs(shape, pieces, current, calibration)[hot]
    fewer = list(current.layers)
    fewer[hot] -= 1
    without = layout_needs(shape, pieces, replace(current, layers=tuple(fewer)), calibration)[hot]
    per_layer = max(with_layer - without, 1)
    excess = peaks[hot] - sum(peaks) / n
    moves = max(1, round(excess / per_layer))
    layers = list(current.layers)
    receivers = sorted((i for i in range(n) if i != hot), key=lambda i: share[i])
    for _ in range(moves):
        if layers[hot] == 0:
            break
        for cool in receivers:
            trial = list(layers)
            trial[hot] -= 1
            trial[cool] += 1
            placed = place(pieces, budgets_for(pieces, trial, capacities, current.first_gpu))
            if placed is not None and list(placed.layers) == trial:
                layers = trial
                break
        else:
            break
    if tuple(layers) == current.layers:
        return None
    return place(pieces, budgets_for(pieces, layers, capacities, current.first_gpu))


def levers(
    shape: TrainShape,
    gpu_free: Sequence[int | None],
    *,
    tied: bool = False,
    vision_params: int = 0,
    calibration: Calibration | None = None,
) -> tuple[tuple[str, int], ...]:
    """What each one-setting change (estimate.py's levers) saves on the fullest GPU, each split rebalanced."""

    def need(s: TrainShape) -> int | None:
        pieces = pieces_of(s, tied=tied, vision_params=vision_params)
        found = estimate_device_map(s, pieces, gpu_free, None, calibration=calibration) if pieces else None
        return found[0].gpu_need_bytes if found is not None else None

    base = need(shape)
    if base is None:
        return ()
    saved = [(text, base - (need(changed) or base)) for text, changed in lever_changes(shape)]
    return tuple(sorted(((t, s) for t, s in saved if s > 0), key=lambda item: -item[1]))
