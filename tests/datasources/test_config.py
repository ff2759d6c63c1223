"""datasource_from_config (datasources/_config.py) and the example TOML files."""

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from roofline.datasources import (
    CriteoOptions,
    CriteoSource,
    FileSource,
    FileSourceOptions,
    HeldOut,
    HeldOutOptions,
    MatSource,
    MatSourceOptions,
    Prefetch,
    PrefetchOptions,
    Shuffle,
    ShuffleOptions,
    SVMLightOptions,
    SVMLightSource,
    ToDeviceOptions,
    config_to_toml,
    datasource_from_config,
    datasource_to_config,
    load_svmlight,
    make_criteo_like,
    make_criteo_like_matrix,
    write_shards,
)
from roofline.datasources._base import _hstack
from roofline.gmat import Options, loads_toml, to_toml

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _svm(path, n=3000):
    rng = np.random.default_rng(0)
    lines = [f"{rng.integers(0, 2)} " + " ".join(
        f"{i}:{rng.random():.4f}" for i in np.unique(rng.integers(1, 1001, 10)))
        for _ in range(n)]
    import gzip

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))


def test_example_svmlight(tmp_path):
    shutil.copy(EXAMPLES / "datasource_svmlight.toml", tmp_path)
    _svm(tmp_path / "data" / "train.svm.gz")
    src = datasource_from_config(tmp_path / "datasource_svmlight.toml")
    assert isinstance(src, Prefetch) and isinstance(src.source, Shuffle)
    assert isinstance(src.source.source, HeldOut)
    inner = src.source.source.source
    assert isinstance(inner, SVMLightSource) and inner.n_features == 1000
    assert inner.opts.batch_size == 1024 and inner.opts.zero_based is False
    X, y = load_svmlight(tmp_path / "data" / "train.svm.gz", n_features=1000, zero_based=False)
    got = list(src)
    n_train = sum(mb.n_examples for mb in got)
    # 3 minibatches of 1024 (the last partial): none is the 11th, so all are training data
    assert n_train == 3000
    Xs = _hstack([mb.X for mb in got])
    # same multiset of examples as the file (shuffled): compare column sums over features
    np.testing.assert_allclose(np.sort(np.asarray(Xs.sum(axis=0)).ravel()),
                               np.sort(np.asarray(X.sum(axis=0)).ravel()), rtol=1e-6)
    src.close()


def test_example_criteo(tmp_path):
    shutil.copy(EXAMPLES / "datasource_criteo.toml", tmp_path)
    (tmp_path / "data").mkdir()
    make_criteo_like(2000, seed=0, path=tmp_path / "data" / "criteo.tsv.gz")
    src = datasource_from_config(tmp_path / "datasource_criteo.toml")
    assert isinstance(src.source, CriteoSource) and src.n_features == 39 << 16
    (mb,) = list(src)
    X, y = make_criteo_like_matrix(2000, seed=0, n_bits=16, layout="per_field")
    assert (mb.X != X).nnz == 0 and np.array_equal(mb.y, y)


