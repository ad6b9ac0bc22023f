"""The Chromium that browser runs use (the browser tests, screenshots, the bench's ui row), and its flags.

    browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)

Read at each call: the bench's --pin points PLAYGROUND_CHROMIUM at a taskset wrapper while it runs.
Left out: downloading a browser (no playwright download; `make browser` installs Debian's).
"""
from __future__ import annotations

import os
import shutil

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def chromium_path() -> str:
    """PLAYGROUND_CHROMIUM, else `chromium` on PATH, else /usr/bin/chromium (which may not exist)."""
    return os.environ.get("PLAYGROUND_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
