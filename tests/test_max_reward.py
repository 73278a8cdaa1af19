"""``max_reward_model``: BERT/DistilBERT classifiers in MAX's Graph API score like transformers."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from polyrl.errors import RewardError
from polyrl.registry import get_registry

torch = pytest.importorskip("torch")
if not get_registry().status("max").available:
    pytest.skip(f"MAX not usable here: {get_registry().status('max').reason}", allow_module_level=True)

PROMPTS = ["What is 2 + 3?", [{"role": "user", "content": "Name a colour."}], "Count:", "Hi"]
COMPLETIONS = ["5", "Blue, I think.", "1 2 3 4 5 6 7 8 9 10 11 12", ""]


def _classifier(kind: str, folder: Path, tokenizer_dir: str) -> str:
    from transformers import (BertConfig, BertForSequenceClassification, DistilBertConfig,
                              DistilBertForSequenceClassification)

    torch.manual_seed(0)
    if kind == "bert":
        model = BertForSequenceClassification(BertConfig(
            vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=128, max_position_embeddings=128, num_labels=2))
    else:
        model = DistilBertForSequenceClassification(DistilBertConfig(
            vocab_size=512, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
            max_position_embeddings=128, num_labels=1))
    with torch.no_grad():  # scores far from 0, so agreement is a real check
        model.classifier.weight.mul_(40.0)
    model.eval().save_pretrained(folder)
    for f in Path(tokenizer_dir).glob("*token*"):
        shutil.copy(f, folder / f.name)
    return str(folder)


# each architecture is a MAX compile of minutes on 2 cores: DistilBERT always, BERT with -m slow
@pytest.fixture(scope="module", params=["distilbert", pytest.param("bert", marks=pytest.mark.slow)])
def classifier(request, tiny_model_dir, tmp_path_factory) -> tuple[str, str]:
    return request.param, _classifier(request.param, tmp_path_factory.mktemp(request.param), tiny_model_dir)


def test_scores_equal_transformers_on_the_same_weights(classifier):
    from polyrl_max.reward_model import score_texts as max_scores
    from polyrl_torch.reward_model import score_texts as torch_scores

    kind, path = classifier
    options = {"path": path, "batch_size": 3, "label": 1 if kind == "bert" else 0}
    got = max_scores(PROMPTS, COMPLETIONS, options)
    want = torch_scores(PROMPTS, COMPLETIONS, options)
    assert np.std(want) > 1e-3  # distinct texts get distinct scores
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # one at a time (no padding) gives the same scores as the padded batch
    alone = [max_scores([p], [c], options)[0] for p, c in zip(PROMPTS, COMPLETIONS)]
    np.testing.assert_allclose(alone, got, rtol=1e-5, atol=1e-5)


def test_usable_as_a_reward_plugin(classifier):
    from polyrl.plugins import get_plugin_manager
    from polyrl.rewards.combine import RewardComputer
    from polyrl.types import Completion, RewardContext

    from polyrl_max.reward_model import score_texts

    kind, path = classifier
    options = {"path": path, "label": 1 if kind == "bert" else 0}
    assert "max_reward_model" in get_registry().reward_names()  # from polyrl-max's entry point
    computer = RewardComputer(get_plugin_manager(), [("max_reward_model", 1.0, options)])
    comps = [Completion(0, [1], [2], [0.0], text=c) for c in COMPLETIONS]
    result = computer(list(PROMPTS), comps, RewardContext(rows=[{"prompt": p} for p in PROMPTS],
                                                         wanted=("max_reward_model",)))
    np.testing.assert_allclose(result.total, score_texts(PROMPTS, COMPLETIONS, options), rtol=1e-6)


def test_child_pythons_still_start_in_this_environment(classifier):
    """Compiling and running the encoder leaves child Pythons in this virtualenv."""
    import subprocess
    import sys

    from polyrl_max.reward_model import score_texts

    kind, path = classifier
    score_texts(PROMPTS[:1], COMPLETIONS[:1], {"path": path, "label": 1 if kind == "bert" else 0})
    child = subprocess.run([sys.executable, "-c", "import sys, polyrl_max; print(sys.prefix)"],
                           capture_output=True, text=True)
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == sys.prefix


def test_bad_options_name_the_fix(classifier):
    from polyrl_max.reward_model import score_texts

    kind, path = classifier
    with pytest.raises(RewardError, match="no option 'paht'"):
        score_texts(PROMPTS, COMPLETIONS, {"paht": path})
    with pytest.raises(RewardError, match="label must be in"):
        score_texts(PROMPTS, COMPLETIONS, {"path": path, "label": 7})
    with pytest.raises(RewardError, match='chat_template must be "auto", true or false, got 1'):
        score_texts(PROMPTS, COMPLETIONS, {"path": path, "chat_template": 1})  # was read as true
    if kind == "bert":
        with pytest.raises(RewardError, match="2 labels"):
            score_texts(PROMPTS, COMPLETIONS, {"path": path})


def test_arrow_compute_still_works_after_max_ran_a_model(classifier):
    """MAX and pyarrow both carry OpenTelemetry's C++ context singleton: after MAX had run a model,
    pyarrow's first compute call (a Parquet dataset's check) killed the process with SIGSEGV."""
    import subprocess
    import sys

    kind, path = classifier
    code = ("from polyrl_max.reward_model import score_texts\n"
            f"score_texts(['Hi'], ['there'], {{'path': {path!r}, 'label': {1 if kind == 'bert' else 0}}})\n"
            "import pyarrow as pa, pyarrow.compute as pc\n"
            "print(pc.match_substring_regex(pa.array(['a', ' ']), r'^\\s*$').to_pylist())\n")
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.strip().endswith("[False, True]")
