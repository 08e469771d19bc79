"""Output files lose nothing: regular files are replaced atomically and keep their mode, new
ones honour the umask, symlinks are followed, devices and FIFOs are written through (never
replaced), failures are named errors (exit 1) that leave the old file as it was, and a
termination signal during a write leaves no temporary file behind.

Device files are private copies made with mknod where the tests run as root (a broken
writer must not be able to replace the system's /dev/null); otherwise the real ones, which
an unprivileged process cannot replace."""
from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from adcompiler.cli import main
from adcompiler.files.write import save_npz, save_text, write_atomic
from adcompiler.diagnostics import AdcError

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
MINOR = {"null": 3, "full": 7}  # Linux's memory devices, major 1


def device(tmp_path: Path, name: str) -> Path:
    """/dev/`name`, or a private node of the same device under `tmp_path` when root."""
    if not ROOT:
        path = Path("/dev") / name
        if not path.exists():
            pytest.skip(f"no /dev/{name}")
        return path
    path = tmp_path / name
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, MINOR[name]))
    except (OSError, AttributeError) as e:
        pytest.skip(f"cannot make a device node: {e}")
    return path


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".adc-"))


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    yield
    os.umask(old)


def test_new_file_honours_the_umask(tmp_path, umask_027):
    save_text(str(tmp_path / "new.txt"), "hello")
    assert (tmp_path / "new.txt").read_text() == "hello"
    assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == 0o640
    assert leftovers(tmp_path) == []


def test_existing_file_keeps_its_mode(tmp_path, umask_027):
    target = tmp_path / "out.npz"
    target.write_bytes(b"old")
    os.chmod(target, 0o604)
    save_npz(str(target), {"a": np.arange(3)})
    assert stat.S_IMODE(target.stat().st_mode) == 0o604
    with np.load(target) as z:
        np.testing.assert_array_equal(z["a"], np.arange(3))


def test_symlink_is_followed(tmp_path):
    (tmp_path / "real.txt").write_text("old")
    (tmp_path / "link").symlink_to("real.txt")
    (tmp_path / "dangling").symlink_to("made.txt")
    save_text(str(tmp_path / "link"), "new")
    save_text(str(tmp_path / "dangling"), "made")
    assert (tmp_path / "link").is_symlink() and (tmp_path / "dangling").is_symlink()
    assert (tmp_path / "real.txt").read_text() == "new"
    assert (tmp_path / "made.txt").read_text() == "made"


