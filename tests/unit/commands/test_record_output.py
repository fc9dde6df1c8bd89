"""``record --output`` in a folder other users can write to: a name planted there (a symlink, a
hard link, a FIFO) never makes record write anywhere but a new file of its own under that name."""

from __future__ import annotations

import os
import sys

import pytest
from fakes.nvml import FakeNvml

from gpueff.commands import cli
from gpueff.trace import load_trace

pytestmark = pytest.mark.usefixtures("restore_logging")  # cli.main() installs its own log handler


@pytest.fixture
def one_gpu(monkeypatch, trace_paths):
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([load_trace(trace_paths["idle"])]))


def record_to(output) -> int:
    return cli.main(["record", "-o", str(output), "--duration", "200ms", "--interval", "100ms"])


def test_a_symlink_in_the_outputs_place_is_refused_and_its_target_untouched(tmp_path, one_gpu, capsys) -> None:
    victim = tmp_path / "victim"
    victim.write_text("root's file\n")
    (tmp_path / "out.json").symlink_to(victim)
    assert record_to(tmp_path / "out.json") == 2
    assert "is a symbolic link, which record does not follow" in capsys.readouterr().err
    assert victim.read_text() == "root's file\n" and (tmp_path / "out.json").is_symlink()
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "would-be-created")
    assert record_to(dangling) == 2 and not (tmp_path / "would-be-created").exists()


def test_a_link_planted_while_recording_is_replaced_not_followed(tmp_path, one_gpu, monkeypatch) -> None:
    from gpueff.commands import record as command

    victim, output = tmp_path / "victim", tmp_path / "out.json"
    victim.write_text("root's file\n")
    checked = command.writable_output
    calls = []

    def plant_after_the_first_check(path: str) -> None:
        checked(path)
        calls.append(path)
        if len(calls) == 1:  # the start-up check passed; the link comes while the GPU is recorded
            output.symlink_to(victim)
            monkeypatch.setattr(command, "writable_output", lambda path: None)  # the race won past the second check

    monkeypatch.setattr(command, "writable_output", plant_after_the_first_check)
    assert record_to(output) == 0
    assert victim.read_text() == "root's file\n"  # the rename replaced the link itself
    assert not output.is_symlink() and load_trace(output).samples


def test_a_hard_link_to_another_file_is_left_as_it_was(tmp_path, one_gpu) -> None:
    victim, output = tmp_path / "victim", tmp_path / "out.json"
    victim.write_text("root's file\n")
    os.link(victim, output)
    assert record_to(output) == 0
    assert victim.read_text() == "root's file\n" and load_trace(output).samples
    assert os.stat(output).st_mode & 0o777 == 0o666 & ~current_umask()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out.json", "victim"]  # no temporary file left


def test_a_fifo_or_a_folder_in_the_outputs_place_is_refused(tmp_path, one_gpu, capsys) -> None:
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "folder.json").mkdir()
    for name in ("fifo.json", "folder.json"):
        assert record_to(tmp_path / name) == 2
        assert f"cannot write the trace to {tmp_path / name}: it is there and is not a regular file" in capsys.readouterr().err


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


OTHER_UID = 12345  # a user other than root and the one recording


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's link and folder are made with chown")
def test_a_symlinked_folder_on_the_outputs_path_is_refused_and_the_file_behind_it_untouched(tmp_path, one_gpu, capsys) -> None:
    # Before: the name's own lstat passed (a regular file), and the temporary file and the rename
    # went through the link: root's record replaced a root-owned 0600 file in another folder.
    victim_folder, shared = tmp_path / "victimdir", tmp_path / "shared"
    victim_folder.mkdir()
    (victim_folder / "job1.json").write_text("root's file\n")
    (victim_folder / "job1.json").chmod(0o600)
    shared.mkdir()
    shared.chmod(0o1777)
    (shared / "traces").symlink_to(victim_folder)
    os.lchown(shared / "traces", OTHER_UID, OTHER_UID)
    for output in (shared / "traces" / "job1.json", shared / "traces" / "new" / ".." / "job1.json"):
        assert record_to(output) == 2
        assert f"cannot write the trace to {output}: {shared / 'traces'} is a symbolic link, which record does not follow" in capsys.readouterr().err
    assert (victim_folder / "job1.json").read_text() == "root's file\n" and sorted(os.listdir(victim_folder)) == ["job1.json"]
    relative = os.path.relpath(shared / "traces" / "job1.json")
    assert record_to(relative) == 2 and "traces is a symbolic link" in capsys.readouterr().err


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's folder is made with chown")
@pytest.mark.parametrize(("mode", "refused"), [(0o777, True), (0o775, True), (0o1777, False), (0o755, False)])
def test_a_folder_another_user_shares_with_others_is_refused(tmp_path, one_gpu, capsys, mode, refused) -> None:
    folder = tmp_path / "theirs"
    folder.mkdir()
    os.chown(folder, OTHER_UID, OTHER_UID)
    folder.chmod(mode)
    assert record_to(folder / "out.json") == (2 if refused else 0)
    if refused:
        assert f"the folder {folder} is owned by uid {OTHER_UID} and writable by others without the sticky bit" in capsys.readouterr().err
    else:
        assert load_trace(folder / "out.json").samples