def test_example_criteo_as_its_comment_says(tmp_path, monkeypatch):
    """The generation command in the example's comment, run from the repository root (here a
    copy of its examples/ folder): make_criteo_like creates the missing data/ folder."""
    text = (EXAMPLES / "datasource_criteo.toml").read_text()
    call = next(line.lstrip("# ").strip() for line in text.splitlines()
                if "make_criteo_like(" in line)
    (tmp_path / "examples").mkdir()
    shutil.copy(EXAMPLES / "datasource_criteo.toml", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    assert not (tmp_path / "examples" / "data").exists()
    exec(call, {"make_criteo_like": make_criteo_like})  # the example's own line
    src = datasource_from_config(tmp_path / "examples" / "datasource_criteo.toml")
    assert isinstance(src.source, CriteoSource)
    assert sum(mb.n_examples for mb in src) == 100_000
    src.close()


def test_guide_heldout_parts_are_accepted():
    """Every ``part="..."`` the datasources guide shows is a value HeldOut and its config
    accept."""
    guide = (EXAMPLES.parent / "docs" / "guide" / "datasources.rst").read_text()
    parts = re.findall(r'part\s*=\s*"([^"]*)"', guide)
    assert parts
    for part in parts:
        HeldOutOptions(part=part)  # raises on a value the config refuses


def test_example_shards(tmp_path, data):
    X, y, w = data
    shutil.copy(EXAMPLES / "datasource_shards.toml", tmp_path)
    write_shards(MatSource(X, y, w), "part-{i:05d}.npz",
                 dirs=[tmp_path / "data" / "disk0", tmp_path / "data" / "disk1"],
                 examples_per_shard=200)
    src = datasource_from_config(tmp_path / "datasource_shards.toml")
    assert isinstance(src.source, FileSource) and src.n_examples == X.shape[1]
    (mb,) = list(src)
    np.testing.assert_array_equal(np.sort(mb.w), np.sort(w))


def _write(tmp_path, text):
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "text,match",
    [
        ('[source]\ntype = "svmlight"\npaths = ["a.svm"]\nn_featurs = 3\n',
         r"c\.toml: \[source\]: unknown key 'n_featurs'"),
        ('[source]\ntype = "svmlight"\npaths = ["a.svm"]\nn_features = 3\nzero_based = false'
         '\nbatch_size = "big"\n',
         r"c\.toml: \[source\]: option 'batch_size' must be of type int, got 'big'"),
        ('[source]\ntype = "svmlight"\npaths = ["a.svm"]\nzero_based = "maybe"\n',
         r"c\.toml: \[source\]: option 'zero_based' must be one of \[True, False, 'auto'\], "
         r"got 'maybe'"),
        ('[source]\ntype = "svmlight"\npaths = ["a.svm"]\nn_features = -3\nzero_based = true\n',
         r"c\.toml: \[source\]: option 'n_features' must be >= 0, got -3"),
        ('[source]\ntype = "parquet"\n', r"c\.toml: \[source\] key 'type' must be one of"),
        ('[source]\ntype = "svmlight"\n', r"c\.toml: \[source\]: missing required key.*paths"),
        ('[sourc]\ntype = "svmlight"\n', r"c\.toml: unknown top-level key.*'sourc'"),
        ('[source]\ntype = "svmlight"\npaths = ["a.svm"]\nn_features = 3\nzero_based = false\n'
         '[[stages]]\ntype = "shuffle"\nbuffer_size = 10\n',
         r"c\.toml: \[\[stages\]\] #1: option 'seed' must be an integer"),
        ('[source]\ntype = "svmlight"\npaths = ["a.svm"]\nn_features = 3\nzero_based = false\n'
         '[[stages]]\ntype = "prefetch"\ndepth = 2\n[[stages]]\ntype = "prefetch"\ndeep = 2\n',
         r"c\.toml: \[\[stages\]\] #2: unknown key 'deep'"),
        ('[source]\ntype = "svmlight"\npaths = ["a.svm"]\nn_features = 3\nzero_based = false\n'
         '[[stages]]\ntype = "prefetch"\ndepth = true\n',
         r"c\.toml: \[\[stages\]\] #1: option 'depth' must be of type int, got True"),
        ('[source]\ntype = "svmlight"\npaths = [5]\nn_features = 3\nzero_based = false\n',
         r"c\.toml: \[source\]: bad value: paths"),
        ('[source\n', r"c\.toml: invalid TOML"),
    ],
)
def test_errors_name_file_and_key(tmp_path, text, match):
    (tmp_path / "a.svm").write_text("1 1:1\n")
    with pytest.raises(ValueError, match=match):
        datasource_from_config(_write(tmp_path, text))


def test_dict_config_and_missing_file(tmp_path):
    (tmp_path / "a.svm").write_text("1 1:1\n0 2:2\n")
    src = datasource_from_config(
        {"source": {"type": "svmlight", "paths": ["a.svm"], "batch_size": 1}},
        base_dir=str(tmp_path),
    )
    assert [mb.n_examples for mb in src] == [1, 1] and src.n_features == 2
    with pytest.raises(ValueError, match="config: unknown top-level"):
        datasource_from_config({"source": {}, "extra": 1})
    with pytest.raises(ValueError, match=r"nope\.toml: config file not found"):
        datasource_from_config(tmp_path / "nope.toml")
    with pytest.raises(ValueError, match=r"\[source\]: cannot build"):
        datasource_from_config({"source": {"type": "svmlight", "paths": ["missing.svm"]}},
                               base_dir=str(tmp_path))


