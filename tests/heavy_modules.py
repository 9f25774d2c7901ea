"""The modules a DAG file must not import, and which of them each kind of task may.

A DAG file is imported by the dag-processor and again by every task process: what our operators
import at module level is paid on each parse and each task's start (docs/how-it-runs.md, "What a
DAG file imports"). Names are module prefixes: ``kubernetes`` counts ``kubernetes.client`` too.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

SPARK_SUBMIT = (
    "airflow.providers.apache.spark.operators",
    "airflow.providers.apache.spark.hooks.spark_submit",
)
KUBERNETES = ("airflow.providers.cncf.kubernetes.kube_client", "kubernetes", "kubernetes_asyncio")
#: (Airflow itself imports ``airflow.providers.openlineage.plugins`` to register the provider's
#: plugin; its listener and the OpenLineage client come with the first OpenLineage work.)
OPENLINEAGE_LISTENER = ("airflow.providers.openlineage.plugins.listener", "openlineage")
PYSPARK = ("pyspark",)
PYICEBERG = ("pyiceberg",)
#: Everything heavy: none of it at parse time.
HEAVY = (*SPARK_SUBMIT, *KUBERNETES, *OPENLINEAGE_LISTENER, *PYSPARK, *PYICEBERG)


def loaded(prefixes: Iterable[str] = HEAVY, modules: Iterable[str] | None = None) -> list[str]:
    """The prefixes of which some module is imported (in this interpreter, or among ``modules``)."""
    names = set(sys.modules if modules is None else modules)
    return sorted({p for p in prefixes for name in names if name == p or name.startswith(p + ".")})
