"""The whole contract, checked: polyrl's conformance kit run against the installed ``example``
backend on a tiny Llama it builds locally (no download).

Checks the backend does not declare (``ignore_eos``, ``concurrent_generate``) skip with a reason;
``compare_with`` is left out so the example needs no other backend.
"""

from polyrl.testing.conformance import BackendConformance


class TestExampleBackend(BackendConformance):
    backend = "example"
    # with polyrl-torch installed: log-probs and weights must also agree with it on the same model
    # compare_with = "torch"
