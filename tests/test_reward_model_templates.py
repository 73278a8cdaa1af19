"""A reward model's tokenizer without a chat template, asked to render a chat: one error, as in TRL.

TRL 1.16's ``GRPOTrainer._calculate_rewards`` renders a chat prompt and its completion with the
reward tokenizer's chat template (``apply_chat_template``), which raises for a tokenizer without
one. polyrl scored the messages' contents joined by line breaks with the completion glued to the
last one instead, unsaid."""

from __future__ import annotations

import pytest

from polyrl.backend_kit.reward_text import encode_pair_cut, render_pair
from polyrl.errors import ConfigError

pytest.importorskip("transformers")

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"}]


@pytest.fixture(scope="module")
def untemplated(tiny_model_dir):
    """The tiny model's tokenizer with its chat template removed (a BERT-style reward tokenizer)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.chat_template = None
    return tok


def test_a_chat_prompt_for_a_reward_tokenizer_without_a_template_is_one_error_as_trl_raises(untemplated):
    from trl.data_utils import apply_chat_template

    with pytest.raises(ValueError, match="chat_template is not set"):  # TRL's own reward-model rendering
        apply_chat_template({"messages": [*CHAT, {"role": "assistant", "content": "Paris."}]}, untemplated)
    for chat_template in ("auto", True):
        with pytest.raises(ConfigError, match="the reward model's tokenizer has no chat template, and a chat "
                                              "prompt is to be scored through one") as info:
            encode_pair_cut(untemplated, CHAT, "Paris.", chat_template, 1024)
        assert info.value.field == "options.path"
        assert "options.chat_template = false" in info.value.fix and "reward_processing_classes" in info.value.fix
        with pytest.raises(ConfigError, match="no chat template"):
            render_pair(untemplated, CHAT, "Paris.", chat_template)
    with pytest.raises(ConfigError, match="no chat template, and the prompt is to be scored through one"):
        encode_pair_cut(untemplated, "Capital of France?", "Paris.", True, 1024)  # asked for every prompt


def test_what_trl_scores_as_plain_text_still_is(untemplated):
    """A text prompt under "auto" (TRL's ``prompt + completion``) and ``chat_template = false``
    take no template: scored as before, with or without one."""
    ids, cut = encode_pair_cut(untemplated, "Capital of France?", " Paris.", "auto", 1024)
    assert untemplated.decode(ids).endswith("Capital of France? Paris.") and not cut
    ids, _ = encode_pair_cut(untemplated, CHAT, "Paris.", False, 1024)
    assert "Be brief.\nCapital of France?Paris." in untemplated.decode(ids)
