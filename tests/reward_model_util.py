"""TRL 1.16's reward-model scoring, written out for tests to compare polyrl's against."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np


def trl_scores(rm_folder: Any, tokenizer: Any, texts: list[str]) -> np.ndarray:
    """TRL 1.16's scoring of text prompts with a reward model and its reward processing class:
    GRPOTrainer.__init__'s pad rule (the tokenizer's pad token, the eos without one, is the model's
    pad_token_id), then _calculate_rewards' tokenization (right-padded, no special tokens) and logit.
    ``tokenizer`` is copied, so the caller's keeps its pad token."""
    import torch
    from transformers import AutoModelForSequenceClassification

    tokenizer = copy.deepcopy(tokenizer)
    model = AutoModelForSequenceClassification.from_pretrained(rm_folder, num_labels=1).eval()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.config.get_text_config().pad_token_id = tokenizer.pad_token_id
    batch = tokenizer(text=texts, return_tensors="pt", padding=True, padding_side="right", add_special_tokens=False)
    with torch.inference_mode():
        return model(**batch).logits[:, 0].numpy()
