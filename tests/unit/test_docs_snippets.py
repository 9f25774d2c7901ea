"""Every Python, bash and JSON snippet of README.md and docs/ comes from a tested file or is run.

A snippet passes when its lines appear, in order, in an example DAG under ``dags/`` or a file
under ``tests/`` (both tested), or when one of the checks below runs it for real, without Spark:

- Python: executed as a DAG file would be, with the real operators, inside a DAG when it is a
  fragment (names it uses but does not define stand for a table name); every operator it builds
  must give a valid job spec, as ``execute()`` would check before Spark starts.
- JSON: a connection is read by the hook's own ``config_from_connection``; a connection extra
  by ``config_from_fields``; a documented result (an XCom, an asset event) has its keys checked
  against real results by the end-to-end test named in :data:`RESULT_EXAMPLES`.
- bash: each command is run or parsed by the real tool: ``AIRFLOW_CONN_*`` values become Airflow
  connections, ``airflow connections add`` goes through Airflow's own CLI parser, ``make`` names
  a Makefile target, ``pip install`` a path and extras that exist, ``source`` runs the script.

A snippet that is neither fails with its page and line.
"""

from __future__ import annotations

import ast
import builtins
import json
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from airflow_iceberg.catalog.config import config_from_connection, config_from_fields
from tests.docs_snippets import REPO, TESTED_LANGUAGES, Snippet, is_json, snippets

#: Documented results, found by a key only they show, and the test that checks their keys (or all of them).
RESULT_EXAMPLES = {
    '"status": "success"': "tests/integration/test_example_dag.py::test_documented_xcom_keys",
    '"commit_id":': "tests/integration/test_assets_and_lineage.py::test_documented_asset_event_keys",
    '"iceberg_daily_orders.': "tests/jobs/test_openlineage_dag.py::test_the_documented_events_are_this_runs",
}

TESTED = [s for s in snippets() if s.language in TESTED_LANGUAGES]


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _source_files() -> dict[Path, list[str]]:
    files = [p for folder in ("dags", "tests") for p in (REPO / folder).rglob("*.py")]
    return {p: _lines(p.read_text()) for p in files}


SOURCES = _source_files()


def source_file_of(snippet: Snippet) -> Path | None:
    """The file under dags/ or tests/ whose lines include the snippet's, in order, if any."""
    want = _lines(snippet.text)
    for path, lines in SOURCES.items():
        if path.name == Path(__file__).name:
            continue
        for start in range(len(lines) - len(want) + 1):
            if lines[start : start + len(want)] == want:
                return path
    return None


# ---------------------------------------------------------------------- Python


def free_names(code: str) -> set[str]:
    """Names the code reads but neither defines, imports nor gets from builtins."""
    tree = ast.parse(code)
    defined, used = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else defined).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined.add(node.name)
    return used - defined - set(dir(builtins))


#: What a free name stands for, by the argument it is given to (``source_query=CHANGES``).
PLACEHOLDERS = {"source_query": "SELECT 1 AS order_id", "branch": "audit_20240102"}
#: The template context a fragment is rendered with, as Airflow would for a run on 2024-01-02.
class _AssetEvent:
    extra = {"snapshot_id": 1}


CONTEXT = {
    "ds": "2024-01-02",
    "ds_nodash": "20240102",
    "params": {},
    "triggering_asset_events": {"iceberg://hadoop/db/events": [_AssetEvent()]},
}


class _TaskInstance:
    """``ti`` for rendering: a first try, whose every upstream result holds snapshot id 1."""

    dag_id, task_id, run_id, try_number, map_index = "docs", "task", "manual__2024-01-02", 1, -1

    def xcom_pull(self, task_ids: str, **kwargs: Any) -> dict[str, int]:
        return {"snapshot_id": 1, "audited_snapshot_id": 1}


