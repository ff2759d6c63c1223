"""asv suite of Roofline (run with ``make asv``: ``asv run --python=same``)."""
