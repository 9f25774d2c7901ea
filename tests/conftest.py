"""Suite-wide fixtures: the real catalog servers (Hive Metastore, PostgreSQL, SeaweedFS REST, Nessie)."""

pytest_plugins = ["tests.servers.fixtures"]
