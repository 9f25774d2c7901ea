"""Catalog configuration (from an Airflow connection) and its mapping to Spark settings."""