def placeholders(tree: ast.AST) -> dict[str, str]:
    """A value for each free name, from the argument that takes it (a table name by default)."""
    values = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and isinstance(node.value, ast.Name):
            values[node.value.id] = PLACEHOLDERS.get(node.arg or "", f"db.{node.value.id.lower()}")
    return values


class _NameEveryDag(ast.NodeTransformer):
    """``with DAG(...):`` becomes ``with DAG(...) as _dag_<n>:``, so the test can find its tasks."""

    def visit_With(self, node: ast.With) -> ast.With:
        for number, item in enumerate(node.items):
            call = item.context_expr
            is_dag = isinstance(call, ast.Call) and getattr(call.func, "id", "") == "DAG"
            if is_dag and not item.optional_vars:
                item.optional_vars = ast.Name(id=f"_dag_{node.lineno}_{number}", ctx=ast.Store())
        self.generic_visit(node)
        return node


def run_python(snippet: Snippet) -> str:
    """Execute the snippet as a DAG file; return what it built."""
    from airflow.sdk import DAG, BaseOperator

    import airflow_iceberg.operators as operators

    tree = ast.fix_missing_locations(_NameEveryDag().visit(ast.parse(snippet.text)))
    namespace: dict[str, Any] = {name: getattr(operators, name) for name in operators.__all__}
    free = free_names(snippet.text) - set(namespace)
    namespace.update({name: value for name, value in placeholders(tree).items() if name in free})
    code = compile(tree, snippet.where, "exec")
    if "with DAG(" in snippet.text:
        exec(code, namespace)
        built = [task for dag in namespace.values() if isinstance(dag, DAG) for task in dag.tasks]
    else:
        with DAG(f"docs_{Path(snippet.page).stem}_{snippet.line}", schedule=None) as dag:
            exec(code, namespace)
        built = list(dag.tasks)
    watchers = [w for v in namespace.values() for w in getattr(v, "watchers", None) or ()]
    built += [watcher.trigger for watcher in watchers]
    assert built, f"{snippet.where}: the snippet builds no operator, sensor or trigger"
    for task in built:
        if isinstance(task, BaseOperator) and hasattr(task, "build_spec"):
            task.render_template_fields(context={**CONTEXT, "ti": _TaskInstance()})
            task.build_spec().validated()  # what execute() checks before Spark starts
    return ", ".join(sorted({type(task).__name__ for task in built}))


# ---------------------------------------------------------------------- JSON and connections


def check_connection(conn_id: str, value: str) -> str:
    """An ``AIRFLOW_CONN_*`` value (JSON or URI) read the way Airflow and the hook read it."""
    from airflow.models.connection import Connection

    conn = Connection.from_json(value, conn_id=conn_id) if value.lstrip().startswith("{") else Connection(
        conn_id=conn_id, uri=value
    )
    if conn.conn_type == "iceberg_catalog":
        config = config_from_connection(conn)
        return f"{config.kind} catalog {config.catalog_name!r}"
    from airflow.providers_manager import ProvidersManager

    assert conn.conn_type in ProvidersManager().hooks, f"unknown connection type {conn.conn_type!r}"
    return f"{conn.conn_type} connection"


def run_json(snippet: Snippet) -> str:
    for marker, test in RESULT_EXAMPLES.items():
        if marker in snippet.text:
            path, name = test.split("::")
            assert f"def {name}(" in (REPO / path).read_text(), f"{test} is gone"
            return f"result example, keys checked by {test}"
    value = json.loads(snippet.text)
    if "conn_type" in value:
        return check_connection("docs_snippet", snippet.text)
    config = config_from_fields(value)
    return f"connection extra: {config.kind} catalog {config.catalog_name!r}"


# ---------------------------------------------------------------------- bash


