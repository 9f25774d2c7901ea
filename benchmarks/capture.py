"""Capture the spark-submit command an operator really runs, and replay it as a raw spark-submit.

Benchmark #1 compares an operator task with "the same job without Airflow". To make that an
honest comparison the raw side must not be rebuilt by hand: ``shim/spark-submit`` records the
argv, environment and working directory SparkSubmitHook uses, and :meth:`SubmitRecord.replay`
runs that again.

One value must change per run, as it does between two operator task runs: the commit id. The
job tags each commit with it and, finding it already in the table, reports that earlier commit
instead of writing again (exactly-once retries), so a byte-for-byte replay would write nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

SHIM_DIR = Path(__file__).resolve().parent / "shim"
RECORD_ENV = "ICEBERG_BENCH_SUBMIT_RECORD"  # not AIRFLOW_*: spark-submit never gets those


def recording_env(record_path: Path) -> dict[str, str]:
    """Environment additions that make the next spark-submit go through the recording shim."""
    return {"PATH": f"{SHIM_DIR}{os.pathsep}{os.environ['PATH']}", RECORD_ENV: str(record_path)}


@dataclass(frozen=True)
class SubmitRecord:
    argv: list[str]
    env: dict[str, str]
    cwd: str
    #: ``--py-files`` path -> the shim's copy (the operator's temporary folder is gone by replay time).
    files: dict[str, str]

    @classmethod
    def load(cls, path: Path) -> SubmitRecord:
        data = json.loads(path.read_text())
        return cls(argv=data["argv"], env=data["env"], cwd=data["cwd"], files=data.get("files", {}))

    @property
    def result_file(self) -> Path:
        """The job's result file: the operator's temporary folder, gone since that task ended."""
        return Path(self.argv[self.argv.index("--result-file") + 1])

    def argv_for_new_run(self) -> list[str]:
        """The recorded argv with a fresh commit id (the operator makes one per task run)."""
        argv = list(self.argv)
        position = argv.index("--commit-id") + 1
        argv[position] = f"{argv[position]}:replay-{uuid.uuid4().hex[:12]}"
        return argv

    def replay(self) -> float:
        """Run the recorded spark-submit once; returns its wall time. Fails unless the job wrote.

        Output is read through a pipe, as SparkSubmitHook reads it, and the operator's temporary
        folder is recreated (with the job archive) so that every recorded path stays valid.
        """
        self.result_file.parent.mkdir(parents=True, exist_ok=True)
        for original, kept in self.files.items():
            Path(original).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(kept, original)
        try:
            started = time.perf_counter()
            completed = subprocess.run(
                self.argv_for_new_run(),
                env=self.env,
                cwd=self.cwd,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                check=False,
            )
            elapsed = time.perf_counter() - started
            result = json.loads(self.result_file.read_text()) if self.result_file.exists() else {}
        finally:
            shutil.rmtree(self.result_file.parent, ignore_errors=True)
        if completed.returncode != 0 or result.get("status") != "success":
            raise RuntimeError(
                f"raw spark-submit failed ({completed.returncode}):\n{completed.stdout[-4000:]}"
            )
        if result.get("reused_earlier_commit"):
            raise RuntimeError("raw spark-submit found its commit id in the table and wrote nothing")
        return elapsed
