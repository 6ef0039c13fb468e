"""Building the spec models leaves the environment alone: pydantic's plugins see them as
they see any model (a compile may run in a reload's worker thread, where changing
``os.environ`` for a moment would race with the rest of the process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support import REPO

PROBE = """\
import os

seen = []


class Plugin:
    def new_schema_validator(self, schema, schema_type, *args, **kwargs):
        seen.append((schema_type.__name__, os.environ.get("PYDANTIC_DISABLE_PLUGINS")))
        return None, None, None


plugin = Plugin()
"""

SCRIPT = """\
import sys
from pathlib import Path
from openprogram_yaml.compile.project import compile_path

compile_path(Path(sys.argv[1]))
import probe_plugin

print("after the compile:", sorted(set(probe_plugin.seen)))

from pydantic import BaseModel

class Own(BaseModel):
    x: int

Own.model_validate({"x": 1})
print("after the application's model:", ("Own", None) in probe_plugin.seen)
"""


def test_building_the_spec_models_leaves_the_environment_and_plugins_alone(
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
    compiled, application = done.stdout.splitlines()
    assert "('AgentSpec', None)" in compiled  # seen, with the variable still unset
    assert application == "after the application's model: True"
