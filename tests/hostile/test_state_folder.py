"""The project's ``.openprogram`` folder (chat sessions, the chat's input history) linked out
of the project by the repository: nothing is written where the link points."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import TAGGER_AGENT

from openprogram_yaml.errors import UsageError
from openprogram_yaml.run.sessions import SessionStore, private_file, private_folder, sessions_path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "agent.yaml").write_text(TAGGER_AGENT, encoding="utf-8")
    return folder


@pytest.mark.parametrize("target", ["outside", "inside", "dangling"])
def test_a_state_folder_that_is_a_link_is_refused_not_written_through(
    project: Path, tmp_path: Path, target: str
) -> None:
    # A repository holding `.openprogram -> ~` had the sessions store, the chat's input
    # history and a .gitignore written into the home folder.
    elsewhere = {
        "outside": tmp_path / "home",
        "inside": project / "state",
        "dangling": tmp_path / "nowhere",
    }[target]
    if target != "dangling":
        elsewhere.mkdir()
    (project / ".openprogram").symlink_to(elsewhere)
    with SessionStore(sessions_path(project)) as store, pytest.raises(UsageError) as caught:
        store.open("s1", "tagger", "tag")
    assert f"{project / '.openprogram'} is a symbolic link" in str(caught.value)
    with pytest.raises(OSError, match="is a symbolic link"):
        private_file(private_folder(project / ".openprogram") / "chat_history")
    if target == "dangling":
        assert not elsewhere.exists()
    else:
        assert list(elsewhere.iterdir()) == []


def test_a_state_folder_of_its_own_is_made_and_used(project: Path) -> None:
    with SessionStore(sessions_path(project)) as store:
        store.open("s1", "tagger", "tag")
    folder = project / ".openprogram"
    assert folder.is_dir() and not folder.is_symlink()
    assert {p.name for p in folder.iterdir()} >= {".gitignore", "sessions.db"}
