"""Packaging: which folders install under which import names (metadata lives in pyproject.toml).

The repository keeps one top-level folder per service, but an installed agl-stream must not claim
generic names such as ``trainer`` or ``topics`` in a user's environment: every folder installs under
an ``agl_stream*`` import name. ``deploy/`` ships as data (ClickHouse migrations and saved queries,
Grafana dashboards) so a plain ``pip install`` can migrate a database.
"""

from setuptools import find_packages, setup

# repository folder -> installed import name
FOLDERS = {
    "topics": "agl_stream_topics",
    "processors": "agl_stream_processors",
    "trainer": "agl_stream_trainer",
    "ingest": "agl_stream_ingest",
    "controller": "agl_stream_controller",
    "deploy": "agl_stream_deploy",
}

packages = find_packages(include=["agl_stream", "agl_stream.*"])
package_dir = {"agl_stream": "agl_stream"}
for folder, name in FOLDERS.items():
    package_dir[name] = folder
    packages += [name, *(f"{name}.{sub}" for sub in find_packages(folder))]

setup(
    packages=packages,
    package_dir=package_dir,
    package_data={
        "agl_stream.broker": ["kafka/pom.xml", "kafka/log4j2.yaml"],  # the local Apache Kafka's build file and logging
        "agl_stream_deploy": ["clickhouse/*.md", "clickhouse/migrations/*.sql", "clickhouse/queries/*.sql",
                              "grafana/dashboards/*.json", "grafana/provisioning/**/*"],
        "agl_stream_trainer": ["*.yaml"],
        "agl_stream_processors": ["dashboard/static/*"],
    },
)
