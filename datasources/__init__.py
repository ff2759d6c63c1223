"""DataSources: iterators over minibatches in gmat layout (one column = one example).

Sources
    :class:`MatSource` (in-memory arrays), :class:`SVMLightSource` (svmlight/libsvm text, numba
    parser), :class:`CriteoSource` (Criteo TSV with MurmurHash3 feature hashing),
    :class:`FileSource` (npz/HDF5 CSC shards, striped, read ahead in parallel).  Paths may be
    fsspec URLs (``hdfs://``, ``http(s)://``, ``memory://``...), streamed by ranges.
Stages (composable: ``src.heldout(11).shuffle(10**5, seed=0).prefetch(4)``)
    :class:`HeldOut`, :class:`Shuffle`, :class:`ToDevice`, :class:`Prefetch`.
Tools
    :func:`write_shards` / :class:`ShardWriter` (convert any source to shards),
    :func:`load_svmlight`, :func:`datasource_from_config` (TOML),
    :func:`make_criteo_like` / :func:`make_criteo_like_matrix` (synthetic Criteo-like data).
"""

from importlib.metadata import version as _dist_version

from ._base import DataSource, DataSourceOptions, MatSource, MatSourceOptions, Minibatch
from ._config import (
    SOURCE_TYPES,
    STAGE_TYPES,
    config_to_toml,
    datasource_from_config,
    datasource_to_config,
)
from ._criteo import CRITEO_FIELDS, CriteoOptions, CriteoSource, criteo_field_seeds
from ._filesource import FileSource, FileSourceOptions
from ._prefetch import Prefetch, PrefetchOptions
from ._shards import read_shard
from ._stages import (
    HeldOut,
    HeldOutOptions,
    Shuffle,
    ShuffleOptions,
    Stage,
    ToDevice,
    ToDeviceOptions,
    split_heldout,
)
from ._svmlight import SVMLightOptions, SVMLightSource, load_svmlight
from ._synthetic import CRITEO_LIKE_CARDINALITIES, make_criteo_like, make_criteo_like_matrix
from ._writer import ShardWriter, write_shards

__version__ = _dist_version("roofline")  # the installed distribution's version

__all__ = [
    "CRITEO_FIELDS",
    "CRITEO_LIKE_CARDINALITIES",
    "CriteoOptions",
    "CriteoSource",
    "DataSource",
    "DataSourceOptions",
    "FileSource",
    "FileSourceOptions",
    "HeldOut",
    "HeldOutOptions",
    "MatSource",
    "MatSourceOptions",
    "Minibatch",
    "Prefetch",
    "PrefetchOptions",
    "SOURCE_TYPES",
    "STAGE_TYPES",
    "SVMLightOptions",
    "SVMLightSource",
    "ShardWriter",
    "Shuffle",
    "ShuffleOptions",
    "Stage",
    "ToDevice",
    "ToDeviceOptions",
    "config_to_toml",
    "criteo_field_seeds",
    "datasource_from_config",
    "datasource_to_config",
    "load_svmlight",
    "make_criteo_like",
    "make_criteo_like_matrix",
    "read_shard",
    "split_heldout",
    "write_shards",
]
