"""The Criteo-like generator (datasources/_synthetic.py)."""

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from roofline.datasources import CriteoSource, make_criteo_like, make_criteo_like_matrix
from roofline.datasources._base import _hstack


@pytest.mark.parametrize("layout", ["hashed", "per_field"])
def test_tsv_and_matrix_variants_agree(tmp_path, layout):
    p = make_criteo_like(2500, seed=11, path=tmp_path / "c.tsv.gz")
    X, y = make_criteo_like_matrix(2500, seed=11, n_bits=14, layout=layout, hash_seed=3)
    src = CriteoSource(p, n_bits=14, layout=layout, hash_seed=3, batch_size=600)
    batches = list(src)
    Xs, ys = _hstack([b.X for b in batches]), np.concatenate([b.y for b in batches])
    assert X.shape == Xs.shape and (X != Xs).nnz == 0
    np.testing.assert_array_equal(y, ys)


def test_make_criteo_like_creates_the_parent_folders(tmp_path):
    p = tmp_path / "examples" / "data" / "criteo.tsv.gz"
    assert make_criteo_like(300, seed=4, path=p) == str(p)
    assert p.read_bytes()[:2] == b"\x1f\x8b"  # gzip, by the suffix
    assert sum(mb.n_examples for mb in CriteoSource(str(p), n_bits=8)) == 300


def test_reproducible_and_seed_dependent():
    a = make_criteo_like(500, seed=1)
    assert a == make_criteo_like(500, seed=1)
    assert a != make_criteo_like(500, seed=2)
    lines = a.decode().splitlines()
    assert len(lines) == 500 and all(len(ln.split("\t")) == 40 for ln in lines)


def test_statistics_and_planted_labels():
    X, y = make_criteo_like_matrix(20_000, seed=5, n_bits=15)
    assert set(np.unique(y)) == {0.0, 1.0}
    assert 0.1 < y.mean() < 0.5  # click-through-like rate
    nnz_per = np.diff(X.indptr)
    assert 25 < nnz_per.mean() <= 39  # some fields missing
    # Zipf: the most popular columns are far above the median popularity
    pop = np.bincount(X.indices, minlength=X.shape[0])
    pop = np.sort(pop[pop > 0])
    assert pop[-1] > 100 * np.median(pop)
    # labels are learnable from the hashed features (planted logistic model)
    tr, te = slice(0, 15_000), slice(15_000, 20_000)
    clf = LogisticRegression(C=0.1, solver="liblinear").fit(X[:, tr].T.tocsr(), y[tr])
    auc = roc_auc_score(y[te], clf.decision_function(X[:, te].T.tocsr()))
    assert auc > 0.7


def test_bad_arguments():
    with pytest.raises(ValueError, match="seed"):
        make_criteo_like(10, seed=None)
    with pytest.raises(ValueError, match="n_categories"):
        make_criteo_like(10, seed=0, n_categories=[5, 6])
    with pytest.raises(ValueError, match="missing_rate"):
        make_criteo_like(10, seed=0, missing_rate=1.0)
    with pytest.raises(ValueError, match="layout"):
        make_criteo_like_matrix(10, seed=0, layout="dense")
