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
    on a transposed CSR copy, gmat on ``S`` as given and reused), ``track_torch_ratio`` the same
    for torch's CPU sparse matmul (NaN where torch is not installed), ``track_c_layout_ratio`` the
    time of a C-ordered dense operand over the Fortran one, ``track_level_fraction`` gmat's
    fraction of the cache-aware roofline of the level that holds the call's working set (beside
    ``track_dram_fraction``, the DRAM roofline's).  Skipped where MKL does not load."""

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
        try:
            import torch
        except ImportError:
            torch = None
        S = _data()
        R = S.tocsr()
        machine = gmat.machine_roofline()
        if torch is not None:
            import warnings

            torch.set_num_threads(kernels.default_threads())
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch's "beta state" notice
                # S^T as CSR is S's own arrays; R is S^T's transpose, a CSR copy
                t_st = torch.sparse_csr_tensor(*(torch.from_numpy(a) for a in
                                                 (S.indptr, S.indices, S.data)),
                                               size=S.shape[::-1])
                t_r = torch.sparse_csr_tensor(*(torch.from_numpy(a) for a in
                                                (R.indptr, R.indices, R.data)), size=R.shape)
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
                        lambda A_C=A_C: gmat.mult_as(A_C, S),
                        (lambda A=A: t_st @ torch.from_numpy(A.T)) if torch else None,
                        gmat.cost_mult_as(S, k)),
                "A*S^T": (lambda D=D: gmat.mult_ast(D, S),
                          lambda D=D: mkl.dot_product_mkl(R, D.T),
                          lambda D_C=D_C: gmat.mult_ast(D_C, S),
                          (lambda D=D: t_r @ torch.from_numpy(D.T)) if torch else None,
                          gmat.cost_mult_ast(S, k)),
            }
            for name, (ours, peer, c_order, tpeer, cost) in cases.items():
                t = gmat.best_time(ours, 5)
                rows[(name, k)] = (gmat.best_time(peer, 5) / t, gmat.best_time(c_order, 5) / t,
                                   gmat.best_time(tpeer, 5) / t if tpeer else float("nan"),
                                   cost.level_fraction(t, machine),
                                   cost.fraction(t, machine))
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

    def track_torch_ratio(self, rows, primitive, k):
        return rows[(primitive, k)][2]

    track_torch_ratio.unit = "x torch"

    def track_level_fraction(self, rows, primitive, k):
        return rows[(primitive, k)][3]

    track_level_fraction.unit = "fraction of the cache level's roofline"

    def track_dram_fraction(self, rows, primitive, k):
        return rows[(primitive, k)][4]

    track_dram_fraction.unit = "fraction of the DRAM roofline"
