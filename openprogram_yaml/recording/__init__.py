"""Record real model turns as readable files, and replay them offline.

Record and replay are not providers: they wrap whatever runtimes a selector picks.
``format`` holds the canonical request, redaction and the files; ``record`` the selector
wrapper that writes each successful turn; ``replay`` the ``replay`` runtime (the one part
registered as a runtime) and the selector that answers every model from a folder.
"""
