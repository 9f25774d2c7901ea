"""``airflow dags test`` for several DAGs, one after the other, in one Airflow process.

Each ``airflow`` CLI start costs seconds (imports, providers, configuration) before the run; the
runs themselves are the CLI's own: this calls its ``dag_test`` command for each DAG in turn.
Used where one test needs several DAG runs with the same connections::

    python -m tests.integration.dag_batch 2024-01-02 dag_a 'dag_b:{"some": "run conf"}'

A DAG id may be followed by ``:`` and its run's conf as JSON (``dags test --conf``). Every DAG
runs even when an earlier one failed; the exit code is 1 if any failed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str]) -> int:
    import pendulum
    from airflow.cli.commands.dag_command import dag_test

    logical_date, *dag_ids = argv
    failed = []
    for item in dag_ids:
        dag_id, _, conf = item.partition(":")
        args = argparse.Namespace(
            dag_id=dag_id,
            logical_date=pendulum.parse(logical_date),
            conf=conf or None,
            use_executor=False,
            mark_success_pattern=None,
            bundle_name=None,
            dagfile_path=None,
            show_dagrun=False,
            imgcat_dagrun=False,
            save_dagrun=None,
            verbose=False,
        )
        try:
            dag_test(args)
        except SystemExit:  # "DagRun failed"
            failed.append(dag_id)
        print(f"dag-batch: {dag_id} {'failed' if dag_id in failed else 'success'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
