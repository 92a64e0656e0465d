"""Fetches openarmature 0.17.0's sdist (its tests and spec fixtures) once, into a cache.

The sdist is downloaded with pip (``pip download --no-binary :all: --no-deps``) the first time
a test needs it, checked against a pinned SHA-256, and extracted under
``$CKPTLOG_CACHE`` (default ``~/.cache/ckptlog``). Concurrent test runs take a file lock;
an extraction is published by renaming a finished directory, so a half-extracted tree is
never used. Without network access and without a cached copy the fixture fails with the
command to run by hand; it never skips.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

import pytest

OPENARMATURE_VERSION = "0.17.0"
SDIST_NAME = f"openarmature-{OPENARMATURE_VERSION}.tar.gz"
SDIST_SHA256 = "a3529485607da3df3b5c324f1e5e873d0a21fe28904bc2f6ff02183aecea08a8"
PIP_DOWNLOAD = [
    sys.executable,
    "-m",
    "pip",
    "download",
    "--no-binary",
    ":all:",
    "--no-deps",
    f"openarmature=={OPENARMATURE_VERSION}",
]


def cache_dir() -> Path:
    return Path(os.environ.get("CKPTLOG_CACHE") or Path.home() / ".cache" / "ckptlog")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _download(cache: Path) -> Path:
    tarball = cache / SDIST_NAME
    if tarball.exists() and _sha256(tarball) == SDIST_SHA256:
        return tarball
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        proc = subprocess.run(
            [*PIP_DOWNLOAD, "-d", tmp],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        got = Path(tmp) / SDIST_NAME
        if proc.returncode != 0 or not got.exists():
            pytest.fail(
                f"could not fetch openarmature's sdist (pip exited {proc.returncode}):\n"
                f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}\nrun `{' '.join(PIP_DOWNLOAD)} -d "
                f"{cache}` where the package index is reachable, then rerun the tests"
            )
        digest = _sha256(got)
        if digest != SDIST_SHA256:
            pytest.fail(
                f"{SDIST_NAME} has SHA-256 {digest}, expected {SDIST_SHA256}: the index served "
                "a different file; refusing to run tests from it"
            )
        os.replace(got, tarball)
    return tarball


def fetch_sdist() -> Path:
    """The extracted sdist's root (holding ``tests/`` and ``openarmature-spec/``)."""
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    root = cache / f"openarmature-{OPENARMATURE_VERSION}"
    if (root / ".complete").exists():
        return root
    with _locked(cache / ".openarmature.lock"):
        if (root / ".complete").exists():
            return root
        tarball = _download(cache)
        staging = Path(tempfile.mkdtemp(prefix=".extract-", dir=cache))
        try:
            with tarfile.open(tarball) as tar:
                tar.extractall(staging, filter="data")
            shutil.rmtree(root, ignore_errors=True)
            os.replace(staging / root.name, root)
            (root / ".complete").touch()
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return root


@pytest.fixture(scope="session")
def openarmature_sdist() -> Path:
    installed = metadata.version("openarmature")
    if installed != OPENARMATURE_VERSION:
        pytest.fail(
            f"openarmature {installed} is installed but the conformance suite is pinned to "
            f"{OPENARMATURE_VERSION}; install the dev extras (`make test` does)"
        )
    return fetch_sdist()
