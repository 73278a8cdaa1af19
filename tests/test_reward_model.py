"""``reward_model``: a tiny random sequence-classification Llama built locally, scored in batches."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from model_copies import edited_copy

from polyrl.errors import RewardError
from polyrl.plugins import get_plugin_manager
from polyrl.rewards.combine import RewardComputer
from polyrl.types import Completion, RewardContext
from reward_model_util import trl_scores

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


def test_by_default_text_prompts_are_scored_as_trl_scores_them_and_chats_through_the_template(rm_path):
    """TRL's GRPOTrainer renders the reward model's chat template only for a chat prompt; a text
    prompt is scored as ``prompt + completion`` (its ``_calculate_rewards``). The default follows
    that rule: "auto" equals false on text prompts and true on chats, each scored as TRL scores it."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(rm_path)
    model = AutoModelForSequenceClassification.from_pretrained(rm_path).eval()
    assert tokenizer.chat_template  # the case that differed: a template the text prompts must not get

    def trl(texts):  # TRL 1.16's tokenization of the reward inputs
        batch = tokenizer(text=texts, return_tensors="pt", padding=True, padding_side="right", add_special_tokens=False)
        with torch.inference_mode():
            return model(**batch).logits[:, 0].numpy()

    texts = [p for p in PROMPTS if isinstance(p, str)][:3]
    replies = COMPLETIONS[: len(texts)]
    default = score(rm_path, texts, replies).total
    np.testing.assert_allclose(default, trl([p + c for p, c in zip(texts, replies)]), atol=1e-5, rtol=0)
    np.testing.assert_array_equal(default, score(rm_path, texts, replies, chat_template=False).total)
    chats = [[{"role": "user", "content": p}] for p in texts]
    rendered = [tokenizer.apply_chat_template([*m, {"role": "assistant", "content": c}], tokenize=False)
                for m, c in zip(chats, replies)]
    np.testing.assert_allclose(score(rm_path, chats, replies).total, trl(rendered), atol=1e-5, rtol=0)
    np.testing.assert_array_equal(score(rm_path, chats, replies).total,
                                  score(rm_path, chats, replies, chat_template=True).total)
    with pytest.raises(RewardError, match=r'chat_template must be "auto", true or false, got \'yes\'.*Fix: '):
        score(rm_path, chat_template="yes")


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


