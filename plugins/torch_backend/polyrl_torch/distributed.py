"""Data-parallel training under ``torchrun``: each rank trains on its shard, gradients are summed.

Why not wrap the model in ``DistributedDataParallel``: polyrl's loss is already normalised by the
*global* batch (``objective_loss(num_sequences=..., num_tokens=...)`` — the same mechanism that
makes micro-batches exact), so the sum of the ranks' gradients IS the gradient of the global loss,
whatever the aggregation mode (sequence mean, token mean, Dr.GRPO constant) and however unevenly
tokens fall on the ranks. One ``all_reduce(SUM)`` of the flattened gradients after backward does
exactly that, works with LoRA (only trainable parameters travel) and needs no DDP hooks; every rank
then clips and steps identically, so replicas stay equal without broadcasting weights.

The process group comes from torchrun's environment (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``...):
gloo on CPU, nccl on CUDA. Outside torchrun every function here is a no-op.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from datetime import timedelta

import torch
import torch.distributed as dist

from polyrl import exit_status


def env_world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def launched() -> bool:
    """Whether a launcher (torchrun, or one setting the same ``env://`` variables) started this
    process as a rank: then it joins a process group, even a group of one (``--nproc-per-node 1``
    on a one-GPU machine runs the same collectives, NCCL's on CUDA, as a larger world). A world of
    one counts only with its whole rendezvous address set, so a stray ``WORLD_SIZE=1`` in a plain
    process's environment changes nothing."""
    if env_world_size() > 1:
        return True
    return all(name in os.environ for name in ("WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def local_device(device: torch.device) -> torch.device:
    """Under torchrun, ``cuda`` without an index means this process's GPU (``LOCAL_RANK``)."""
    if not launched() or device.type != "cuda" or device.index is not None:
        return device
    rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
    if rank >= torch.cuda.device_count():
        from polyrl.errors import ConfigError

        raise ConfigError(f"torchrun started local rank {rank}, but this machine has {torch.cuda.device_count()} "
                          "CUDA GPU(s): NCCL needs one GPU per rank", field="model.device",
                          fix="start at most one process per GPU (--nproc-per-node), or set "
                              'model.device = "cpu" to train the ranks on the CPU (gloo)')
    local = torch.device("cuda", rank)
    torch.cuda.set_device(local)
    return local


#: ``train.collective_timeout_s`` as the process group was created with (gloo's default before).
_timeout_s = 1800.0
#: A collective timed out: the group is unusable, and the exit barrier would only wait again.
_timed_out = False


def init_from_env(device: torch.device, timeout_s: float = 1800.0) -> None:
    """Join the process group torchrun describes (once per process); nothing outside torchrun.
    ``timeout_s`` bounds every collective (gloo's default was 30 minutes): a rank stuck outside
    anything with a timeout of its own (generation, data, an environment) stops the run then."""
    global _timeout_s
    if not launched() or not dist.is_available() or dist.is_initialized():
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    _timeout_s = float(timeout_s)
    with bounded("init_process_group"):
        dist.init_process_group(backend=backend, timeout=timedelta(seconds=_timeout_s))
    atexit.register(_leave)
    _failing_on_uncaught()


def _failing_on_uncaught() -> None:
    """An uncaught exception (a script's, e.g. a TRL script's ``trainer.train()``) marks this
    process failed before the exit handlers run (``exit_status``); ``polyrl`` commands mark their
    own non-zero exits."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: object) -> None:
        exit_status.mark_failed()
        previous(kind, value, tb)  # type: ignore[arg-type]

    sys.excepthook = hook


def is_timeout(exc: BaseException) -> bool:
    """Whether a collective's error is its timeout (gloo and the store say "timed out"/"timeout")."""
    text = str(exc).lower()
    return "timed out" in text or "timeout" in text


@contextlib.contextmanager
def bounded(collective: str) -> Iterator[None]:
    """Turn a collective's timeout into one ``CollectiveTimeout`` naming ``collective`` and the
    setting that bounds it (gloo's own text names a C++ file and milliseconds, not what to do)."""
    global _timed_out
    try:
        yield
    except RuntimeError as exc:
        if not is_timeout(exc):
            raise
        from polyrl.errors import CollectiveTimeout

        _timed_out = True
        raise CollectiveTimeout(collective, _timeout_s, int(os.environ.get("RANK", "0") or 0),
                                env_world_size()) from exc


#: How long a leaving gloo rank waits for its peers at the exit barrier.
EXIT_BARRIER_S = 60


def _leave() -> None:
    """Tear the group down before interpreter shutdown (left to it, a rank can abort at exit).

    gloo ranks first meet at a barrier, so none closes its connections while a peer is still
    finishing (seen without it: rank 0 aborting with "terminate called without an active
    exception" after its last log line, once in about ten 2-rank runs). A peer that never arrives
    (it crashed) costs ``EXIT_BARRIER_S`` and the group is torn down anyway. A peer still inside
    another collective (this rank leaves on an error mid-step) does not answer, and gloo's barrier
    then blocks past its timeout: it waits on a thread for ``EXIT_BARRIER_S`` at most, and this rank
    exits without tearing the group down, so torchrun sees it gone and stops the peers (they were
    blocked until gloo's 30-minute collective timeout).
    """
    if not dist.is_initialized() or _timed_out:  # after a timeout a peer is stuck: nothing to meet
        return
    if exit_status.failed():  # leaving on an error: peers may sit in a collective this rank never joins
        return  # they waited EXIT_BARRIER_S for it; now its closed connection stops them at once
    if dist.get_backend() == "gloo" and not _met_at_barrier(EXIT_BARRIER_S):
        return  # destroying the group would block on the same peers
    dist.destroy_process_group()


def _met_at_barrier(seconds: float) -> bool:
    """Whether every rank reached an exit barrier within ``seconds`` (a gone peer counts as met:
    gloo reports it at once, and there is nothing left to wait for)."""
    def meet() -> None:
        try:
            dist.monitored_barrier(timeout=timedelta(seconds=seconds))
        except RuntimeError:
            pass  # a peer is gone

    waiter = threading.Thread(target=meet, name="polyrl-exit-barrier", daemon=True)
    waiter.start()
    waiter.join(seconds + 5)  # the barrier's own timeout, plus its reply
    return not waiter.is_alive()


def active() -> bool:
    """In a process group (of any size: a launched single rank runs the collectives too)."""
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if active() else 0


def world_size() -> int:
    return dist.get_world_size() if active() else 1


def _reduced_scalars(values: Sequence[float], device: torch.device, op: str) -> list[float]:
    """``values`` reduced element-wise over ranks with ``dist.ReduceOp``'s ``op``, as float64;
    unchanged in one process (the op is looked up only then: a torch built without distributed
    has no ``ReduceOp``)."""
    if not active():
        return list(values)
    t = torch.tensor(list(values), dtype=torch.float64, device=device)
    with bounded("all_reduce"):
        dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
        return t.tolist()


def sum_scalars(values: Sequence[float], device: torch.device) -> list[float]:
    """Element-wise sum over ranks (counts, loss parts); unchanged in one process."""
    return _reduced_scalars(values, device, "SUM")


def max_scalars(values: Sequence[float], device: torch.device) -> list[float]:
    """Element-wise largest over ranks (an extreme over every rank's rows: negate for the smallest);
    unchanged in one process."""
    return _reduced_scalars(values, device, "MAX")


def max_int(value: int, device: torch.device) -> int:
    """The largest ``value`` over ranks (e.g. how many micro-batches every rank must run)."""
    if not active():
        return value
    t = torch.tensor([value], dtype=torch.int64, device=device)
    with bounded("all_reduce"):
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())


def all_gather_objects(value: object) -> list[object]:
    """``value`` from every rank, in rank order (pickled by torch over the process group)."""
    out: list[object] = [None] * dist.get_world_size()
    with bounded("all_gather"):
        dist.all_gather_object(out, value)
    return out


def sum_gradients(params: Sequence[torch.nn.Parameter]) -> None:
    """Replace each gradient by its sum over ranks (one flattened all-reduce)."""
    if not active():
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1) for p in params])  # type: ignore[union-attr]  # set above
    with bounded("the gradient all_reduce"):
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for p in params:
        n = p.grad.numel()  # type: ignore[union-attr]
        p.grad.copy_(flat[offset:offset + n].view_as(p.grad))  # type: ignore[union-attr, arg-type]
        offset += n
