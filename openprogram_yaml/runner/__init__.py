"""The front ends: ``cli`` (``openprogram-run``), ``reload`` (``--watch``), ``serve``,
``testing`` (``openprogram-run test``) and ``render``.

Each is a thin adapter on ``run/``, which turns a compiled Program plus inputs into a record.
"""
