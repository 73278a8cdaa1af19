"""Running untrusted Python (a model's completion) against tests: OS isolation around the sample,
the verdict computed outside it. ``polyrl.rewards.code`` is the reward built on it."""

from polyrl.sandbox.runner import MARKER_ENV, Sandbox, SandboxLimits, SandboxResult, isolation_report

__all__ = ["MARKER_ENV", "Sandbox", "SandboxLimits", "SandboxResult", "isolation_report"]
