"""Running a compiled ``Program``: the one seam every front end (the command line,
``--watch``, ``serve``, ``test``) sits on.

``execute`` turns a Program plus inputs into a ``RunRecord``; ``agent_runtime`` opens the
``Runtime`` an agent's runs use; ``method`` runs a method, routes its ``choices`` and offers
methods as tools; ``service`` runs on a Program that reloads; ``render`` catches what a
method would send without calling a model; ``record`` and ``version`` say
what ran, on which version of the prompts. Nothing here is imported by ``compile/``: a
Program is plain data, and this package is what acts on it.
"""
