"""The conformance kit catches broken backends: the toy backend passes its checks, and the same
backend with one known fault (a wrong gradient, a wrong weight import, a checkpoint without
optimizer state, a step that applies NaN) fails the check meant for it.

The checks run programmatically (plain method calls), as a backend author's CI could.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from polyrl.algorithms.objective import Objective
from polyrl.hookspecs import hookimpl
from polyrl.testing.conformance import BackendConformance

from toy_dist import activate, install_toy_dists

pytestmark = pytest.mark.faults

MODEL = "unused"  # the toy backend ignores its model path


@pytest.fixture(scope="module")
def toy_module(tmp_path_factory):
    deactivate = activate(install_toy_dists(tmp_path_factory.mktemp("toy")))
    import polyrl_toy

    yield polyrl_toy
    deactivate()


def kit_for(plugin) -> BackendConformance:
    """A kit instance for ``plugin`` (a ToyPlugin subclass), as a pytest class would make one."""
    kit_class = type(f"Kit_{type(plugin).__name__}", (BackendConformance,),
                     {"backend": plugin.name, "plugins": (plugin,)})
    return kit_class()


def _gradient_checks(kit):
    for objective in (Objective(), Objective(beta=0.1, kl_estimator="k3", dual_clip=3.0,
                                             loss_aggregation="token_mean")):
        kit.test_gradient_equals_reference_gradient(MODEL, objective)


def test_the_correct_toy_backend_passes_the_checks(toy_module, tmp_path):
    kit = kit_for(toy_module.ToyPlugin("toy-good"))
    _gradient_checks(kit)
    kit.test_every_weight_survives_export_and_import(MODEL)
    kit.test_checkpoint_resumes_exactly(MODEL, tmp_path)
    kit.test_non_finite_step_is_skipped_and_leaves_the_weights(MODEL)
    kit.test_positive_advantage_raises_logprob(MODEL)
    kit.test_reported_loss_equals_reference(MODEL, Objective(beta=0.1, kl_estimator="k1"))


def test_kit_catches_a_wrong_gradient(toy_module):
    class HalfGradientOnNegativeAdvantages(toy_module.ToyPlugin):
        """Reports the right loss, but its gradient halves the push-down of bad completions."""

        @hookimpl
        def train_step(self, engine, batch, objective):
            from polyrl.algorithms.reference import policy_loss

            true_loss, _ = policy_loss([engine.logp(1.0)[s.completion_ids] for s in batch.sequences],
                                       batch.advantages, objective, batch.old_logprobs, batch.ref_logprobs)
            adv = np.where(batch.advantages < 0, batch.advantages * 0.5, batch.advantages)
            metrics = toy_module.train_step(engine, type(batch)(batch.sequences, adv, batch.old_logprobs,
                                                                batch.ref_logprobs), objective)
            metrics.loss = true_loss  # the reported loss stays plausible; only the gradient is off
            return metrics

    kit = kit_for(HalfGradientOnNegativeAdvantages("toy-halfgrad"))
    with pytest.raises(AssertionError, match="gradient"):
        _gradient_checks(kit)


def test_kit_catches_a_gradient_whose_norm_is_misreported(toy_module):
    class DoubleNorm(toy_module.ToyPlugin):
        @hookimpl
        def train_step(self, engine, batch, objective):
            metrics = toy_module.train_step(engine, batch, objective)
            metrics.grad_norm *= 2
            return metrics

    with pytest.raises(AssertionError):
        _gradient_checks(kit_for(DoubleNorm("toy-doublenorm")))


def test_kit_catches_a_wrong_weight_import(toy_module):
    class ImportsReversed(toy_module.ToyPlugin):
        @hookimpl
        def import_weights(self, engine, weights):
            engine.logits = np.asarray(weights["logits"], dtype=np.float64)[::-1].copy()
            return True

    with pytest.raises(AssertionError, match="logits"):
        kit_for(ImportsReversed("toy-reversed")).test_every_weight_survives_export_and_import(MODEL)


def test_kit_catches_a_checkpoint_without_optimizer_state(toy_module, tmp_path):
    class ForgetsAdamState(toy_module.ToyPlugin):
        @hookimpl
        def load_checkpoint(self, engine, path, state_path, weights_only):
            return toy_module.load_checkpoint(engine, path, state_path, weights_only=True)

    with pytest.raises(AssertionError, match="optimizer state not restored"):
        kit_for(ForgetsAdamState("toy-forgetful")).test_checkpoint_resumes_exactly(MODEL, tmp_path)


def test_kit_catches_a_checkpoint_of_stale_weights(toy_module, tmp_path):
    class SavesZeros(toy_module.ToyPlugin):
        @hookimpl
        def save_checkpoint(self, engine, path, state_path):
            kept, engine.logits = engine.logits, np.zeros_like(engine.logits)
            try:
                return toy_module.save_checkpoint(engine, path, state_path)
            finally:
                engine.logits = kept

    with pytest.raises(AssertionError, match="weights not restored"):
        kit_for(SavesZeros("toy-stale")).test_checkpoint_resumes_exactly(MODEL, tmp_path)


def test_kit_catches_a_step_that_applies_a_nan_update(toy_module):
    class AppliesNaN(toy_module.ToyPlugin):
        @hookimpl
        def train_step(self, engine, batch, objective):
            metrics = toy_module.train_step(engine, batch, objective)
            if metrics.skipped:
                engine.logits = engine.logits + np.nan
                metrics.skipped = False
            return metrics

    with pytest.raises(AssertionError):
        kit_for(AppliesNaN("toy-nan")).test_non_finite_step_is_skipped_and_leaves_the_weights(MODEL)


def test_kit_fixtures_raise_no_pytest_deprecation_warning(tmp_path):
    """A backend author's test class, collected by pytest with its deprecations as errors."""
    (tmp_path / "test_kit.py").write_text(
        "from polyrl.testing.conformance import BackendConformance\n"
        "class TestNothingInstalled(BackendConformance):\n"
        "    backend = 'nope'\n"
        "    def test_fixture_resolves(self, model_dir):\n"
        "        assert model_dir\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-k", "fixture_resolves", "-p", "no:cacheprovider",
         "-W", "error::pytest.PytestRemovedIn10Warning", "test_kit.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "1 passed" in result.stdout
