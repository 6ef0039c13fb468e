"""``*Spec`` models → a ``Program``: plain, frozen data a run needs and nothing that runs.

One ``Build`` (``build``) records every read a compile makes, so the in-process recompile and
the disk ``cache`` know when a Program is still current. ``project`` and ``agent`` compile
files; ``templates`` (Jinja2's one home), ``schemas``, ``tools``, ``toolsets`` and
``prompt_tests`` compile the parts of an agent; ``program`` holds the result. Every config
error surfaces here or earlier, at its position. Running a Program is ``run/``'s job.
"""
