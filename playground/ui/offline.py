"""The page asks only its own host: Gradio's page template names two other hosts, and this drops them.

    FastAPI(middleware=[Middleware(OwnHostOnly)])     # live_channel.app_kwargs() adds it

Gradio 5's index.html loads iframe-resizer's content-window script from cdnjs.cloudflare.com on every load
(for a page embedded in another site's iframe; Gradio sets its `autoResize` off) and preconnects to Google's
font hosts. Offline (a classroom without internet, a laptop on a train) the script fails with a console
error, and online it tells a third party who opened the page. The playground's theme uses the browser's own
fonts, and its page is never embedded, so each HTML response has those tags removed on the way out.
On a Hugging Face Space (SPACE_ID set), where the page does sit in huggingface.co's iframe, the template is
left as it is.

Left out: anything but text/html responses (the page's own scripts and styles come from the app's host).
"""
from __future__ import annotations

import os
import re

# The tags of Gradio 5.x's frontend/index.html that name another host
FOREIGN_TAGS = re.compile(
    r'<script\s+src="https://cdnjs\.cloudflare\.com/[^"]*"[^>]*>\s*</script>\s*'
    r'|<link\s+rel="preconnect"\s+href="https://fonts\.(?:googleapis|gstatic)\.com"[^>]*/?>\s*')


def own_host_only(page: str) -> str:
    """`page` without the tags that make a browser contact another host.

    >>> own_host_only('<head><script\\n src="https://cdnjs.cloudflare.com/x.min.js"\\n async\\n></script><meta></head>')
    '<head><meta></head>'
    >>> own_host_only('<link rel="preconnect" href="https://fonts.gstatic.com" crossorigin="anonymous" /><b>')
    '<b>'
    """
    return FOREIGN_TAGS.sub("", page)


class OwnHostOnly:
    """ASGI middleware: every text/html response leaves with own_host_only applied (its length fixed to match)."""

    def __init__(self, app, on_space: bool | None = None):
        self.app = app
        self.on_space = bool(os.environ.get("SPACE_ID")) if on_space is None else on_space

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or self.on_space:
            await self.app(scope, receive, send)
            return
        start, body = None, []

        async def rewrite(message):
            nonlocal start
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers", []))
                html = headers.get(b"content-type", b"").startswith(b"text/html")
                if not html or headers.get(b"content-encoding"):
                    start = False
                    await send(message)
                else:
                    start = message
                return
            if start is False or message["type"] != "http.response.body":
                await send(message)
                return
            body.append(message.get("body", b""))
            if message.get("more_body"):
                return
            page = own_host_only(b"".join(body).decode("utf-8")).encode("utf-8")
            headers = [(k, v) for k, v in start.get("headers", []) if k != b"content-length"]
            await send({**start, "headers": headers + [(b"content-length", str(len(page)).encode())]})
            await send({"type": "http.response.body", "body": page})

        await self.app(scope, receive, rewrite)
