"""The engine object ``BackendSpec.load`` returns: a transformers causal LM on the CPU.

It holds the model, tokenizer, optimizer and sampling RNG, and does the work every hook shares:
turning prompts into ids, scoring completion tokens, moving weights in and out, checkpoints.
Generation and training live in ``generation.py`` and ``training.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from polyrl.backend_kit.chat import require_chat_template
from polyrl.backend_kit.checkpoints import missing_piece
from polyrl.backend_kit.literal_chat import encode_chat_literal
from polyrl.backend_kit.tokens import text_prompt_ids
from polyrl.errors import ConfigError
from polyrl.types import EngineConfig, Prompt, TokenPrompt, TokenSequence

STATE_FILE = "example_state.pt"  # optimizer + RNG state, in the checkpoint's state folder


class ExampleEngine:
    """One loaded model for one role ("generate", "train" or "reference")."""

    device = "cpu"  # `polyrl bench` reads the resolved device here

    def __init__(self, config: EngineConfig) -> None:
        if config.device not in ("auto", "cpu"):
            raise ConfigError(f"the example backend runs on the CPU only, not {config.device!r}",
                              field="model.device", fix='set device = "cpu" (or leave it "auto")')
        if not (Path(config.model) / "config.json").is_file():
            raise ConfigError(f"{config.model!r} is not a transformers model folder (no config.json)",
                              field="model.path", fix="point model.path at a folder with config.json and weights")
        if config.threads:
            torch.set_num_threads(config.threads)
        self.config = config
        self.tokenizer = AutoTokenizer.from_pretrained(config.model)
        self.model = AutoModelForCausalLM.from_pretrained(config.model, dtype=torch.float32)
        self.model.eval()  # no dropout: the same tokens must always score the same
        eos = self.model.generation_config.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
        self.rng = torch.Generator().manual_seed(config.seed)  # for generate calls without a seed
        self.optimizer: torch.optim.AdamW | None = None
        if config.role == "train":
            self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=config.optimizer.lr)
            self.apply_hyperparameters()

    def apply_hyperparameters(self) -> None:
        """AdamW's settings from the config (also after loading a checkpoint: a resumed run may
        change them on purpose; the lr itself is set per step from the schedule)."""
        assert self.optimizer is not None
        opt = self.config.optimizer
        for group in self.optimizer.param_groups:
            group.update(betas=tuple(opt.betas), eps=opt.eps, weight_decay=opt.weight_decay)

    # --- tokens ------------------------------------------------------------------------------------

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    def encode_chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                    add_generation_prompt: bool) -> list[int]:
        """The chat template's rendering, where text spelling ``<|im_end|>`` stays text, with the
        run's extra template variables (``EngineConfig.chat_template_kwargs``: enable_thinking...)."""
        require_chat_template(self.tokenizer, self.config.model)
        return encode_chat_literal(self.tokenizer, messages, tools, add_generation_prompt,
                                   template_kwargs=self.config.chat_template_kwargs)

    def prompt_ids(self, prompt: Prompt) -> list[int]:
        """What the model sees for a prompt: token ids verbatim, text with the tokenizer's BOS,
        a chat through the template with a generation prompt."""
        if isinstance(prompt, TokenPrompt):
            return [int(i) for i in prompt.ids]
        if isinstance(prompt, str):
            return text_prompt_ids(self.tokenizer, prompt)
        return self.encode_chat(prompt, None, add_generation_prompt=True)

    # --- scoring -----------------------------------------------------------------------------------

    def token_logprobs(self, sequences: Sequence[TokenSequence], temperature: float) -> list[torch.Tensor]:
        """Each completion token's log-prob under ``softmax(logits / temperature)``: one forward
        per sequence (no padding to get wrong; a real backend batches). Differentiable."""
        out = []
        for seq in sequences:
            ids = torch.as_tensor(np.concatenate([seq.prompt_ids, seq.completion_ids]))[None]
            logits = self.model(ids).logits[0, len(seq.prompt_ids) - 1:-1]
            logp = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
            out.append(logp.gather(-1, torch.as_tensor(seq.completion_ids)[:, None])[:, 0])
        return out

    def logprobs(self, sequences: Sequence[TokenSequence], temperature: float) -> list[np.ndarray]:
        with torch.no_grad():
            return [lp.numpy().astype(np.float32) for lp in self.token_logprobs(sequences, temperature)]

    # --- weights -----------------------------------------------------------------------------------

    def _tied(self) -> bool:
        out = self.model.get_output_embeddings()
        return out is not None and out.weight is self.model.get_input_embeddings().weight

    def export_weights(self) -> dict[str, np.ndarray]:
        """HF-named float32 arrays; a tied model exports no ``lm_head.weight`` (HF's convention)."""
        skip = {"lm_head.weight"} if self._tied() else set()
        return {name: t.detach().numpy().copy() for name, t in self.model.state_dict().items() if name not in skip}

    def import_weights(self, weights: Mapping[str, Any]) -> bool:
        state = self.model.state_dict()  # tensors sharing the parameters' storage
        unknown = sorted(set(weights) - set(state))
        if unknown:
            raise ConfigError(f"weights this model does not have: {', '.join(unknown[:3])}", field="model.path",
                              fix="sync weights only between engines of the same model")
        with torch.no_grad():
            for name, value in weights.items():
                state[name].copy_(torch.as_tensor(np.asarray(value)))
        return True

    # --- checkpoints -------------------------------------------------------------------------------

    def save_checkpoint(self, path: str, state_path: str | None) -> bool:
        """``path``: a plain HF folder the user can ship; ``state_path``: what exact resumption
        needs besides (AdamW moments and step count, the sampling RNG)."""
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)  # with its chat template
        state = Path(state_path or path)
        state.mkdir(parents=True, exist_ok=True)
        optimizer = None if self.optimizer is None else self.optimizer.state_dict()
        torch.save({"optimizer": optimizer, "rng": self.rng.get_state()}, state / STATE_FILE)
        return True

    def load_checkpoint(self, path: str, state_path: str | None, weights_only: bool) -> bool:
        from safetensors.torch import load_file

        self.import_weights(load_file(str(Path(path) / "model.safetensors")))
        if weights_only:
            return True
        file = Path(state_path or path) / STATE_FILE
        if not file.is_file():
            raise missing_piece("optimizer and RNG state", file)
        saved = torch.load(file, weights_only=True)  # tensors and numbers only: no code runs
        if self.optimizer is not None:
            if saved["optimizer"] is None:
                raise missing_piece("optimizer state (saved by an engine that did not train)", file)
            self.optimizer.load_state_dict(saved["optimizer"])
            self.apply_hyperparameters()
        self.rng.set_state(saved["rng"])
        return True
