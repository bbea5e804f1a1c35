"""Deployment files; installed as the data package ``agl_stream_deploy`` (see setup.py).

Code reads the ClickHouse schema, saved queries and Grafana dashboards through
``importlib.resources.files("agl_stream_deploy")``, so they work from a checkout and from a wheel.
"""
