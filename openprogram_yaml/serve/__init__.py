"""``openprogram-run serve``: agents behind ``aiohttp.web``.

``app`` holds the state and the application (``create_app``) with its middlewares and the
listening ``Server``; ``guard`` what a request must show to be served; ``connections`` the
connection cap and header deadlines; ``served_run`` the one way a route starts a run;
``runs`` the routes of runs, questions, reload notices and history; ``openai_api`` the
OpenAI-compatible endpoint; ``web`` the web page; ``sse`` server-sent events; ``history``
the runs kept in memory; ``driver`` the command's loop. Each name has one import path:
import from the module that defines it.
"""
