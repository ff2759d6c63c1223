"""asv benchmarks of the sparse primitives in roofline units.

``track_roofline_fraction`` reports the fraction of this machine's measured roofline (a true lower
bound on time, so at most 1) and ``track_peer_ratio`` how many times faster than scipy.sparse
(numpy for SDDMM) the primitive runs, both measured side by side in the same process.  Data: Zipf
matrices, 2^20 features x 100k examples, ~40 nnz per example (the foundation issue's setting).
"""

import numpy as np

from roofline import gmat


def _data():
    return gmat.powerlaw_csc(2**20, 100_000, 50, dtype=np.float32, random_state=0)


class Primitives:
    params = (["A*S", "A*S^T", "SDDMM"], [1, 16, 128])
    param_names = ["primitive", "k"]
    timeout = 600

    def setup_cache(self):
        S = _data()
        machine = gmat.machine_roofline()
        rows = {}
        for r in gmat.benchmark_primitives(S, (1, 16, 128), repeat=5, machine=machine):
            rows[(r.primitive, r.k)] = (r.fraction, r.peer_ratio, r.gflops, r.gbytes)
        return rows

    setup_cache.timeout = 900  # builds 2^20 x 100k data and times every primitive and peer

    def track_roofline_fraction(self, rows, primitive, k):
        return rows[(primitive, k)][0]

    track_roofline_fraction.unit = "fraction of roofline"

    def track_peer_ratio(self, rows, primitive, k):
        return rows[(primitive, k)][1]

    track_peer_ratio.unit = "x peer"

    def track_gflops(self, rows, primitive, k):
        return rows[(primitive, k)][2]

    track_gflops.unit = "gflop/s"


class PrimitiveTime:
    """Plain timings of the primitives (k = 16) for regression tracking."""

    params = ["A*S", "A*S^T", "SDDMM"]
    param_names = ["primitive"]

    def setup(self, primitive):
        self.S = gmat.powerlaw_csc(2**18, 20_000, 50, dtype=np.float32, random_state=0)
        rng = np.random.default_rng(0)
        n, m = self.S.shape
        self.A = gmat.empty((16, n), np.float32)  # cache-line aligned, as gmat allocates
        self.A[...] = rng.standard_normal((16, n))
        self.B = gmat.empty((16, m), np.float32)
        self.B[...] = rng.standard_normal((16, m))
        self.call = {
            "A*S": lambda: gmat.mult_as(self.A, self.S),
            "A*S^T": lambda: gmat.mult_ast(self.B, self.S),
            "SDDMM": lambda: gmat.sddmm(self.S, self.A, self.B),
        }[primitive]
        self.call()

    def time_primitive(self, primitive):
        self.call()


class VersusMKL:
    """Side by side with Intel MKL (``sparse_dot_mkl``, threads set to numba's count) on the Zipf
    data: ``track_mkl_ratio`` is MKL's time over gmat's (above 1: gmat faster; A*S^T against MKL
    on a transposed CSR copy, gmat on ``S`` as given and reused), ``track_c_layout_ratio`` the
    time of a C-ordered dense operand over the Fortran one.  Skipped where MKL does not load."""

    params = (["A*S", "A*S^T"], [1, 16, 128])
    param_names = ["primitive", "k"]
    timeout = 600

    def setup_cache(self):
        import glob
        import os
        import sys

        from roofline import kernels

        if "MKL_RT" not in os.environ:
            found = sorted(glob.glob(os.path.join(sys.prefix, "lib", "libmkl_rt.so*")))
            if found:
                os.environ["MKL_RT"] = found[-1]
        try:
            import sparse_dot_mkl as mkl
        except Exception:  # not installed, or MKL's loader failed
            return None
        mkl.mkl_set_num_threads(kernels.default_threads())
        S = _data()
        R = S.tocsr()
        n, m = S.shape
        rng = np.random.default_rng(0)
        rows = {}
        for k in (1, 16, 128):
            A = gmat.empty((k, n), np.float32)
            A[...] = rng.standard_normal((k, n))
            D = gmat.empty((k, m), np.float32)
            D[...] = rng.standard_normal((k, m))
            A_C = np.ascontiguousarray(A)
            D_C = np.ascontiguousarray(D)
            cases = {
                "A*S": (lambda A=A: gmat.mult_as(A, S), lambda A=A: mkl.dot_product_mkl(S.T, A.T),
                        lambda A_C=A_C: gmat.mult_as(A_C, S)),
                "A*S^T": (lambda D=D: gmat.mult_ast(D, S),
                          lambda D=D: mkl.dot_product_mkl(R, D.T),
                          lambda D_C=D_C: gmat.mult_ast(D_C, S)),
            }
            for name, (ours, peer, c_order) in cases.items():
                t = gmat.best_time(ours, 5)
                rows[(name, k)] = (gmat.best_time(peer, 5) / t, gmat.best_time(c_order, 5) / t)
        return rows

    setup_cache.timeout = 900

    def setup(self, rows, primitive, k):
        if rows is None:
            raise NotImplementedError("sparse_dot_mkl / MKL not available")

    def track_mkl_ratio(self, rows, primitive, k):
        return rows[(primitive, k)][0]

    track_mkl_ratio.unit = "x MKL"

    def track_c_layout_ratio(self, rows, primitive, k):
        return rows[(primitive, k)][1]

    track_c_layout_ratio.unit = "C / F time"
