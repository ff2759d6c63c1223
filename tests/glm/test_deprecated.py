"""The names that moved into roofline.glm still resolve at their old homes for one release, with
a DeprecationWarning naming the new home; each is the new object itself."""

import subprocess
import sys

import pytest

from roofline import comm, glm, gmat

MOVED_FROM_LEARNERS = {
    "CDOptions": glm.GLMSolverOptions,
    "CDResult": glm.GLMResult,
    "fit_glm_cd": glm.fit_glm,
    "fit_glm_cd_stream": glm.fit_glm_stream,
    "alpha_from_peer": glm.alpha_from_peer,
    "alpha_to_peer": glm.alpha_to_peer,
    "pure_blocks": glm.pure_blocks,
    "check_pure_blocks": glm.check_pure_blocks,
    "Communicator": comm.Communicator,
    "InProcessCommunicator": comm.InProcessCommunicator,
    "InProcessGroup": comm.InProcessGroup,
    "Options": gmat.Options,
    "option": gmat.option,
}


@pytest.mark.parametrize("name", sorted(MOVED_FROM_LEARNERS))
def test_learners_alias_warns_and_is_the_new_object(name):
    import roofline.learners as learners

    with pytest.warns(DeprecationWarning, match=rf"roofline\.learners\.{name} is deprecated"):
        obj = getattr(learners, name)
    assert obj is MOVED_FROM_LEARNERS[name]
    assert name not in learners.__all__


def test_learners_unknown_name_is_an_attribute_error():
    import roofline.learners as learners

    with pytest.raises(AttributeError, match="no attribute 'fit_glm_nope'"):
        learners.fit_glm_nope  # noqa: B018


@pytest.mark.parametrize("old, new", [("cd", "roofline.glm.cd"), ("glm", "roofline.glm"),
                                      ("newton", "roofline.glm.newton")])
def test_gmat_submodule_alias_warns_and_is_the_new_module(old, new):
    # a fresh interpreter: the alias warns once, when first imported
    code = (
        "import warnings, importlib\n"
        "warnings.simplefilter('error', DeprecationWarning)\n"
        "import roofline.gmat as gmat\n"
        f"assert {old!r} not in gmat.__all__\n"
        "try:\n"
        f"    from roofline.gmat import {old}\n"
        "except DeprecationWarning as e:\n"
        f"    assert {new!r} in str(e), e\n"
        "else:\n"
        "    raise SystemExit('no warning')\n"
        "warnings.simplefilter('ignore', DeprecationWarning)\n"
        f"from roofline.gmat import {old} as m\n"
        f"assert m is importlib.import_module({new!r}), m\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_import_gmat_does_not_import_glm():
    code = "import sys, roofline.gmat; assert 'roofline.glm' not in sys.modules, 'glm imported'"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