def test_fifo_is_written_through(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    save_npz(str(fifo), {"a": np.arange(1000)})
    reader.join(10)
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    with np.load(__import__("io").BytesIO(got[0])) as z:
        np.testing.assert_array_equal(z["a"], np.arange(1000))


def test_dev_null_is_written_through(tmp_path):
    null = device(tmp_path, "null")
    save_npz(str(null), {"a": np.arange(10)})
    assert stat.S_ISCHR(null.lstat().st_mode)
    link = tmp_path / "to-null"
    link.symlink_to(null)
    save_text(str(link), "x")
    assert link.is_symlink() and stat.S_ISCHR(null.lstat().st_mode)


def test_full_device_is_a_named_error(tmp_path):
    full = device(tmp_path, "full")
    with pytest.raises(AdcError, match="no space left"):
        save_text(str(full), "x" * 100_000)
    assert stat.S_ISCHR(full.lstat().st_mode)


def test_full_disk_leaves_the_old_file(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")

    def write(f):
        f.write(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    with pytest.raises(AdcError, match="cannot write .*out.txt.*no space left"):
        write_atomic(str(target), write)
    assert target.read_text() == "old" and leftovers(tmp_path) == []


def test_directory_and_missing_folder(tmp_path):
    with pytest.raises(AdcError, match="is a directory"):
        save_text(str(tmp_path), "x")
    with pytest.raises(AdcError, match="does not exist"):
        save_text(str(tmp_path / "no" / "out.txt"), "x")


@pytest.mark.skipif(ROOT, reason="the superuser may write in any folder")
def test_unwritable_folder(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    os.chmod(folder, 0o555)
    try:
        with pytest.raises(AdcError, match="cannot write .*Permission denied"):
            save_text(str(folder / "out.txt"), "x")
    finally:
        os.chmod(folder, 0o755)


def test_unwritable_folder_message(tmp_path, monkeypatch):
    real_open = os.open

    def denied(path, flags, mode=0o777, **kw):
        if os.path.basename(path).startswith(".adc-"):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        return real_open(path, flags, mode, **kw)
    monkeypatch.setattr(os, "open", denied)
    with pytest.raises(AdcError, match=r"cannot write '.*out.txt': cannot create a file in "
                                       r"folder .*: Permission denied"):
        save_text(str(tmp_path / "out.txt"), "x")


SLOW_WRITER = """
import sys, time
from adcompiler.files.write import write_atomic

def write(f):
    for k in range(2000):
        f.write(b"x" * 65536)
        if k == 10:
            print("writing", flush=True)
        time.sleep(0.005)

write_atomic(sys.argv[1], write)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_termination_signal_leaves_no_temporary_file(tmp_path, sig):
    target = tmp_path / "big.bin"
    target.write_text("old")
    # the signal's default action in the child, whatever this run inherited (under nohup
    # SIGHUP is ignored, and an ignored signal stays ignored)
    proc = subprocess.Popen([sys.executable, "-c", SLOW_WRITER, str(target)],
                            stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL))
    try:
        assert proc.stdout.readline().strip() == "writing"
        proc.send_signal(sig)
        assert proc.wait(30) == -sig      # the signal still ends the process
    finally:
        proc.kill()
        proc.stdout.close()
    assert target.read_text() == "old" and leftovers(tmp_path) == []


# ---- through the command line: every option that writes a file --------------------------

PROG = str(SAMPLES / "rnn.tdsl")
OPTIONS = {
    "-o": lambda p: ["compile", PROG, "-o", p],
    "--out": lambda p: ["run", PROG, "--out", p],
    "--stats-json": lambda p: ["run", PROG, "--remat", "sqrt", "--bind", "T=3",
                               "--stats-json", p],
    "jacobian --out": lambda p: ["jacobian", str(SAMPLES / "chain_rule.tdsl"), "--out", p],
}


def cli(argv, capsys) -> tuple[int, str]:
    rc = main(argv)
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_cli_outputs(tmp_path, capsys, option, umask_027):
    argv = OPTIONS[option]
    # a symlink to an existing file with its own mode: followed, the mode kept
    (tmp_path / "real").write_text("old")
    os.chmod(tmp_path / "real", 0o600)
    (tmp_path / "link").symlink_to("real")
    assert cli(argv(str(tmp_path / "link")), capsys)[0] == 0
    assert (tmp_path / "link").is_symlink()
    assert (tmp_path / "real").read_bytes() != b"old"
    assert stat.S_IMODE((tmp_path / "real").stat().st_mode) == 0o600
    # a new file: the umask's mode
    assert cli(argv(str(tmp_path / "new")), capsys)[0] == 0
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o640
    # a device: written through, still a device
    null = device(tmp_path, "null")
    assert cli(argv(str(null)), capsys)[0] == 0
    assert stat.S_ISCHR(null.lstat().st_mode)
    # errors: exit 1 with the file named, no traceback, nothing left behind
    full = device(tmp_path, "full")
    for target, reason in [(full, "no space left"), (tmp_path, "is a directory")]:
        rc, err = cli(argv(str(target)), capsys)
        assert rc == 1 and f"cannot write '{target}'" in err and reason in err, err
        assert "Traceback" not in err
    assert leftovers(tmp_path) == []


# ---- the script part of an emitted Python program follows the same rule -----------------

# runs an emitted program as a script with `adcompiler` unimportable and the umask 027
RUN_EMITTED = """
import os, runpy, sys
sys.modules["adcompiler"] = None
os.umask(0o027)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_emitted_program_writes_its_output_like_the_cli(tmp_path, capsys):
    prog = tmp_path / "prog.py"
    assert main(["compile", str(SAMPLES / "chain_rule.tdsl"), "--emit", "python", "-o",
                 str(prog)]) == 0, capsys.readouterr().err
    x, w1, w2 = np.array([0.5]), np.array([[0.3], [-0.2]]), np.array([[1.5, -0.7]])
    np.savez(tmp_path / "in.npz", x=x, W1=w1, W2=w2)
    a = 1 / (1 + np.exp(-(w1 @ x)))
    want = float((w2 @ a)[0] ** 2)

    def script(out: Path, **kw) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", RUN_EMITTED, str(prog),
                               str(tmp_path / "in.npz"), str(out)],
                              capture_output=True, text=True, timeout=60, **kw)

    def result(data: bytes | Path) -> float:
        with np.load(__import__("io").BytesIO(data) if isinstance(data, bytes) else data) as z:
            return float(z["out"])
    # a new file: the umask's mode
    proc = script(tmp_path / "new.npz")
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE((tmp_path / "new.npz").stat().st_mode) == 0o640
    assert result(tmp_path / "new.npz") == pytest.approx(want, rel=1e-5)
    # an existing file behind a symlink: the link is followed, the file replaced by a
    # rename (a reader never sees half an archive) keeps its mode
    (tmp_path / "real.npz").write_bytes(b"old")
    os.chmod(tmp_path / "real.npz", 0o604)
    (tmp_path / "link").symlink_to("real.npz")
    inode = (tmp_path / "real.npz").stat().st_ino
    assert script(tmp_path / "link").returncode == 0
    assert (tmp_path / "link").is_symlink()
    assert (tmp_path / "real.npz").stat().st_ino != inode  # replaced whole, not rewritten
    assert stat.S_IMODE((tmp_path / "real.npz").stat().st_mode) == 0o604
    assert result(tmp_path / "real.npz") == pytest.approx(want, rel=1e-5)
    # a FIFO: written through, its reader gets the archive
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    assert script(fifo).returncode == 0
    reader.join(30)
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and result(got[0]) == pytest.approx(want, 1e-5)
    # a device, directly and through a symlink: written through, still a device
    null = device(tmp_path, "null")
    (tmp_path / "to-null").symlink_to(null)
    for target in (null, tmp_path / "to-null"):
        assert script(target).returncode == 0
        assert stat.S_ISCHR(null.lstat().st_mode)
    # an error: a message naming the file, exit 1, no traceback, nothing left behind
    for target, reason in [(device(tmp_path, "full"), "no space left"),
                           (tmp_path, "is a directory")]:
        proc = script(target)
        assert proc.returncode == 1 and f"cannot write '{target}'" in proc.stderr
        assert reason in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert leftovers(tmp_path) == []
