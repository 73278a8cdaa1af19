"""The served model's sizes read from its config.json: vocabulary rows and positions."""

from __future__ import annotations

import json
from pathlib import Path

from polyrl.serving.vocab import embedding_rows, model_positions


class _Tokenizer:
    def __len__(self) -> int:
        return 77


def _folder(tmp_path: Path, config: object) -> str:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


def test_sizes_come_from_the_top_level_before_text_config(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {"vocab_size": 10, "n_positions": 64, "text_config": {"vocab_size": 20,
                                                                                       "max_position_embeddings": 99}})
    assert embedding_rows(folder, _Tokenizer()) == 10
    assert model_positions(folder) == 64


def test_multimodal_sizes_come_from_text_config(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {"model_type": "x", "text_config": {"vocab_size": 20, "max_position_embeddings": 99}})
    assert embedding_rows(folder, _Tokenizer()) == 20
    assert model_positions(folder) == 99


def test_unusable_values_fall_back(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {"vocab_size": True, "max_position_embeddings": -1, "text_config": "nope"})
    assert embedding_rows(folder, _Tokenizer()) == 77
    assert model_positions(folder) is None


def test_a_config_json_that_is_not_an_object_is_not_read(tmp_path: Path) -> None:
    folder = _folder(tmp_path, [1, 2, 3])
    assert embedding_rows(folder, _Tokenizer()) == 77
    assert model_positions(folder) is None
    assert embedding_rows(str(tmp_path / "missing"), None) is None
    assert model_positions("") is None
