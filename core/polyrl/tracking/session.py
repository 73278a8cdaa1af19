"""``RunTracking``: what the trainer calls to show a run in trackers and the completions log.

Why one object: the trainer makes one call per event (checked at build, opened at run start,
samples collected in the step, published after metrics.jsonl, closed at the end), and a tracker
failing mid-run is contained here: reported once, dropped, and training goes on, since losing a
dashboard must never cost a run.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from polyrl.errors import ConfigError
from polyrl.logs import get_logger
from polyrl.redact import MASK, Redactor
from polyrl.tracking import completions as clog
from polyrl.tracking.spec import Tracker, TrackerContext, TrackerSpec

log = get_logger("polyrl.tracking")


def numeric_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of a step's metrics (booleans as 0/1); trackers take nothing else."""
    out = {}
    for key, value in metrics.items():
        if isinstance(value, (bool, int, float)) and key != "step":
            number = float(value)
            if math.isfinite(number):
                out[key] = number
    return out


def resolve_specs(registry: Any, names: Sequence[str]) -> list[TrackerSpec]:
    """The specs of ``[logging] report_to``; an unknown or uninstalled one is a ConfigError."""
    specs = []
    for name in names:
        spec = registry.trackers_by_name().get(name)
        if spec is None:
            known = ", ".join(sorted(registry.trackers_by_name())) or "none installed"
            raise ConfigError(f"unknown tracker {name!r} (known: {known})", field="logging.report_to",
                              fix="name a tracker `polyrl trackers` lists, or install its plugin")
        try:
            reason = spec.probe()
        except Exception as exc:  # noqa: BLE001 - a probe that raises means "unusable"
            reason = f"its probe raised {type(exc).__name__}: {exc}"
        if reason is not None:
            raise ConfigError(f"tracker {name!r} cannot run here: {reason}", field="logging.report_to",
                              fix=spec.install_hint or f"remove {name!r} from report_to")
        specs.append(spec)
    return specs


@attrs.define
class RunTracking:
    """Trackers and the completions log of one run (only rank 0 writes)."""

    specs: list[TrackerSpec]
    output_dir: Path
    completions_per_step: int
    run_name: str
    project: str
    config: Mapping[str, Any]
    writer: bool = True  # rank 0
    redact: Redactor = attrs.field(factory=Redactor)
    trackers: dict[str, Tracker] = attrs.field(factory=dict)
    _pending: list[dict[str, Any]] = attrs.field(factory=list)

    @property
    def completions_path(self) -> Path:
        return self.output_dir / clog.FILE_NAME

    def rewind(self, step: int) -> None:
        """Drop completions of steps at or after ``step`` (a resume or a fresh start)."""
        if self.writer:
            clog.rewind(self.completions_path, step)

    def open(self) -> None:
        """Open every tracker; one that fails to open is an error (the user asked for it)."""
        if not self.writer or self.trackers:
            return
        context = TrackerContext(output_dir=self.output_dir, run_name=self.run_name, project=self.project,
                                 config=self.config)
        for spec in self.specs:
            try:
                self.trackers[spec.name] = spec.create(context)
            except Exception as exc:
                self.close()
                raise ConfigError(f"tracker {spec.name!r} failed to start: {type(exc).__name__}: {exc}",
                                  field="logging.report_to",
                                  fix=f"fix the cause above or remove {spec.name!r} from report_to") from None

    def collect(self, step: int, prompts: Sequence[Any], completions: Sequence[Any], scored: Any,
                advantages: Sequence[float] | Any, seed: int) -> None:
        """Remember this step's sample; ``publish`` writes it once the step is taken."""
        if self.writer and self.completions_per_step > 0:
            self._pending = clog.sample_records(
                step, prompts, completions, scored.per_reward, scored.total, advantages,
                self.completions_per_step, seed, self.redact)

    def publish(self, metrics: Mapping[str, Any]) -> None:
        """The step's completions to completions.jsonl, then metrics and completions to trackers,
        at the step number metrics.jsonl and completions.jsonl use (``metrics["step"]``)."""
        if not self.writer:
            return
        step = int(metrics["step"])
        records, self._pending = self._pending, []
        if records:
            clog.append(self.completions_path, records)
        numbers = numeric_metrics(metrics)
        for name in list(self.trackers):
            self._call(name, "log_metrics", numbers, step)
            if records and name in self.trackers:
                self._call(name, "log_completions", records, step)

    def publish_eval(self, metrics: Mapping[str, Any], step: int) -> None:
        """An evaluation outside a step's line (before training, after the last step) to the
        trackers; metrics.jsonl keeps it in the run summary instead."""
        if not self.writer:
            return
        numbers = numeric_metrics(metrics)
        for name in list(self.trackers):
            self._call(name, "log_metrics", numbers, step)

    def _call(self, name: str, method: str, payload: Any, step: int) -> None:
        try:
            getattr(self.trackers[name], method)(payload, step)
        except Exception as exc:  # noqa: BLE001 - a tracker must never stop training
            tracker = self.trackers.pop(name)
            log.warning(f"tracker {name!r} failed and was dropped; training continues",
                        step=step, error=f"{type(exc).__name__}: {exc}")
            self._close_one(name, tracker)

    def _close_one(self, name: str, tracker: Tracker) -> None:
        try:
            tracker.close()
        except Exception as exc:  # noqa: BLE001
            log.warning(f"tracker {name!r} failed to close", error=f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        while self.trackers:
            name, tracker = self.trackers.popitem()
            self._close_one(name, tracker)


def for_run(config: Any, registry: Any, rank: int) -> RunTracking:
    """The run's tracking, checked now (unknown or missing trackers fail before models load)."""
    section = config.logging
    output_dir = Path(config.train.output_dir)
    return RunTracking(
        specs=resolve_specs(registry, section.report_to), output_dir=output_dir,
        completions_per_step=section.completions_per_step,
        run_name=section.run_name or output_dir.resolve().name, project=section.project,
        config=hyperparameters(config), writer=rank == 0)


def hyperparameters(config: Any) -> dict[str, Any]:
    """The run config as plain data for a tracker's hyper-parameter view, credentials masked."""
    from polyrl import strict_json

    def value(v: Any) -> Any:
        return v if isinstance(v, (str, int, float, bool, type(None), list, dict)) else str(v)

    raw = attrs.asdict(config, value_serializer=lambda _i, _a, v: value(v) if not attrs.has(type(v)) else v)
    raw.get("data", {}).pop("rows", None)  # inline rows are data, not hyper-parameters
    return strict_json.sanitize(_without_secrets(raw))


_SECRET_KEY = re.compile(r"(?i)(api[_-]?key|token|secret|password|passwd|authorization)")


def _without_secrets(value: Any) -> Any:
    """Config values under credential-like keys masked (a judge's api_key must not reach a dashboard)."""
    if isinstance(value, dict):
        return {k: MASK if _SECRET_KEY.search(str(k)) else _without_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_secrets(v) for v in value]
    return Redactor()(value) if isinstance(value, str) else value
