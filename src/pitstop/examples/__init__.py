"""Bundled workloads: tiny models, synthetic data and naive training scripts.

Each workload exists twice: as a *naive* script (``python -m pitstop.examples.cnn``,
``.gpt``, ``.mlp``) written the way the seeds say not to, the default target of
``pitstop doctor`` and ``pitstop tune``; and as factories (``pitstop.examples.models``,
``pitstop.examples.data``) that tests and benchmarks import. Nothing is downloaded.
"""

__all__ = ["SCRIPTS", "DEFAULT_SCRIPT"]

#: Module name of each naive script, by workload name.
SCRIPTS = {
    "cnn": "pitstop.examples.cnn",
    "gpt": "pitstop.examples.gpt",
    "mlp": "pitstop.examples.mlp",
}
DEFAULT_SCRIPT = SCRIPTS["cnn"]
