"""Carry a folder larger than one device call's transfer in parts, and put it back together there.

Why: the GPU machines reach no package registry, and one call carries at most 64 MiB of working
tree, but MAX's GPU wheels are ~243 MB. ``split`` (here) cuts the folder's files, as one stream,
into parts of at most ``--size`` bytes with a manifest of sizes and SHA-256 digests; each call
carries one part; ``receive`` (there) keeps every part it is given in a folder outside the tree
(a warm machine keeps /tmp between calls), and ``join`` rebuilds the files once every part is
there, refusing a part whose digest is wrong.

    python bench/gpu_parts.py split .maxwhl .maxparts --size 55M      # here
    python bench/gpu_parts.py receive .maxparts /tmp/polyrl-maxparts  # there, every call
    python bench/gpu_parts.py join /tmp/polyrl-maxparts /tmp/polyrl-maxwhl   # there, once all arrived
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

MANIFEST = "manifest.json"
CHUNK = 1 << 20


def parse_size(text: str) -> int:
    """``55M`` -> bytes (K, M, G are powers of 1024)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def split(source: Path, out: Path, size: int) -> dict:
    """Cut ``source``'s files (sorted by name, one stream) into ``out/part-NNN`` of at most ``size`` bytes."""
    files = sorted(p for p in source.iterdir() if p.is_file())
    if not files:
        raise SystemExit(f"error: {source} holds no files. Fix: download the wheels into it first")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    parts: list[Path] = []
    handle = None
    written = 0
    for path in files:
        with path.open("rb") as f:
            while block := f.read(CHUNK):
                while block:
                    if handle is None or written == size:  # the current part is full: the next one
                        if handle is not None:
                            handle.close()
                        parts.append(out / f"part-{len(parts):03d}")
                        handle = parts[-1].open("wb")
                        written = 0
                    take = min(len(block), size - written)
                    handle.write(block[:take])
                    block, written = block[take:], written + take
    if handle is not None:
        handle.close()
    manifest = {"files": [{"name": p.name, "bytes": p.stat().st_size, "sha256": _digest(p)} for p in files],
                "parts": [{"name": p.name, "bytes": p.stat().st_size, "sha256": _digest(p)} for p in parts]}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def receive(carried: Path, keep: Path) -> list[str]:
    """Copy the manifest and every part present in ``carried`` into ``keep``; the parts ``keep``
    still lacks (empty: ready to join)."""
    keep.mkdir(parents=True, exist_ok=True)
    if not (carried / MANIFEST).exists() and not (keep / MANIFEST).exists():
        raise SystemExit(f"error: no {MANIFEST} in {carried} or {keep}. Fix: carry the split folder's manifest")
    if (carried / MANIFEST).exists():
        shutil.copy2(carried / MANIFEST, keep / MANIFEST)
    for part in sorted(carried.glob("part-*")):
        shutil.copy2(part, keep / part.name)
    manifest = json.loads((keep / MANIFEST).read_text())
    return [p["name"] for p in manifest["parts"] if not (keep / p["name"]).exists()]


def join(keep: Path, dest: Path) -> list[Path]:
    """Rebuild the split files from ``keep``'s parts into ``dest``; every digest checked."""
    manifest = json.loads((keep / MANIFEST).read_text())
    for part in manifest["parts"]:
        path = keep / part["name"]
        if not path.exists():
            raise SystemExit(f"error: part {part['name']} has not arrived. Fix: carry it in a call and run receive")
        if _digest(path) != part["sha256"]:
            raise SystemExit(f"error: part {part['name']} is damaged (SHA-256 differs). Fix: carry it again")
    dest.mkdir(parents=True, exist_ok=True)
    stream = (keep / p["name"] for p in manifest["parts"])
    current = next(stream).open("rb")
    made = []
    for entry in manifest["files"]:
        left = entry["bytes"]
        target = dest / entry["name"]
        with target.open("wb") as out:
            while left:
                block = current.read(min(CHUNK, left))
                if not block:
                    current.close()
                    current = next(stream).open("rb")
                    continue
                out.write(block)
                left -= len(block)
        if _digest(target) != entry["sha256"]:
            raise SystemExit(f"error: {entry['name']} rebuilt with a wrong SHA-256. Fix: split again here")
        made.append(target)
    current.close()
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("split")
    p.add_argument("source", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--size", default="55M")
    p = sub.add_parser("receive")
    p.add_argument("carried", type=Path)
    p.add_argument("keep", type=Path)
    p = sub.add_parser("join")
    p.add_argument("keep", type=Path)
    p.add_argument("dest", type=Path)
    args = parser.parse_args(argv)
    if args.command == "split":
        manifest = split(args.source, args.out, parse_size(args.size))
        total = sum(f["bytes"] for f in manifest["files"])
        print(f"{len(manifest['files'])} files, {total / 1e6:.0f} MB -> {len(manifest['parts'])} parts in {args.out}")
    elif args.command == "receive":
        missing = receive(args.carried, args.keep)
        print("all parts here: run join" if not missing else f"still missing: {' '.join(missing)}")
    else:
        made = join(args.keep, args.dest)
        print(f"{len(made)} files rebuilt in {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
