"""Validate OpenLineage events against the spec's JSON schemas, each facet at the version it names.

The schemas are vendored in ``tests/openlineage_schemas/`` (see its README for their origin and
licence). :func:`validate_event` checks the whole event against ``RunEvent`` and then every facet
against the schema its ``_schemaURL`` points at; a facet whose ``_schemaURL`` names an
openlineage.io schema that is not vendored fails, so a facet can never go unchecked by accident.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource

SCHEMAS = Path(__file__).parent / "openlineage_schemas"
EVENT_SCHEMA = "https://openlineage.io/spec/2-0-2/OpenLineage.json"
SPEC_SITE = "https://openlineage.io/spec/"


def _registry() -> Registry:
    resources = []
    for path in sorted(SCHEMAS.glob("*.json")):
        document = json.loads(path.read_text())
        resources.append((document["$id"], Resource.from_contents(document)))
    return Registry().with_resources(resources)


REGISTRY = _registry()


def facets_of(event: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every facet of an event, as (where it sits, the facet): run, job, dataset and output facets."""
    found = [(f"run.{k}", v) for k, v in (event["run"].get("facets") or {}).items()]
    found += [(f"job.{k}", v) for k, v in (event["job"].get("facets") or {}).items()]
    for role in ("inputs", "outputs"):
        for dataset in event.get(role) or []:
            where = f"{role}[{dataset['namespace']}:{dataset['name']}]"
            for key in ("facets", "inputFacets", "outputFacets"):
                found += [(f"{where}.{k}", v) for k, v in (dataset.get(key) or {}).items()]
    return found


def validate_event(event: dict[str, Any]) -> list[str]:
    """Validate ``event`` (a serialised RunEvent) whole and facet by facet; raise on the first fault.

    Returns where the facets sit whose ``_schemaURL`` is not an openlineage.io schema (a
    producer's own, such as Airflow's ``airflow`` run facet): those are checked only as the
    event schema checks every facet (a ``_producer`` and a ``_schemaURL``).
    """
    jsonschema.Draft202012Validator({"$ref": f"{EVENT_SCHEMA}#/$defs/RunEvent"}, registry=REGISTRY).validate(
        event
    )
    foreign = []
    for where, facet in facets_of(event):
        url = facet["_schemaURL"]
        if not url.startswith(SPEC_SITE):
            foreign.append(where)
            continue
        REGISTRY.resolver().lookup(url)  # an openlineage.io schema that is not vendored fails here
        try:
            jsonschema.Draft202012Validator({"$ref": url}, registry=REGISTRY).validate(facet)
        except jsonschema.ValidationError as error:
            raise AssertionError(f"{where} is not valid against {url}: {error.message}") from error
    return foreign


def operator_event(lineage: Any, job_name: str, namespace: str = "default") -> dict[str, Any]:
    """The COMPLETE event Airflow's OpenLineage listener sends with an operator's lineage, as JSON.

    ``lineage`` is what ``get_openlineage_facets_on_complete`` returned (inputs, outputs, run
    facets); the job is ``<dag id>.<task id>``, as the provider names a task.
    """
    from datetime import datetime, timezone

    from openlineage.client.event_v2 import Job, Run, RunEvent, RunState
    from openlineage.client.serde import Serde
    from openlineage.client.uuid import generate_new_uuid

    event = RunEvent(
        eventType=RunState.COMPLETE,
        eventTime=datetime.now(timezone.utc).isoformat(),
        run=Run(runId=str(generate_new_uuid()), facets=lineage.run_facets),
        job=Job(namespace=namespace, name=job_name),
        inputs=lineage.inputs,
        outputs=lineage.outputs,
        producer="https://github.com/apache/airflow/tree/providers-openlineage/2.20.3",
    )
    return Serde.to_dict(event)
