"""``make wheel``: the installable provider, since it is not on PyPI yet (README "Quickstart").

The wheel is built by the Makefile target itself, installed on its own into an empty folder,
and imported from there by a fresh interpreter that cannot see the checkout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_make_wheel_builds_an_installable_provider(tmp_path):
    dist = tmp_path / "dist"
    # -o setup: the checkout is set up already (make test did it); build only the wheel
    subprocess.run(["make", "-s", "-o", "setup", "wheel", f"DIST={dist}"], cwd=REPO, check=True, timeout=300)
    (wheel,) = dist.glob("airflow_iceberg-*-py3-none-any.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {str(p.relative_to(REPO)) for p in (REPO / "airflow_iceberg").rglob("*.py")}
    assert sources <= names, sources - names  # every module, the PySpark job included
    assert "airflow_iceberg/py.typed" in names

    target = tmp_path / "site"
    uv = str(REPO / ".venv/bin/uv")
    install = [uv, "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(wheel)]
    subprocess.run(install, check=True, timeout=120)
    script = (  # -S: no site-packages, so the checkout's own editable install is out of sight
        "import importlib.metadata as m, airflow_iceberg.get_provider_info as g; "
        f"(dist,) = m.distributions(path=[{str(target)!r}]); "
        "(ep,) = [e for e in dist.entry_points if e.group == 'apache_airflow_provider']; "
        "print(g.__file__); print(ep.load()()['connection-types'][0]['connection-type'])"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    shown = subprocess.run(
        [sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(target)!r}); {script}"],
        env=env, capture_output=True, text=True, check=True, cwd=tmp_path,
    ).stdout.split()
    assert shown == [str(target / "airflow_iceberg" / "get_provider_info.py"), "iceberg_catalog"]
