"""The torch backend keeps freed host memory for reuse on glibc (polyrl_torch.host_memory): a large
tensor allocated again after it was freed must not fault its pages in again."""

from __future__ import annotations

import platform
import subprocess
import sys
import textwrap

import pytest

from polyrl.errors import ConfigError

pytest.importorskip("torch")

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

#: Loads a CPU torch engine with the given options, then allocates and frees a 128 MB tensor six
#: times; prints the page faults of the last four allocations. Two warm-up rounds, as in training
#: (the README: two steps to reach no faults): the second may still map pages when a small
#: allocation between the first free and it split the freed block, which depends on the heap's
#: state after the imports, not on the setting under test.
PROBE = textwrap.dedent("""
    import json, resource, sys, torch
    from polyrl.engine import Engine
    from polyrl.registry import Registry
    from polyrl.types import EngineConfig
    Engine(Registry(), "torch", EngineConfig(model=sys.argv[1], role="generate", threads=1,
                                             options=json.loads(sys.argv[2])))
    faults = []
    for _ in range(6):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        x = torch.ones(32 << 20)  # 128 MB (glibc maps blocks over 32 MB anew), every page written
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        del x
    print(sum(faults[2:]))
""")


def faults_after_first(model_dir: str, options: str) -> int:
    out = subprocess.run([sys.executable, "-c", PROBE, model_dir, options], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(not GLIBC, reason="needs glibc (mallopt); other C libraries keep their defaults")
@pytest.mark.slow  # tens of seconds each: `make test-slow` (CI) runs it
def test_a_freed_large_tensor_is_reused_without_page_faults(tiny_model_dir):
    pages = (128 << 20) // 4096
    assert faults_after_first(tiny_model_dir, "{}") < pages // 100  # reused: no pages mapped anew
    # glibc's defaults (the option off): every allocation maps its pages again
    assert faults_after_first(tiny_model_dir, '{"retain_freed_memory": false}') >= 4 * pages * 0.9


def test_a_non_boolean_switch_is_an_error_naming_it(tiny_model_dir):
    from polyrl.engine import Engine
    from polyrl.registry import Registry
    from polyrl.types import EngineConfig

    with pytest.raises(ConfigError, match="backends.options.retain_freed_memory must be true or false"):
        Engine(Registry(), "torch", EngineConfig(model=tiny_model_dir, options={"retain_freed_memory": "no"}))
