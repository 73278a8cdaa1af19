"""``reward_model``: a tiny random sequence-classification Llama built locally, scored in batches."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from polyrl.errors import RewardError
from polyrl.plugins import get_plugin_manager
from polyrl.rewards.combine import RewardComputer
from polyrl.types import Completion, RewardContext

pytest.importorskip("torch")
pytest.importorskip("transformers")

PROMPTS = ["What is 2 + 3?", [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"}],
           "Name a colour.", "Count to three.", "x" * 40]
COMPLETIONS = ["5", "Paris is the capital of France, a country in Europe.", "red", "one two three", "y"]


@pytest.fixture(scope="module")
def rm_path(tmp_path_factory) -> str:
    from polyrl_torch.testing.tiny_reward_model import build_tiny_reward_model

    return build_tiny_reward_model(tmp_path_factory.mktemp("models") / "tiny-rm")


def score(path, prompts=PROMPTS, completions=COMPLETIONS, **options):
    pm = get_plugin_manager()  # reward_model comes from polyrl-torch's entry point
    computer = RewardComputer(pm, [("reward_model", 1.0, {"path": path, **options})])
    rows = [{"prompt": p} for p in prompts]
    comps = [Completion(0, [1], [2], [0.0], text=c) for c in completions]
    return computer(list(prompts), comps, RewardContext(rows=rows, wanted=("reward_model",)))


def test_batched_scores_equal_one_by_one_and_are_deterministic(rm_path):
    batched = score(rm_path, batch_size=3).per_reward["reward_model"]
    again = score(rm_path, batch_size=3).per_reward["reward_model"]
    single = np.array([score(rm_path, [p], [c], batch_size=1).total[0] for p, c in zip(PROMPTS, COMPLETIONS)])
    assert np.isfinite(batched).all() and len(set(batched.round(6))) == len(batched)
    np.testing.assert_array_equal(batched, again)
    np.testing.assert_allclose(batched, single, atol=1e-5, rtol=0)
    np.testing.assert_allclose(score(rm_path, batch_size=8).total, batched, atol=1e-5, rtol=0)


def test_chat_template_option_changes_the_input(rm_path):
    with_template = score(rm_path, chat_template=True).total
    without = score(rm_path, chat_template=False).total
    assert not np.allclose(with_template, without)


def test_truncation_keeps_the_completion(rm_path):
    long_prompt = "word " * 400
    a = score(rm_path, [long_prompt], ["the end"], max_length=32).total[0]
    b = score(rm_path, ["other " * 10 + long_prompt], ["the end"], max_length=32).total[0]
    assert a == pytest.approx(b, abs=1e-5)  # both keep the same last 32 tokens


def test_options_and_errors(rm_path, tmp_path, monkeypatch):
    with pytest.raises(RewardError, match="needs option 'path'"):
        score(None)
    with pytest.raises(RewardError, match="no option 'batchsize'"):
        score(rm_path, batchsize=2)
    with pytest.raises(RewardError, match="cannot load a sequence-classification model"):
        score(str(tmp_path / "missing"))
    with pytest.raises(RewardError, match="label must be in 0..0"):
        score(rm_path, label=3)
    import polyrl_torch.reward_model as rm

    monkeypatch.setattr(rm, "_loaded", {})
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if not installed
    with pytest.raises(RewardError, match=r"pip install 'polyrl\[torch\]'"):
        score(rm_path)


def test_core_imports_no_torch_or_httpx():
    code = ("import sys\nfrom polyrl.plugins import get_plugin_manager\nimport polyrl.serve, polyrl.cli\n"
            "pm = get_plugin_manager(entry_points=False)\n"
            "from polyrl.registry import Registry\n"
            "names = set(Registry(pm).reward_names())\n"
            "assert {'llm_judge', 'code_tests'} <= names, names\n"
            "bad = [m for m in ('torch', 'transformers', 'httpx') if m in sys.modules]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)
