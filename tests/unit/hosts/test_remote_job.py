"""The one remote-job runner (verify's smoke job, tune's job) against the local machine."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from provision.errors import OperationFailed
from provision.hosts.local import LocalTransport
from provision.hosts.remote_job import RemoteJob, last_json_line
from provision.hosts.transport import CommandResult


def test_files_go_to_a_private_folder_the_job_runs_there_and_the_folder_goes(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("import json, os, sys\njson.dump({'env': os.environ['GREETING']}, open(sys.argv[1], 'w'))\n")
    with RemoteJob(LocalTransport(), {"bin/job.py": script, "input.json": b"{}"}, prefix="provision-unit") as job:
        folder = job.workdir
        assert folder.startswith("/tmp/provision-unit.")
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700  # mktemp -d: no other user looks in
        assert Path(folder, "input.json").read_bytes() == b"{}"
        ran = job.run(["python3", job.path("bin/job.py"), job.path("out.json")], timeout=30, env={"GREETING": "a b"})
        assert ran.ok, ran.stderr
        assert job.document("out.json") == {"env": "a b"}
        assert job.document("missing.json") is None
        Path(folder, "torn.json").write_text("{")
        with pytest.raises(ValueError):
            job.document("torn.json")
    assert not os.path.exists(folder)


def test_no_folder_is_an_operation_failure_and_cleanup_never_hides_the_outcome() -> None:
    class NoTmp(LocalTransport):
        def run(self, command: object, **kw: object) -> CommandResult:
            return CommandResult(1, "", "mktemp: Read-only file system")

    with pytest.raises(OperationFailed, match="cannot make a work folder on localhost: mktemp: Read-only"):
        RemoteJob(NoTmp(), {}, prefix="provision-unit").open()

    class RmFails(LocalTransport):
        def run(self, command: object, **kw: object) -> CommandResult:
            if isinstance(command, list) and command[:2] == ["rm", "-rf"]:
                os.rmdir(command[2])
                raise OSError("connection lost")
            return super().run(command, **kw)  # type: ignore[arg-type]

    with pytest.raises(RuntimeError, match="the job's own error"), RemoteJob(RmFails(), {}, prefix="provision-unit"):
        raise RuntimeError("the job's own error")


def test_the_document_is_the_last_json_object_on_stdout() -> None:
    assert last_json_line('progress 1\n{"ok": true}\n') == {"ok": True}
    assert last_json_line('{"ok": false}\n42\nnot json\n') == {"ok": False}  # a bare number is a progress line
    assert last_json_line("Traceback ...\n") is None