def test_round_trip_through_toml(tmp_path, data):
    X, y, w = data
    shutil.copy(EXAMPLES / "datasource_svmlight.toml", tmp_path)
    _svm(tmp_path / "data" / "train.svm.gz")
    a = datasource_from_config(tmp_path / "datasource_svmlight.toml")
    cfg = datasource_to_config(a)
    assert [st["type"] for st in cfg["stages"]] == ["heldout", "shuffle", "prefetch"]
    assert cfg["source"]["n_features"] == 1000 and cfg["source"]["zero_based"] is False
    text = config_to_toml(cfg)
    (tmp_path / "rt.toml").write_text(text)
    b = datasource_from_config(tmp_path / "rt.toml")
    assert datasource_to_config(b) == cfg
    for ma, mb in zip(a, b, strict=True):
        assert (ma.X != mb.X).nnz == 0 and np.array_equal(ma.y, mb.y)
    # shards + compression=None survive too
    write_shards(MatSource(X, y, w), str(tmp_path / "sh" / "p{i}.h5"), examples_per_shard=300)
    src = FileSource(str(tmp_path / "sh" / "p{i}.h5"), order="random", seed=3).shuffle(
        100, seed=1)
    c = datasource_from_config(datasource_to_config(src))
    assert datasource_to_config(c) == datasource_to_config(src)
    s2 = SVMLightSource(tmp_path / "data" / "train.svm.gz", compression=None, n_features=1000,
                        zero_based=False)
    assert datasource_to_config(s2)["source"]["compression"] == "none"
    with pytest.raises(TypeError, match="MatSource cannot be written"):
        datasource_to_config(MatSource(X, y))


@pytest.mark.parametrize("cls,kw", [
    (SVMLightOptions, {"n_features": 10, "zero_based": False, "dtype": "float64"}),
    (CriteoOptions, {"n_bits": 12, "layout": "per_field", "hash_seed": 3}),
    (FileSourceOptions, {"pattern": "p{i}.npz", "dirs": ["a", "b"], "order": "random",
                         "seed": 1}),
    (MatSourceOptions, {"batch_size": 7}), (HeldOutOptions, {"every": 3, "part": "test"}),
    (ShuffleOptions, {"buffer_size": 9, "seed": 2}), (ToDeviceOptions, {"device": "cpu"}),
    (PrefetchOptions, {"depth": 5}),
])
def test_datasource_options_are_gmat_options(cls, kw):
    o = cls(**kw)
    assert isinstance(o, Options)
    assert cls.from_toml(o.to_toml("t"), "t") == o
    assert cls.from_dict(o.to_dict()) == o
    lines = str(o).splitlines()
    assert lines[0] == cls.__name__
    for k, v in kw.items():
        assert next(ln for ln in lines if ln.split()[0] == k).split()[2] == repr(v).split()[0]
    with pytest.raises(ValueError, match=r"here: unknown key 'nope'"):
        cls.from_dict({"nope": 1}, "here")


def test_option_values_normalised_and_checked():
    assert SVMLightOptions(dtype=np.float64).dtype == "float64"
    assert CriteoOptions(n_bits=np.int64(5)).n_bits == 5
    with pytest.raises(ValueError, match="option 'compression' must be one of"):
        SVMLightOptions(compression="zip")
    assert SVMLightOptions(compression=None).compression is None
    with pytest.raises(ValueError, match="option 'order' = 'random' needs an integer seed"):
        FileSourceOptions(pattern="p{i}.npz", order="random")
    with pytest.raises(ValueError, match=r"option 'pattern': pattern must be a string"):
        FileSourceOptions(pattern="p.npz")
    # a wrong type is a TypeError, and a ValueError like every other bad option value
    for exc in (TypeError, ValueError):
        with pytest.raises(exc, match="option 'depth' must be of type int"):
            PrefetchOptions(depth=2.0)


def test_config_to_toml_is_the_one_writer():
    cfg = {"source": {"type": "files", "pattern": "p{i}.npz", "dirs": ["d 0", 'd"1'],
                      "order": "random", "seed": 4},
           "stages": [{"type": "shuffle", "buffer_size": 10, "seed": 0},
                      {"type": "prefetch", "depth": 3}]}
    text = config_to_toml(cfg)
    assert text == to_toml(cfg)
    assert loads_toml(text) == cfg
    assert config_to_toml({"source": {"type": "svmlight", "paths": ["a"]}, "stages": []}) == (
        '[source]\ntype = "svmlight"\npaths = ["a"]\n')
