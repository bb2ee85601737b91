"""Bundled workloads: tiny models, synthetic data and naive training scripts.

Each workload exists twice: as a *naive* script (``python -m pitstop.examples.cnn``,
``.gpt``, ``.mlp``) written the way the seeds say not to, the default target of
``pitstop doctor`` and ``pitstop tune`` (``.gpu_cnn`` and ``.gpu_transformer`` are plain
scripts that train on CUDA when present, the GPU workloads of ``benchmarks/gpu_check.sh``); and as factories (``pitstop.examples.models``,
``pitstop.examples.data``) that tests and benchmarks import. Nothing is downloaded.
"""

__all__ = ["SCRIPTS", "GPU_SCRIPTS", "DEFAULT_SCRIPT"]

#: Module name of each naive script, by workload name.
SCRIPTS = {
    "cnn": "pitstop.examples.cnn",
    "gpt": "pitstop.examples.gpt",
    "mlp": "pitstop.examples.mlp",
}
#: Plain scripts that train on CUDA when present (CPU otherwise): the GPU workloads.
GPU_SCRIPTS = {
    "gpu_cnn": "pitstop.examples.gpu_cnn",
    "gpu_transformer": "pitstop.examples.gpu_transformer",
}
DEFAULT_SCRIPT = SCRIPTS["cnn"]
