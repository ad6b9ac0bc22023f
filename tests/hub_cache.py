"""A Hugging Face cache laid out as the hub leaves it, made offline from a local folder.

    write_hub_cache(hf_home / "hub", "owner/name", folder)
    # hub/models--owner--name/blobs/<sha256>            each file's bytes
    # hub/models--owner--name/snapshots/<rev>/<file>    a relative link to its blob
    # hub/models--owner--name/refs/main                 <rev>

With HF_HOME set to hf_home and HF_HUB_OFFLINE=1, huggingface_hub (snapshot_download, hf_hub_download)
and transformers' from_pretrained find the model by its hub id without a network.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

REVISION = "0123456789abcdef0123456789abcdef01234567"   # a commit hash as the hub names snapshots


def write_hub_cache(hub: Path, repo_id: str, folder: Path, revision: str = REVISION) -> Path:
    """Copy `folder`'s files into the hub cache under `repo_id`; returns the snapshot folder."""
    repo = Path(hub) / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / revision
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for path in sorted(Path(folder).iterdir()):
        if not path.is_file():
            continue
        data = path.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / path.name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(os.path.relpath(blob, snapshot))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return snapshot
