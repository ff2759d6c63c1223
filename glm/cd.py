"""Coordinate-descent steps for generalized linear models (``roofline.glm.cd``).

The building blocks of the CD solvers of :mod:`roofline.learners` (sequential SCD, TPA-SCD on
CPU threads, CoCoA+ workers, Google's pure-block SCD): one step, sweep or whole-vector map per
function, over CPU CSC *coordinate matrices* and float64 state vectors updated in place.

Conventions (scaling, loss codes, ``sigma``, ``damp``, the tracked changes ``d``): see
:mod:`roofline.glm._cd_steps`; the loss vocabulary and the regularisation scaling
(``lam_n = n * alpha``) are documented in :mod:`roofline.glm`.

Example::

    from roofline.glm import cd
    A = cd.feature_major(X)                 # the primal's coordinates: X^T as CSC
    colsq = cd.col_sqnorms(A)
    cd.primal_epoch(A, y, w, z, coords, loss="squared", l1=False, lam_n=n * alpha, colsq=colsq)
"""

from ._cd_steps import *  # noqa: F403 - the public steps, listed once in glm/_cd_steps.py
from ._cd_steps import __all__  # noqa: F401