def commands(text: str) -> list[str]:
    """The snippet's commands: continuation lines joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    found, current = [], ""
    for line in joined.splitlines():
        if current:  # inside a quoted multi-line value
            current += "\n" + line
        elif line.strip() and not line.lstrip().startswith("#"):
            current = line
        else:
            continue
        try:
            shlex.split(current, comments=True)
        except ValueError:  # an open quote: the value goes on
            continue
        found.extend(part.strip() for part in re.split(r"\s&&\s", current))
        current = ""
    assert not current, f"unterminated command: {current!r}"
    return found


def makefile_targets() -> set[str]:
    return set(re.findall(r"^([a-z0-9-]+):", (REPO / "Makefile").read_text(), re.M))


def pyproject_extras() -> set[str]:
    import tomllib

    return set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def check_pip_install(words: list[str]) -> str:
    for target in words[2:]:
        path, _, extras = target.partition("[")
        if "*" in path:  # dist/airflow_iceberg-*.whl: what make wheel writes
            assert path.startswith("dist/") and path.endswith(".whl"), target
            continue
        assert (REPO / path / "pyproject.toml").exists(), f"pip install {target}: not this checkout"
        unknown = set(filter(None, extras.rstrip("]").split(","))) - pyproject_extras()
        assert not unknown, f"pip install {target}: no extra {unknown}"
    return "pip install of this checkout"


def check_airflow_connections_add(words: list[str]) -> str:
    """Parse with Airflow's own CLI parser and build the Connection as ``connections add`` does."""
    from airflow.cli.cli_parser import get_parser

    args = get_parser().parse_args(words[1:])
    fields = {
        "conn_type": args.conn_type,
        "host": args.conn_host,
        "login": args.conn_login,
        "password": args.conn_password,
        "port": args.conn_port,
        "extra": json.loads(args.conn_extra) if args.conn_extra else None,
    }
    return check_connection(args.conn_id, json.dumps({k: v for k, v in fields.items() if v is not None}))


def check_command(command: str) -> str:
    words = shlex.split(command, comments=True)
    assignment = re.match(r"^(?:export\s+)?(AIRFLOW_CONN_[A-Z0-9_]+)=(.*)$", command, re.S)
    if assignment:
        return check_connection(assignment.group(1).removeprefix("AIRFLOW_CONN_").lower(), shlex.split(
            assignment.group(2)
        )[0])
    for prefix, check in PREFIX_CHECKS.items():
        if tuple(words[: len(prefix)]) == prefix:
            return check(words)
    if "source" in words:  # SPARK_LINE=4.0 source scripts/local_env.sh: run it
        run_in_checkout(command)
        return "sourced"
    if "pytest" in words:  # collect what it names, with the interpreter it names
        run_in_checkout(f"{command.split('#')[0]} --collect-only -q")
        return "pytest collects"
    if words[0] in ("spark-submit", "$SPARK_HOME/sbin/start-connect-server.sh"):
        return check_connect_server_command(words)
    raise AssertionError(f"no check runs {command!r}: take it from a tested file, or add a check")


def check_make(words: list[str]) -> str:
    assert words[1] in makefile_targets(), f"no Makefile target {words[1]!r}"
    return f"make {words[1]}"


def check_example_dag_test(words: list[str]) -> str:
    assert (REPO / "dags" / f"{words[3]}.py").exists(), f"no example DAG {words[3]!r}"
    return f"example DAG {words[3]}"


def check_benchmark_command(words: list[str]) -> str:
    """``python -m benchmarks.run ...``: its own argument parser takes it; the comparisons exist."""
    from benchmarks.run import parse_args

    args = parse_args(words[3:])
    known = {int(number) for number in parse_args([]).only.split(",")}
    assert {int(number) for number in args.only.split(",")} <= known, f"no comparison in {args.only!r}"
    return "benchmarks.run arguments"


def run_in_checkout(command: str) -> None:
    """Run a documented command in the checkout's shell (its environment: scripts/local_env.sh)."""
    script = f"set -e; source scripts/local_env.sh; {command}"
    completed = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, (completed.stdout + completed.stderr)[-2000:]


