"""The dataset's prompt roles checked by ``polyrl launch --dry-run`` (``trainer.check_run``).

Why: a prompt message in a role the chat template drops is refused when the run loads its models
(``polyrl.data.check_prompt_lengths``), minutes in; the dry run, which loads no weights, passed
it. The model folder's tokenizer alone (no weights, seconds) is enough to ask the template, so the
dry run refuses it too, in the same words. Skipped where that tokenizer cannot be loaded here (a
GGUF file, a hub id, no tokenizer files: the run's own check stands) and where an environment
writes the first messages (its ``reset`` runs only in the run).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from polyrl.data import Dataset, check_prompt_roles
from polyrl.types import Prompt

if TYPE_CHECKING:
    from polyrl.agents.setup import EnvironmentPlan
    from polyrl.config import RunConfig
    from polyrl.folder_chat import FolderChat


def check_dataset_roles(config: RunConfig, plan: EnvironmentPlan | None, datasets: Sequence[Dataset | None],
                        folder: FolderChat) -> None:
    """A ConfigError naming the first row, message and role the chat template would drop, as the
    run's startup check says it; nothing when every chat prompt is shown (or it cannot be asked)."""
    if plan is not None and plan.make_environment is not None:
        return
    chat = folder.chat()  # rendering as the engines do
    probe = folder.control_probe()  # a control character the tokenizer misreads (polyrl.control_chars)
    if chat is None:
        for dataset in datasets:  # text prompts on a model without a chat template
            if dataset is not None and probe is not None:
                check_prompt_roles(dataset, None, probe)
        return
    encode = chat[0]

    def render(prompt: Prompt) -> np.ndarray:
        messages: Any = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        return encode(messages, None, True)

    if plan is not None and plan.toolbox is not None and plan.toolbox.schemas:  # tools alone: as episodes render
        from polyrl.agents.episodes import EpisodeLimits, EpisodeRunner

        env = config.environment
        runner = EpisodeRunner(_samples_nothing, encode, EpisodeLimits(), toolbox=plan.toolbox,
                               prompt_column=config.data.prompt_column, model_name=config.model.path,
                               tools_prompt_format="json" if env.tool_format == "json" else "hermes",
                               tool_format=env.tool_format)
        render = runner.first_prompt_ids
    for dataset in datasets:
        if dataset is not None:
            check_prompt_roles(dataset, render, probe)


def _samples_nothing(prompts: Sequence[Any], sampling: Any) -> list[Any]:
    raise AssertionError("the role check samples nothing")  # pragma: no cover


__all__ = ["check_dataset_roles"]
