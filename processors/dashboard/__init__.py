"""``agl-stream dashboard``: a local web page over the agl tables, running the Grafana dashboard's panel SQL.

``source.py`` finds the store (a server, the embedded engine, or the running sinks' SQL door),
``app.py`` serves the page and its JSON API behind a token, ``cli.py`` is the command, ``static/``
the page itself (plain HTML, CSS and JavaScript with hand-drawn SVG charts: no build step).
"""
