"""DataSources: iterators over minibatches in gmat layout (one column = one example)."""

from ._base import DataSource, DataSourceOptions, MatSource, Minibatch

__all__ = ["DataSource", "DataSourceOptions", "MatSource", "Minibatch"]
