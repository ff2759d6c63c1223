"""TOML experiment configs shared by the CLI and plot tests (tests import helpers, never
each other)."""

# a tiny ADAGrad run (tests/learners/test_cli.py, test_plot.py)
TINY = """
[data]
type = "criteo_like"
n_examples = 4000
n_bits = 12
seed = 3
heldout_fraction = 0.25
batch_size = 250

[model]
loss = "logistic"

[optimizer]
type = "adagrad"
lr = 0.1

[[mixins]]
type = "l2"
reg2weight = 1e-6

[[mixins]]
type = "metrics"

[learner]
n_passes = 2
eval_every = 4
"""

# a tiny CD solver run (tests/learners/test_cli_solver.py, test_plot.py)
CD_CONFIG = """
[data]
type = "criteo_like"
n_examples = 3000
n_bits = 10
seed = 3
heldout_fraction = 0.2
dtype = "float64"

[model]
loss = "logistic"
dtype = "float64"

[solver]
alpha = 1e-2
seed = 5
solver = "cocoa"
n_workers = 3
tol = 1e-4
max_iter = 200
dual = true
"""