def check_docker_compose(words: list[str]) -> str:
    """The compose file exists and has the service named; a command run in it is checked too."""
    import yaml

    compose = yaml.safe_load((REPO / words[words.index("-f") + 1]).read_text())
    if "exec" in words:
        service = words[words.index("exec") + 1]
        assert service in compose["services"], f"no service {service!r}"
        return check_command(shlex.join(words[words.index("exec") + 2 :]))
    return "compose file " + words[words.index("-f") + 1]


def check_connect_server_command(words: list[str]) -> str:
    """A Spark Connect server's start: the provider's own extensions, and a runtime that exists."""
    from airflow_iceberg.catalog.spark_settings import ICEBERG_EXTENSIONS, runtime_coordinate

    confs = dict(words[i + 1].split("=", 1) for i, word in enumerate(words) if word == "--conf")
    assert confs["spark.sql.extensions"] == ICEBERG_EXTENSIONS
    from tests.servers.spark_connect import SERVER_SPARK_LINE, SERVER_SPARK_VENV  # the docs' server

    runtime = runtime_coordinate(config_from_fields({"spark_version": SERVER_SPARK_LINE, "warehouse": "/wh"}))
    if "--packages" in words:
        assert runtime in words[words.index("--packages") + 1].split(","), runtime
    if "--jars" in words:
        artifact = runtime.split(":", 1)[1].replace(":", "-")  # iceberg-spark-runtime-4.1_2.13-1.12.0
        assert words[words.index("--jars") + 1] == f"{artifact}.jar"
        jar = words[-1].rsplit("/", 1)[-1]
        assert list(SERVER_SPARK_VENV.glob(f"lib/python3*/site-packages/pyspark/jars/{jar}")), jar
    return "Spark Connect server start"


def run_bash(snippet: Snippet) -> str:
    return "; ".join(check_command(command) for command in commands(snippet.text))


RUNNERS = {"python": run_python, "json": run_json, "bash": run_bash}
#: Commands checked by their first words: the check, given all the words.
PREFIX_CHECKS = {
    ("make",): check_make,
    ("pip", "install"): check_pip_install,
    ("airflow", "connections", "add"): check_airflow_connections_add,
    ("docker", "compose"): check_docker_compose,
    ("airflow", "dags", "test"): check_example_dag_test,
    ("python", "-m", "benchmarks.run"): check_benchmark_command,
}


@pytest.mark.parametrize("snippet", TESTED, ids=[s.where for s in TESTED])
def test_every_snippet_comes_from_a_tested_file_or_is_run(snippet: Snippet):
    if source_file_of(snippet) is not None:
        return
    try:
        RUNNERS[snippet.language](snippet)
    except Exception as error:
        raise AssertionError(
            f"{snippet.where}: this {snippet.language} snippet is neither in a tested file under dags/ "
            f"or tests/ nor runs: {type(error).__name__}: {error}"
        ) from error


def test_the_snippet_check_finds_every_kind_and_fails_a_broken_one():
    """The check can fail: a snippet with a typo in a connection field is caught."""
    assert {s.language for s in TESTED} == set(TESTED_LANGUAGES)
    assert any(is_json(s) for s in TESTED)
    broken = Snippet("docs/x.md", 1, "json", '{"catalog_type": "hadop", "warehouse": "/wh"}')
    with pytest.raises(Exception, match="'hadop' is not one of"):
        run_json(broken)
    with pytest.raises(AssertionError, match="no check runs"):
        check_command("kubectl apply -f spark.yaml")


def test_docs_name_maven_central_not_its_hosts():
    """Repositories are named, hosts left to the user's Ivy or Maven settings (mirrors differ)."""
    pages = [*REPO.glob("*.md"), *REPO.glob("docs/*.md"), *REPO.glob("scripts/*"), *REPO.glob("docker/*")]
    for path in filter(Path.is_file, pages):  # (scripts/__pycache__ is bytecode setup compiled)
        text = path.read_text()
        assert not re.search(r"repo1?\.maven\.org|repo\.maven\.apache\.org|maven2/", text), path
