"""The spec models are built without pydantic's plugin scan, and leave plugins on for the
application's own models."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support import REPO

PROBE = """\
import sys

sys.modules[__name__].loaded = True


class Plugin:
    def new_schema_validator(self, *args, **kwargs):
        return None, None, None


plugin = Plugin()
"""

SCRIPT = """\
import os, sys
from pathlib import Path
from openprogram_yaml.compile.project import compile_path

compile_path(Path(sys.argv[1]))
switch = os.environ.get("PYDANTIC_DISABLE_PLUGINS")
print("after the compile:", "probe_plugin" in sys.modules, switch)

from pydantic import BaseModel

class Own(BaseModel):
    x: int

Own.model_validate({"x": 1})
print("after the application's model:", "probe_plugin" in sys.modules)
"""


def test_pydantic_plugins_are_skipped_for_the_spec_and_kept_for_the_application(
    tmp_path: Path, write
) -> None:  # type: ignore[no-untyped-def]
    site = tmp_path / "site"
    info = site / "probe-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: probe\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pydantic]\nprobe = probe_plugin:plugin\n")
    (site / "probe_plugin.py").write_text(PROBE)
    agent = write("a.yaml", "version: 1\nname: a\nmodel: test\nmethods:\n  m: {prompt: hi}\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}
    env.pop("PYDANTIC_DISABLE_PLUGINS", None)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(agent)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert done.stdout.splitlines() == [
        "after the compile: False None",
        "after the application's model: True",
    ]
