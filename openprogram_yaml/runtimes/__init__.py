"""Model runtimes: the protocol every runtime implements, the registry, and selection.

Not to be confused with ``runtime/`` (singular), the ``Runtime`` class that wraps any of
these in retries, validation and ``choices``. Here: ``protocol`` (what a runtime is and the
data of one turn: ``RuntimeResult``, ``RuntimeDelta``, ``Message`` …), ``registry`` (which
runtimes exist: built-in, registered, entry-point plugins), ``select`` (which runtime serves
a model ref: rules, providers, ``supports()``), ``failures`` (how a failed turn is
classified) and ``wrapping`` (runtimes placed in front of others). Built-in runtimes live in
``providers/``; this package reaches them through the registry, never by import.
"""
