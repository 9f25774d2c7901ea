"""The provider registers its connection type the way Airflow 3 reads it."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import airflow
import jsonschema

from airflow_iceberg.get_provider_info import get_provider_info


def test_provider_info_matches_airflows_own_schema():
    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)


def test_connection_type_section_matches_provider_yaml_schema():
    schema = json.loads((Path(airflow.__file__).parent / "provider.yaml.schema.json").read_text())
    connection_schema = schema["properties"]["connection-types"]["items"]
    for connection_type in get_provider_info()["connection-types"]:
        jsonschema.validate(connection_type, connection_schema)


def test_entry_point_points_at_get_provider_info():
    entry_points = importlib.metadata.entry_points(group="apache_airflow_provider")
    ours = [ep for ep in entry_points if ep.value.startswith("airflow_iceberg")]
    assert [ep.value for ep in ours] == ["airflow_iceberg.get_provider_info:get_provider_info"]
    assert ours[0].load()() == get_provider_info()


def test_providers_manager_registers_the_iceberg_catalog_form():
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    assert "airflow-iceberg" in manager.providers
    hook = manager.hooks["iceberg_catalog"]  # deprecated accessor, still the one the UI uses
    assert hook.hook_class_name == "airflow_iceberg.hooks.iceberg_catalog.IcebergCatalogHook"
    widgets = manager.connection_form_widgets
    assert "extra__iceberg_catalog__warehouse" in widgets
    assert "extra__iceberg_catalog__catalog_type" in widgets
    behaviour = manager.field_behaviours["iceberg_catalog"]
    assert "schema" in behaviour["hidden_fields"]
    assert behaviour["relabeling"]["host"] == "URI"


def test_iceberg_connection_type_does_not_clash_with_the_official_provider():
    assert get_provider_info()["connection-types"][0]["connection-type"] == "iceberg_catalog"


def test_form_fields_fit_the_airflow_3_3_ui():
    """What the UI does with each schema: masks by key name, lists enum values, marks required."""
    from airflow._shared.secrets_masker import should_hide_value_for_key

    from airflow_iceberg.get_provider_info import CONN_FIELDS

    masked = {name for name in CONN_FIELDS if should_hide_value_for_key(name)}
    assert masked == {"secret_properties"}  # not "Password goes to", whose value is a property name
    for name, spec in CONN_FIELDS.items():
        assert None not in spec["schema"].get("enum", []), f"{name} would offer a literal null"
    required = {name for name, spec in CONN_FIELDS.items() if "null" not in spec["schema"]["type"]}
    assert required == {"catalog_name", "catalog_type", "spark_version"}
    editors = {name for name, spec in CONN_FIELDS.items() if "object" in spec["schema"]["type"]}
    assert editors == {"catalog_properties", "secret_properties", "hadoop_properties"}
    assert CONN_FIELDS["cache_enabled"]["schema"]["enum"] == ["true", "false"]  # unset = Iceberg's default


def test_the_form_asks_in_the_order_a_person_fills_it_in():
    """Type, warehouse, name first; then credentials, properties and the runtime, each a section."""
    from airflow_iceberg.get_provider_info import CONN_FIELDS, CREDENTIALS, PROPERTIES, RUNTIME

    sections = [spec["schema"].get("section", "Extra Fields") for spec in CONN_FIELDS.values()]
    assert list(CONN_FIELDS)[:3] == ["catalog_type", "warehouse", "catalog_name"]
    assert list(dict.fromkeys(sections)) == ["Extra Fields", CREDENTIALS, PROPERTIES, RUNTIME]
    assert sections == sorted(sections, key=list(dict.fromkeys(sections)).index)  # no section split up
    for name in ("catalog_properties", "secret_properties", "hadoop_properties"):
        assert "Paste a whole JSON object" in CONN_FIELDS[name]["description"]


def test_standard_fields_have_one_line_labels_and_port_says_what_test_needs():
    behaviour = get_provider_info()["connection-types"][0]["ui-field-behaviour"]
    assert behaviour["relabeling"] == {"host": "URI"}  # Login, Password, Port keep Airflow's short labels
    assert "0" in behaviour["placeholders"]["port"] and "Test" in behaviour["placeholders"]["port"]


def test_an_empty_iceberg_version_means_the_newest_for_the_spark_line_and_the_form_says_which():
    """The form's default is static, the runtime's depends on Spark: empty, with the table in the help."""
    from airflow_iceberg.catalog.iceberg_runtimes import DEFAULT_ICEBERG_VERSIONS
    from airflow_iceberg.get_provider_info import CONN_FIELDS

    field = CONN_FIELDS["iceberg_version"]
    assert "default" not in field["schema"] and "null" in field["schema"]["type"]
    for line in ("3.5", "4.0", "4.1"):
        assert f"{line}: {DEFAULT_ICEBERG_VERSIONS[line]}" in field["description"]
    assert DEFAULT_ICEBERG_VERSIONS["4.0"] == "1.11.0"
