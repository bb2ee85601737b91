"""The project index: what every linted file defines and calls, read by a line scan before the files are linted
(:mod:`pitstop.lint.index.project`), with the call graph built from it (:mod:`pitstop.lint.index.callgraph`,
:mod:`pitstop.lint.index.chainguard`, :mod:`pitstop.lint.index.calltags`) and the facts read from bodies of
classes and functions (:mod:`pitstop.lint.index.bodyscan`)."""

__all__: list[str] = []
