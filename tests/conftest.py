"""Suite-wide fixtures: the real catalog servers (Hive Metastore, PostgreSQL, SeaweedFS REST)."""

pytest_plugins = ["tests.servers.fixtures"]
