"""The packages' lazy attributes (pitstop._lazy): torch-free import, names resolved on use."""

from __future__ import annotations

import subprocess
import sys

import pytest

import pitstop
import pitstop.doctor
import pitstop.engine
import pitstop.lint
import pitstop.tune


@pytest.mark.parametrize("package", [pitstop, pitstop.doctor, pitstop.engine, pitstop.lint, pitstop.tune])
def test_every_public_name_resolves_and_unknown_names_fail_clearly(package):
    for name in package.__all__:
        assert getattr(package, name) is not None, name
        assert name in dir(package)
    with pytest.raises(AttributeError, match=rf"module '{package.__name__}' has no attribute 'no_such_name'"):
        package.no_such_name  # noqa: B018


def test_importing_the_packages_does_not_import_torch():
    code = "import sys, pitstop, pitstop.lint, pitstop.doctor, pitstop.tune, pitstop.engine; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_callable_packages_forward_to_their_functions():
    from pitstop.api import doctor
    from pitstop.tune.api import tune

    assert callable(pitstop.doctor) and callable(pitstop.tune)
    assert pitstop.doctor.doctor is pitstop.doctor and pitstop.tune.tune is pitstop.tune
    with pytest.raises(TypeError):  # arguments reach the real function, which rejects a bad call
        pitstop.tune()
    assert "doctor" in type(pitstop.doctor).__call__.__doc__ and doctor.__name__ == "doctor"
    assert tune.__name__ == "tune"


def test_no_lazy_name_is_also_a_submodule_of_its_package():
    """Importing ``pkg.name`` (the submodule) sets the package attribute ``name`` to the module,
    so a lazy export of the same name would resolve to the module or to the function
    depending on import order (``pitstop.doctor.diagnose`` did until it became ``diagnosis``)."""
    import pkgutil

    for package in (pitstop, pitstop.doctor, pitstop.engine, pitstop.lint, pitstop.tune):
        submodules = {m.name for m in pkgutil.iter_modules(package.__path__)}
        clashes = sorted(set(package.__all__) & submodules - {"doctor", "tune"})  # the callable packages
        assert not clashes, f"{package.__name__}: {clashes}"
