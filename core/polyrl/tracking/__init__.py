"""Watching a run: experiment trackers (TensorBoard, W&B, MLflow, trackio, plugins) and the
completions log. The trainer talks to ``RunTracking`` only; trackers are plugins (group
``polyrl.trackers``, hook ``polyrl_register_trackers``)."""

from polyrl.tracking.spec import Tracker, TrackerContext, TrackerSpec, TrackerStatus, TrlRun

__all__ = ["Tracker", "TrackerContext", "TrackerSpec", "TrackerStatus", "TrlRun"]
