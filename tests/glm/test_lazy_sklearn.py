"""``import roofline.glm`` imports no scikit-learn (about 1.2 s of a command's start): the
solvers' ConvergenceWarning is scikit-learn's, imported when a solver warns."""

import subprocess
import sys
import warnings

import numpy as np
import pytest


def test_import_glm_does_not_import_sklearn():
    code = "import sys, roofline.glm; print('sklearn' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.split() == ["False"]


def test_not_converged_is_still_sklearns_convergence_warning():
    from sklearn.exceptions import ConvergenceWarning

    from roofline.glm import fit_glm, fit_multinomial

    rng = np.random.default_rng(0)
    X = rng.standard_normal((5, 200))
    y = np.where(X[0] + 0.3 * rng.standard_normal(200) > 0, 1.0, -1.0)
    with pytest.warns(ConvergenceWarning, match="without converging"):
        fit_glm(X, y, loss="logistic", alpha=1e-4, solver="scd", max_iter=1, tol=1e-12)
    labels = rng.integers(0, 3, 200)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fit_multinomial(X, labels, alpha=1e-4, max_iter=1, tol=1e-14)
    assert any(issubclass(w.category, ConvergenceWarning) for w in seen)
