"""DataSources: iterators over minibatches in gmat layout (one column = one example)."""

from ._base import DataSource, DataSourceOptions, MatSource, MatSourceOptions, Minibatch
from ._svmlight import SVMLightOptions, SVMLightSource, load_svmlight

__all__ = [
    "DataSource",
    "DataSourceOptions",
    "MatSource",
    "MatSourceOptions",
    "Minibatch",
    "SVMLightOptions",
    "SVMLightSource",
    "load_svmlight",
]
