"""Second-order steps for smooth generalized linear models (``roofline.glm.newton``).

The building blocks of the trust-region Newton solver of :mod:`roofline.learners`: the loss
derivatives at the margins, the fused Hessian-vector product ``X D X^T s`` (one pass over the
examples) and the Hessian's diagonal (the preconditioner).  Conventions:
:mod:`roofline.glm._newton_steps`.

Example::

    from roofline.glm import newton
    L, g_b, h_b, dl, D = newton.loss_derivs(z, y, loss)
    Hs, Hs_b = newton.hess_vec(X, D, s, s_b)
"""

from ._newton_steps import *  # noqa: F403 - the public steps, listed once in glm/_newton_steps.py
from ._newton_steps import __all__  # noqa: F401