def test_a_folder_passed_as_trls_reward_funcs_scores_a_long_pair_whole_as_trl(rm_path, tmp_path):
    """TRL's GRPOTrainer(reward_funcs=["path/to/rm"]) tokenizes the whole prompt + completion for the
    reward model (no truncation); ``api.run(rewards=[folder])`` used to score it with reward_model's
    default max_length of 1024 tokens, cutting a longer pair's start (the question) silently."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from polyrl import api

    # the tiny model with a 4096-token position limit, as real RMs have more
    folder = edited_copy(rm_path, tmp_path / "rm-4k", {"max_position_embeddings": 4096})
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    prompt, completion = "Question " + "word " * 1300 + "What is 2 + 3?", " 5"
    text = prompt + completion
    batch = tokenizer(text=[text], return_tensors="pt", padding=True, padding_side="right", add_special_tokens=False)
    assert 1024 < batch["input_ids"].shape[1] < 4096
    with torch.inference_mode():  # TRL 1.16's _calculate_rewards for a text prompt
        trl_score = model(**batch).logits[:, 0].numpy()

    sections, _ = api.reward_entries([str(folder)])
    ours = score(str(folder), [prompt], [completion], **{k: v for k, v in sections[0].options.items() if k != "path"})
    np.testing.assert_allclose(ours.total, trl_score, atol=1e-4, rtol=0)
    assert sections[0].options["max_length"] == 4096  # the model's own limit: what it can read


_THINKING_RM_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' }}"
    "{% if m['role'] == 'assistant' and enable_thinking is defined and enable_thinking is false %}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}{{ m['content'] + '<|im_end|>\\n' }}{% endfor %}")


def test_chat_template_kwargs_reach_the_reward_models_template_as_trl_passes_them(rm_path, tmp_path):
    """TRL renders its reward models' chat templates with GRPOConfig.chat_template_kwargs;
    reward_model rendered without any variable, so a template reading one (here enable_thinking
    in the assistant turn) scored another text than TRL's. Now its own option, which the TRL route
    fills with GRPOConfig's."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from polyrl import api

    folder = edited_copy(rm_path, tmp_path / "rm-thinking", {"chat_template": _THINKING_RM_TEMPLATE},
                         file="tokenizer_config.json")
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    off = {"enable_thinking": False}
    chats = [[{"role": "user", "content": p}] for p in PROMPTS if isinstance(p, str)][:3]
    replies = COMPLETIONS[:3]
    rendered = [tokenizer.apply_chat_template([*m, {"role": "assistant", "content": c}], tokenize=False, **off)
                for m, c in zip(chats, replies)]
    assert all("</think>" in text for text in rendered)
    batch = tokenizer(text=rendered, return_tensors="pt", padding=True, padding_side="right", add_special_tokens=False)
    with torch.inference_mode():  # TRL 1.16's _calculate_rewards with chat_template_kwargs
        expected = model(**batch).logits[:, 0].numpy()
    ours = score(str(folder), chats, replies, chat_template_kwargs=off).total
    np.testing.assert_allclose(ours, expected, atol=1e-5, rtol=0)
    assert not np.allclose(ours, score(str(folder), chats, replies).total)  # without them: another text
    config, _ = api.run_config(api.grpo, policy=api.Agent("m"), prompts=["q"], rewards=[str(folder)],
                               grpo_config=api.GRPOConfig(chat_template_kwargs=off))
    assert config.rewards[0].options["chat_template_kwargs"] == off  # the TRL route passes GRPOConfig's
    with pytest.raises(RewardError, match=r"reward_model: option chat_template_kwargs: must be a table.*Fix: e\.g\. "
                                          r"options\.chat_template_kwargs"):
        score(str(folder), chats, replies, chat_template_kwargs=["enable_thinking"])


def test_the_tokenizer_option_scores_with_that_tokenizer(rm_path, tmp_path):
    """options.tokenizer (TRL's reward_processing_classes, as polyrl.trl saves it): the pairs are
    tokenized by that tokenizer, whose pad token becomes the model's, as TRL scores them."""
    from transformers import AutoTokenizer

    from polyrl.testing.tiny_model import build_tiny_model

    source = build_tiny_model(tmp_path / "bytes", tokenizer="bytes", num_layers=1, hidden_size=32, num_heads=2,
                              num_kv_heads=1, intermediate_size=32)
    tokenizer = AutoTokenizer.from_pretrained(source)
    tokenizer.pad_token = None  # TRL pads with the eos then
    tokenizer.save_pretrained(tmp_path / "tok")
    texts, replies = [p for p in PROMPTS if isinstance(p, str)], COMPLETIONS[:4]
    texts = texts[:4]
    ours = score(rm_path, texts, replies, tokenizer=str(tmp_path / "tok")).total
    expected = trl_scores(rm_path, AutoTokenizer.from_pretrained(tmp_path / "tok"),
                           [p + c for p, c in zip(texts, replies)])
    np.testing.assert_allclose(ours, expected, atol=1e-5, rtol=0)
    assert not np.allclose(ours, score(rm_path, texts, replies).total, atol=1e-3)
    with pytest.raises(RewardError, match=r"options\.tokenizer: cannot load a tokenizer from .*Fix: point "
                                          r"options\.tokenizer at a folder"):
        score(rm_path, texts, replies, tokenizer=str(tmp_path / "missing"))
    with pytest.raises(RewardError, match=r"needs option 'tokenizer'"):
        score(rm_path, texts, replies, tokenizer="")


