"""Where the caches live on a Space, and whether the start-up log calls them kept: PLAYGROUND_CACHE, else /data where
the owner mounts a Storage Bucket, else the home cache (wiped when a Space restarts). Mount detection is
monkeypatched: these machines have no bucket to mount."""
from __future__ import annotations

from pathlib import Path

import pytest

from playground import config


@pytest.fixture
def space(tmp_path, monkeypatch):
    """A Space whose /data is tmp_path/data (absent until a test makes it), with no cache setting."""
    monkeypatch.setattr(config, "SPACE_DATA", tmp_path / "data")
    monkeypatch.delenv("PLAYGROUND_CACHE", raising=False)
    monkeypatch.setenv("SPACE_ID", "someone/playground")
    return tmp_path / "data"


def test_a_bucket_mounted_at_data_holds_the_cache_and_survives_a_restart(space, monkeypatch):
    space.mkdir()
    monkeypatch.setattr(config, "on_own_filesystem", lambda path: path == space / config.CACHE_NAME)
    where = config.cache_location()
    assert where.path == space / config.CACHE_NAME and where.survives_restart is True
    assert where.log_line().startswith(f"cache: {space / config.CACHE_NAME} (survives a restart: a mounted volume")


def test_a_data_folder_on_the_containers_own_disk_is_lost_on_restart(space, monkeypatch):
    space.mkdir()
    monkeypatch.setattr(config, "on_own_filesystem", lambda path: False)
    where = config.cache_location()
    assert where.path == space / config.CACHE_NAME and where.survives_restart is False
    assert "lost on restart" in where.log_line() and "mount a Storage Bucket at" in where.log_line()


def test_without_data_a_space_caches_in_home_and_loses_it_on_restart(space, monkeypatch):
    monkeypatch.setattr(config, "on_own_filesystem", lambda path: False)
    where = config.cache_location()
    assert where.path == config.local_cache_dir() and where.survives_restart is False


def test_a_read_only_data_is_not_used(space, monkeypatch):
    import os
    space.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if Path(path) == space else real_access(path, mode))
    assert config.cache_location().path == config.local_cache_dir()   # a bucket mounted read-only: not for caches


def test_the_setting_wins_and_counts_as_kept(space, tmp_path, monkeypatch):
    space.mkdir()
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path / "bucket" / "cache"))
    monkeypatch.setattr(config, "on_own_filesystem", lambda path: False)
    where = config.cache_location()
    assert where.path == tmp_path / "bucket" / "cache" and where.survives_restart is True
    assert "PLAYGROUND_CACHE" in where.log_line()


def test_off_a_space_the_home_cache_is_this_machines_disk(space, monkeypatch):
    space.mkdir()
    monkeypatch.delenv("SPACE_ID")
    where = config.cache_location()
    assert where.path == config.local_cache_dir() and where.survives_restart is None
    assert "on this machine's disk" in where.log_line()


def test_mount_detection_compares_the_filesystem_with_the_roots(monkeypatch, tmp_path):
    import os
    real_stat = Path.stat
    assert config.on_own_filesystem(Path("/no/such/folder")) is False   # the nearest existing parent is /

    def stat(self, *args, **kwargs):   # tmp_path as if it were another filesystem (a mounted volume)
        result = real_stat(self, *args, **kwargs)
        if self == tmp_path:
            return os.stat_result((*result[:2], result.st_dev + 1, *result[3:]))
        return result
    monkeypatch.setattr(Path, "stat", stat)
    assert config.on_own_filesystem(tmp_path / "not-yet-made") is True


def test_the_hubs_downloads_go_beside_the_kept_cache(space, tmp_path, monkeypatch):
    import app

    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path / "bucket"))
    assert app.hub_home() == str(tmp_path / "bucket" / ".huggingface")
    monkeypatch.setenv("HF_HOME", "/somewhere")
    assert app.hub_home() is None   # the owner's own choice stands
    monkeypatch.delenv("HF_HOME")
    monkeypatch.delenv("SPACE_ID")
    assert app.hub_home() is None   # not a Space: the user's usual hub cache
