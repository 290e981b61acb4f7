"""Refresh the viewer's vendored JavaScript from the npm registry.

``python -m otel_bridge.viewer.refresh_assets [--sigma VERSION] [--graphology VERSION]`` runs
``npm pack`` for each pinned package (no install, no build step), copies the released browser
bundle and the licence out of the tarball into ``static/vendor/`` and records, in
``static/vendor/VERSIONS.json``, each package's version, the registry tarball's integrity string,
the SHA-256 of every copied file and its licence. The page loads only these files: nothing is
fetched at view time, and installing otel-bridge needs neither node nor npm.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

VENDOR = Path(__file__).parent / "static" / "vendor"


@dataclass(frozen=True, slots=True)
class Package:
    """One vendored npm package: the files taken from its tarball (``package/...``)."""

    name: str
    version: str
    bundle: str
    licence: str


PACKAGES: tuple[Package, ...] = (
    Package("graphology", "0.26.0", "dist/graphology.umd.min.js", "LICENSE.txt"),
    Package("sigma", "3.0.3", "dist/sigma.min.js", "LICENSE.txt"),
)
"""The pinned releases (graphology holds the graph model, sigma renders it with WebGL)."""


def _pack(name: str, version: str, into: Path) -> tuple[Path, str]:
    out = subprocess.run(
        ["npm", "pack", f"{name}@{version}", "--json", "--pack-destination", str(into)],
        check=True,
        capture_output=True,
        text=True,
    )
    info = json.loads(out.stdout)[0]
    return into / info["filename"], str(info.get("integrity", ""))


def refresh(packages: tuple[Package, ...], vendor: Path = VENDOR) -> dict[str, object]:
    """Download, extract and record ``packages`` into ``vendor``; returns the VERSIONS record."""
    vendor.mkdir(parents=True, exist_ok=True)
    record: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for pkg in packages:
            tarball, integrity = _pack(pkg.name, pkg.version, Path(tmp))
            files: dict[str, str] = {}
            with tarfile.open(tarball) as tar:
                meta = json.load(_member(tar, "package/package.json"))
                for inner, target in (
                    (pkg.bundle, f"{pkg.name}.min.js"),
                    (pkg.licence, f"LICENSE-{pkg.name}.txt"),
                ):
                    data = _member(tar, f"package/{inner}").read()
                    (vendor / target).write_bytes(data)
                    files[target] = hashlib.sha256(data).hexdigest()
            record[pkg.name] = {
                "version": meta["version"],
                "license": meta.get("license", ""),
                "integrity": integrity,
                "source": f"npm:{pkg.name}@{meta['version']} package/{pkg.bundle}",
                "files": files,
            }
    (vendor / "VERSIONS.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


def _member(tar: tarfile.TarFile, name: str) -> IO[bytes]:
    handle = tar.extractfile(name)
    if handle is None:
        raise SystemExit(f"{name} is not a file in the tarball")
    return handle


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: refresh every package, optionally at other versions."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    for pkg in PACKAGES:
        parser.add_argument(f"--{pkg.name}", default=pkg.version, help=f"version of {pkg.name}")
    args = parser.parse_args(argv)
    chosen = tuple(Package(p.name, getattr(args, p.name), p.bundle, p.licence) for p in PACKAGES)
    record = refresh(chosen)
    json.dump(record, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
