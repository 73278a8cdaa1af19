"""polyrl's own float32 decode kernel (``polyrl_torch.decode_kernel``) on a real tiny Llama.

The kernel changes how the sampler's matmuls stream weights, not what they compute: it must
multiply as ``F.linear`` does for any rows, sizes and bias (the sampler on it picking the plain
sampler's tokens and following every weight update: ``test_torch_packed_generation``), in each
build this CPU runs (AVX-512: 48-column panels, tiles of up to 8 rows; AVX2: 24 and 4), "auto"
must take it only where it is meant to (Intel AVX-512 or AMD AVX2-only, one thread) and "on" where it cannot run
must fail at load with an error naming the option.
"""

from __future__ import annotations

import numpy as np
import pytest

from polyrl.engine import Engine
from polyrl.errors import ConfigError
from polyrl.registry import get_registry
from polyrl.types import EngineConfig, OptimizerConfig, SamplingParams

torch = pytest.importorskip("torch")
decode_kernel = pytest.importorskip("polyrl_torch.decode_kernel")
import native_builds  # noqa: E402

#: once per build of the C library this CPU runs
EACH_BUILD = pytest.mark.parametrize("native_build", native_builds.params(), indirect=True)

PROMPTS = ["hello there", "count to three"]
#: float32 log-probs computed by another matmul kernel (other summation order)
FP32_LOGP_TOL = 1e-4


def _needs_kernel() -> None:
    if reason := decode_kernel.unavailable_reason():
        pytest.skip(f"polyrl's decode kernel cannot run here: {reason}")


def _engine(model_dir: str, threads: int = 1, **options) -> Engine:
    return Engine(get_registry(), "torch", EngineConfig(model=model_dir, threads=threads, seed=0, options=options,
                                                        optimizer=OptimizerConfig(lr=1e-2)))


def _on_kernel(engine: Engine) -> set[bool]:
    from polyrl_torch.generation_weights import PackedLinear

    return {m.kernel for m in engine.raw.generation_copy.model.modules() if isinstance(m, PackedLinear)}


def _gap(a, b) -> float:
    return max(float(np.abs(np.asarray(x) - np.asarray(y)).max()) for x, y in zip(a, b))


@EACH_BUILD
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 17, 20, 32, 41])
@pytest.mark.parametrize(("out_features", "in_features"),
                         [(1, 1), (23, 9), (47, 37), (48, 64), (49, 5), (150, 96), (3, 0)])
