"""``openprogram-run serve``: agents behind ``aiohttp.web``.

``app`` holds the state and the application (``create_app``) with its middlewares and the
listening ``Server``; ``guard`` what a request must show to be served; ``connections`` the
connection cap and header deadlines; ``runs`` the routes of runs, questions, reload notices
and history; ``sse`` server-sent events; ``history`` the runs kept in memory; ``driver`` the
command's loop. Each name has one import path: import from the module that defines it.
"""
