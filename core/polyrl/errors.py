"""Errors a user can act on: each names the field at fault and how to fix it."""

from __future__ import annotations


class PolyrlError(Exception):
    """Base class: anything polyrl raises on purpose."""


class ConfigError(PolyrlError, ValueError):
    """A configuration value is missing or invalid; ``field`` names it (dotted path)."""

    def __init__(self, message: str, field: str | None = None, fix: str | None = None):
        self.message = message
        self.field = field
        self.fix = fix
        super().__init__(self._text())

    def _text(self) -> str:
        text = self.message
        if self.field and self.field not in self.message:
            text = f"{self.field}: {text}"
        if self.fix:
            text = f"{text}. Fix: {self.fix}"
        return text

    def under(self, section: str) -> ConfigError:
        """The same error with ``field`` placed under ``section`` (``temperature`` ->
        ``generation.temperature``), unless it already names a top-level section."""
        root = section.split(".")[0].split("[")[0]
        if self.field and not self.field.startswith(root):
            self.field = f"{section}.{self.field}"
            self.args = (self._text(),)
        return self


class BackendUnavailable(PolyrlError):
    """A backend exists but cannot run here (missing package, no device) or does not exist."""


class RewardError(PolyrlError):
    """A reward function raised or returned something unusable."""


class PluginError(PolyrlError):
    """A plugin misbehaved (raised in a hook, returned the wrong type)."""