def test_kernel_multiplies_as_linear_does(rows, out_features, in_features, native_build):
    """Every tile height (1-8 rows; 1-4 with AVX2), rows split into several even tiles (9: 5 + 4, 20:
    7 + 7 + 6; AVX2: 3 + 3 + 3, 5 x 4); whole panels and a last one partly padding (its padding
    never written to the output)."""
    gen = torch.Generator().manual_seed(rows * 1000 + out_features)
    weight = torch.randn(out_features, in_features, generator=gen)
    bias = torch.randn(out_features, generator=gen)
    x = torch.randn(rows, in_features, generator=gen)
    panels = decode_kernel.panels_of(weight)
    width = decode_kernel.panel()
    assert panels.shape == (-(-out_features // width), in_features, width)
    torch.testing.assert_close(decode_kernel.linear(x, panels, out_features, None),
                               torch.nn.functional.linear(x, weight), rtol=1e-5, atol=1e-5)
    strided = torch.randn(2, 3, in_features, generator=gen)[:, -1:, :]  # the prefill's last position: a view
    torch.testing.assert_close(decode_kernel.linear(strided, panels, out_features, bias),
                               torch.nn.functional.linear(strided, weight, bias), rtol=1e-5, atol=1e-5)


@EACH_BUILD
@pytest.mark.parametrize("out_features", [24, 48, 49, 150])
def test_a_weight_update_repacks_in_place_as_a_fresh_pack_would(out_features, native_build):
    """A weight update writes the new panels over the old ones (no new memory): the result is a fresh
    pack's, the last panel's padding zero again; panels of another shape are not reused."""
    gen = torch.Generator().manual_seed(out_features)
    old, new = torch.randn(out_features, 40, generator=gen), torch.randn(out_features, 40, generator=gen)
    panels = decode_kernel.panels_of(old)
    panels.fill_(float("nan"))  # whatever was there must not survive
    again = decode_kernel.panels_of(new, into=panels)
    assert again.data_ptr() == panels.data_ptr()
    assert torch.equal(again, decode_kernel.panels_of(new))
    assert torch.equal(again.transpose(1, 2).reshape(-1, 40)[:out_features], new)
    other = decode_kernel.panels_of(torch.randn(out_features, 41, generator=gen), into=panels)
    assert other.data_ptr() != panels.data_ptr() and other.shape[1] == 41
    with torch.inference_mode():  # as generate packs them
        made = decode_kernel.panels_of(old)
    outside = decode_kernel.panels_of(new, into=made)  # a refresh outside inference mode (a bench's): fresh panels
    assert outside.data_ptr() != made.data_ptr() and torch.equal(outside, again)
    with torch.inference_mode():
        assert decode_kernel.panels_of(new, into=made).data_ptr() == made.data_ptr()


@EACH_BUILD
@pytest.mark.parametrize("rows", [2, 9, 12, 20, 33])
def test_a_row_multiplies_the_same_whatever_rows_share_its_call(rows, native_build):
    """How the rows are split into tiles changes which weights are read together, never a row's sums:
    each row of a call equals that row multiplied alone, bit for bit (a sequence's log-probs do not
    depend on how many rows are still sampling beside it, as far as these matmuls go)."""
    gen = torch.Generator().manual_seed(rows)
    weight = torch.randn(200, 160, generator=gen)
    x = torch.randn(rows, 160, generator=gen)
    panels = decode_kernel.panels_of(weight)
    together = decode_kernel.linear(x, panels, 200, None)
    for row in range(rows):
        assert torch.equal(together[row], decode_kernel.linear(x[row:row + 1], panels, 200, None)[0]), row


@pytest.mark.parametrize(("widest", "vendor", "takes"), [
    ("avx512", "GenuineIntel", True), ("avx512", "AuthenticAMD", False), ("avx2", "GenuineIntel", False),
    ("avx2", "AuthenticAMD", True), (None, "GenuineIntel", False), (None, "AuthenticAMD", False)])
def test_auto_takes_the_kernel_only_where_it_was_measured_to_win(widest, vendor, takes, monkeypatch):
    """Intel with AVX-512 and AMD with AVX2 but not AVX-512 (the kinds measured); neither AMD's AVX-512
    CPUs nor Intel's AVX2-only ones, unmeasured."""
    monkeypatch.setattr(decode_kernel, "instruction_set", lambda: widest)
    monkeypatch.setattr(decode_kernel, "cpu_vendor", lambda: vendor)
    assert decode_kernel.measured_to_win() is takes


@EACH_BUILD
def test_panels_of_another_shape_are_refused_not_read_past(native_build):
    """Panels packed for fewer outputs, or for the other build's width, are a ValueError: the C code
    would read past them (or misread them)."""
    width = decode_kernel.panel()
    panels = decode_kernel.panels_of(torch.randn(width, 8))
    with pytest.raises(ValueError, match="outputs need panels"):
        decode_kernel.linear(torch.randn(2, 8), panels, 4 * width, None)
    other = torch.zeros(1, 8, 72 // width)  # 72 // 24 = 3 or 72 // 48 = 1 columns: never this build's width
    with pytest.raises(ValueError, match="outputs need panels"):
        decode_kernel.linear(torch.randn(2, 8), other, 1, None)
    with pytest.raises(ValueError, match="outputs need panels"):
        decode_kernel.linear(torch.randn(2, 8), torch.zeros(8, width), width, None)


def test_auto_takes_the_kernel_where_measured_with_one_thread_and_on_with_any(tiny_model_dir):
    expected = decode_kernel.unavailable_reason() is None and decode_kernel.measured_to_win()
    sampling = SamplingParams(max_new_tokens=2, n=1, temperature=0.0)
    one = _engine(tiny_model_dir)
    one.generate(PROMPTS, sampling)
    assert _on_kernel(one) == {expected}
    two = _engine(tiny_model_dir, threads=2)  # the kernel has no threads of its own: oneDNN's do the work
    two.generate(PROMPTS, sampling)
    assert _on_kernel(two) == {False}
    if decode_kernel.unavailable_reason() is None:  # asked for, it runs whatever the threads
        asked = _engine(tiny_model_dir, threads=2, decode_kernel="on")
        asked.generate(PROMPTS, sampling)
        assert _on_kernel(asked) == {True}
    off = _engine(tiny_model_dir, decode_kernel="off")
    off.generate(PROMPTS, sampling)
    assert _on_kernel(off) == {False}


def test_decode_kernel_option_is_checked_at_load(tiny_model_dir, monkeypatch):
    with pytest.raises(ConfigError) as err:
        _engine(tiny_model_dir, decode_kernel="yes")
    assert err.value.field == "backends.options.decode_kernel" and '"auto"' in str(err.value)
    # "on" where it cannot run (here: an instruction-set cap, as a user pinning oneDNN's ISA sets)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    decode_kernel.unavailable_reason.cache_clear()
    try:
        with pytest.raises(ConfigError) as err:
            _engine(tiny_model_dir, decode_kernel="on")
        assert err.value.field == "backends.options.decode_kernel"
        assert "cannot run here" in str(err.value) and ("ONEDNN_MAX_CPU_ISA" in str(err.value)
                                                        or "neither AVX-512F" in str(err.value))
        auto = _engine(tiny_model_dir)  # "auto" quietly keeps oneDNN there
        auto.generate(PROMPTS, SamplingParams(max_new_tokens=2, n=1, temperature=0.0))
        assert _on_kernel(auto) == {False}
    finally:
        monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
        decode_kernel.unavailable_reason.cache_clear()


@pytest.mark.slow
def test_kernel_is_built_once_into_the_users_cache(tmp_path, monkeypatch):
    """Built under $XDG_CACHE_HOME/polyrl/kernels by name of its source and flags, renamed into
    place whole (no partial file left), and found there by the next process."""
    _needs_kernel()
    import subprocess
    import sys

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    script = ("from polyrl_torch import decode_kernel as k; import torch; w = torch.randn(5, 3); "
              "print(bool(torch.allclose(k.linear(torch.ones(2, 3), k.panels_of(w), 5, None), "
              "torch.ones(2, 3) @ w.T, atol=1e-5)))")
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr
    built = sorted(p.name for p in (tmp_path / "polyrl" / "kernels").iterdir())
    assert len(built) == 1 and built[0].startswith("decode_kernel-") and built[0].endswith(".so"), built


def test_every_c_file_the_build_reads_is_keyed_and_ships_in_the_wheel():
    """Each local ``#include`` of the C files is in ``HEADERS`` (a header edit must rebuild: the cache key
    hashes them) and every source and header is the torch plugin's package-data (a wheel install
    compiles from them)."""
    import re
    import tomllib
    from pathlib import Path

    files = (*decode_kernel.SOURCES, *decode_kernel.HEADERS)
    included = {name for path in files for name in re.findall(r'#include "([^"]+)"', path.read_text())}
    assert included and included <= {path.name for path in decode_kernel.HEADERS}
    project = tomllib.loads((Path(decode_kernel.__file__).parents[1] / "pyproject.toml").read_text())
    assert {path.name for path in files} <= set(project["tool"]["setuptools"]["package-data"]["polyrl_torch"])


def test_doctor_says_which_build_the_kernel_uses_and_whether_auto_takes_it(monkeypatch):
    from polyrl_torch import plugin

    line = plugin._diagnostics()["decode_kernel"]
    if decode_kernel.unavailable_reason() is None:
        assert line.startswith(f"{decode_kernel.instruction_set()} build;"), line
        assert ('"auto": on where one thread samples' in line) is decode_kernel.measured_to_win(), line
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    decode_kernel.unavailable_reason.cache_clear()
    try:
        assert plugin._diagnostics()["decode_kernel"] == f"off ({decode_kernel.unavailable_reason()})"
    finally:
        monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
        decode_kernel.unavailable_reason.cache_clear()
