"""vw-hybrid stops on the certificate every GLM solver stops on (issue 31's one meaning of
``tol``): its converged fits are within ``tol`` of the optimum, with and without intercept."""

import pytest
import scipy.sparse as sp

from roofline import glm
from roofline.learners import fit_vw_hybrid
from tests.glm.test_tol_meaning import ALPHA, PROBLEMS, _check, p_star


@pytest.mark.parametrize("name", sorted(PROBLEMS))
@pytest.mark.parametrize("tol", [1e-3, 1e-6])
def test_vw_hybrid_stops_on_the_same_certificate(name, tol):
    X, y = PROBLEMS[name]
    for fi in (False, True):
        P_star, _ = p_star(name, "logistic", fi)
        Xc = sp.csc_matrix(X) if not sp.issparse(X) else X
        res = fit_vw_hybrid(Xc, y, loss="logistic", alpha=ALPHA, fit_intercept=fi, tol=tol,
                            max_iter=2000)
        assert res.converged
        P, gap = glm.duality_gap(X, y, res.coef, res.intercept, alpha=ALPHA, fit_intercept=fi)
        assert gap == pytest.approx(res.gap, rel=1e-6, abs=1e-14)
        _check(P, gap, P_star, tol, f"vw-hybrid on {name}, fit_intercept={fi}")