def test_a_tokenizer_writing_ids_the_model_lacks_is_named(rm_path, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(rm_path)
    tokenizer.add_tokens(["<beyond>"])  # id 512: the model embeds 0..511
    tokenizer.save_pretrained(tmp_path / "tok")
    with pytest.raises(RewardError, match=r"options\.tokenizer: the tokenizer wrote token id 512, but the model at "
                                          r".* embeds ids 0\.\.511 only\. Fix: "):
        score(rm_path, ["Say <beyond>"], ["ok"], tokenizer=str(tmp_path / "tok"))


def test_a_config_pad_id_other_than_the_tokenizers_is_replaced_as_trl_does(rm_path, tmp_path):
    """A folder whose config.json names another pad_token_id than its tokenizer pads with: the
    model pooled a padded sequence's padding, so a batch scored other numbers than one by one.
    TRL sets the model's pad_token_id to the tokenizer's; so does reward_model now."""

    folder = edited_copy(rm_path, tmp_path / "rm-pad", {"pad_token_id": 0})  # the tokenizer pads with 3
    batched = score(str(folder), batch_size=5).total
    single = np.array([score(str(folder), [p], [c], batch_size=1).total[0] for p, c in zip(PROMPTS, COMPLETIONS)])
    np.testing.assert_allclose(batched, single, atol=1e-5, rtol=0)
    np.testing.assert_allclose(batched, score(rm_path, batch_size=5).total, atol=1e-5, rtol=0)


def test_compute_dtype_runs_the_forward_under_autocast_and_names_a_bad_value(rm_path):
    """``compute_dtype = "bfloat16"``: the float32 weights' forward under bfloat16 autocast (TRL's
    bf16 reward model), other numbers than the float32 forward; another value is one error."""
    plain = score(rm_path).per_reward["reward_model"]
    autocast = score(rm_path, compute_dtype="bfloat16").per_reward["reward_model"]
    assert np.isfinite(autocast).all() and np.abs(autocast - plain).max() > 1e-5
    np.testing.assert_allclose(autocast, plain, atol=2e-2, rtol=0)  # the same model, in bfloat16
    with pytest.raises(RewardError, match=r"compute_dtype must be 'bfloat16' or 'float16', got 'int8'.*Fix: "):
        score(rm_path, compute_dtype="int8")


def test_a_pair_past_max_length_is_scored_on_its_end_and_a_warning_says_so(rm_path):
    """A completion the policy makes longer than ``max_length`` is scored on its last tokens only:
    the model never sees the prompt (nor the completion's start). That used to happen silently; the
    warning now counts the cut pairs and names the option."""
    from structlog.testing import capture_logs

    long_completion = "filler " * 200 + "the end"
    with capture_logs() as logs:
        cut = score(rm_path, ["What is 2 + 3?", "What is 2 + 3?"], [long_completion, "5"], max_length=32).total
        other_prompt = score(rm_path, ["Name a colour."], [long_completion], max_length=32).total
    assert cut[0] == pytest.approx(other_prompt[0], abs=1e-5)  # the prompt was not seen at all
    said = [e for e in logs if "options.max_length = 32" in e["event"]]
    assert [(e["cut"], e["of"]) for e in said] == [(1, 2), (1, 1)], logs
    with capture_logs() as logs:
        score(rm_path, ["What is 2 + 3?"], ["5"], max_length=32)
    assert not [e for e in logs if "max_length" in e["event"]]


def test_an_episodes_whole_conversation_is_scored_as_trls_reward_model_scores_it(rm_path):
    """TRL's reward model scores ``prompt + completion`` messages, an episode's completion being its
    whole conversation after the prompt (turns, tool results, observations). polyrl scored the
    prompt and the last answer alone, the turns the model answered from left out, unsaid."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(rm_path)
    chat = [{"role": "user", "content": "Guess my number."}]
    episode = [{"role": "assistant", "content": "Is it 3?"}, {"role": "user", "content": "Higher."},
               {"role": "assistant", "content": "5"}]
    computer = RewardComputer(get_plugin_manager(), [("reward_model", 1.0, {"path": rm_path})])
    done = Completion(0, [1], [2], [0.0], text="5", messages=episode)
    got = computer([chat], [done], RewardContext(rows=[{"prompt": chat}], wanted=("reward_model",))).total
    rendered = tokenizer.apply_chat_template([*chat, *episode], tokenize=False)
    np.testing.assert_allclose(got, trl_scores(rm_path, tokenizer, [rendered]), atol=1e-5, rtol=0)
    assert not np.allclose(got, score(rm_path, [chat], ["5"]).total)  # the last answer alone scores otherwise
