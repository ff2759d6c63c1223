"""Second-order steps for smooth generalized linear models (``roofline.gmat.newton``).

The building blocks of the trust-region Newton solver of :mod:`roofline.learners`: the loss
derivatives at the margins, the fused Hessian-vector product ``X D X^T s`` (one pass over the
examples) and the Hessian's diagonal (the preconditioner).  Conventions:
:mod:`roofline.gmat._newton`.

Example::

    from roofline.gmat import newton
    L, g_b, h_b, dl, D = newton.loss_derivs(z, y, loss)
    Hs, Hs_b = newton.hess_vec(X, D, s, s_b)
"""

from ._newton import *  # noqa: F403 - the public steps, listed once in gmat/_newton.py
from ._newton import __all__  # noqa: F401
