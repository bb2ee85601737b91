"""Thin, optional integrations with training frameworks (``pip install pitstop[frameworks]``).

- :mod:`pitstop.integrations.lightning`: :class:`~pitstop.integrations.lightning.PitstopDoctor`,
  a Lightning ``Callback`` that runs the doctor over a window of training steps in-process;
- :mod:`pitstop.integrations.transformers`:
  :class:`~pitstop.integrations.transformers.PitstopDoctorCallback`, the same as an HF
  ``TrainerCallback``.

Import the submodule you need: ``import pitstop`` never imports them (nor the frameworks).
"""

__all__: list[str] = []
