"""Presenter mode: one switch (and `?present=1` in the URL) that makes every tab readable on a projector.

    presenter_switch()          # the checkbox, in the page's top-right corner (first in the Blocks)
    presenter_head()            # presenter.js: ?present=1 and the switch's clicks set body.present

The page alone reads the URL and the switch (no Gradio event): on Gradio 6.17 a load event's value for the
switch was reset at once, and a change event wired after the tabs never ran.

With body.present the page header and the model line are hidden, every text size of the theme is at
least 20 px (PRESENT_CSS), and presenter.js enlarges every Plotly figure's fonts to at least 18 px and
fits the lesson's first figure under its step's heading and takeaway (FIT). The lesson's backend
dropdown is hidden while presenting: it is picked before, and the step gets its room.
Left out: anything server-side: a handler never knows whether the page is presenting.
"""
from __future__ import annotations

from pathlib import Path

import gradio as gr

PRESENTER_JS = Path(__file__).with_name("presenter.js")
BODY_PX = 20
PRESENT_GAP_PX = 6
# the theme's sizes are variables set on :root; one that refers to another is resolved there, so each
# is set again here (a later var(--text-md) would still read the :root value)
_SIZES = {"text-xxs": 20, "text-xs": 20, "text-sm": 20, "text-md": 20, "text-lg": 22, "text-xl": 26, "text-xxl": 30}
_DERIVED = {"body-text-size": "text-md", "prose-text-size": "text-md", "block-info-text-size": "text-sm",
            "block-label-text-size": "text-sm", "block-title-text-size": "text-md", "section-header-text-size": "text-md",
            "checkbox-label-text-size": "text-md", "input-text-size": "text-md", "button-large-text-size": "text-lg",
            "button-small-text-size": "text-sm", "button-medium-text-size": "text-md", "table-text-size": "text-md"}
PRESENT_CSS = (
    # at the page's top-right corner, scrolling with the page: fixed, it covered what scrolled under it (the
    # download list's file sizes)
    "#present { position: absolute; top: 6px; right: 12px; z-index: 1000; width: auto !important; min-width: 0 !important;"
    " background: var(--background-fill-primary); padding: 2px 8px; border-radius: 8px; }\n"
    "body.present { " + " ".join(f"--{k}: {v}px;" for k, v in _SIZES.items())
    + " " + " ".join(f"--{k}: {_SIZES[v]}px;" for k, v in _DERIVED.items()) + " }\n"
    "body.present #page-header, body.present #model-info, body.present footer { display: none !important; }\n"
    # blocks closer together (the theme's 16 px between each): a lesson step's heading, takeaway, answer and first
    # chart fit 768 px with a three-line takeaway (step 2's chart ended at 778 px)
    f"body.present {{ --layout-gap: {PRESENT_GAP_PX}px; }}\n"
    "body.present #lesson-backend, body.present .form:has(> #lesson-backend) { display: none !important; }\n"   # picked
    # before presenting: the step gets the room
    f"body.present .gradio-container {{ font-size: {BODY_PX}px; padding-top: 0 !important; }}\n"
    f"body.present .gradio-container .prose, body.present .gradio-container .caption, body.present .tok-title,"
    f" body.present .metrics .label, body.present .status, body.present .pg-step, body.present .tok"
    f" {{ font-size: {BODY_PX}px !important; }}\n"
    "body.present .gradio-container .prose h2 { font-size: 30px !important; margin: 0 !important; }\n"
    "body.present .lesson-takeaway, body.present .lesson-takeaway .prose { font-size: 24px !important; line-height: 1.35; }\n"
    "body.present .reset-button { line-height: 1 !important; }\n"   # a slider's ↺ in its fixed-height box
    # step 2's answer box as tall as its chips: its first chart then fits under it at 1024x768
    "body.present #lesson-replay { min-height: 0; padding: 0; }\n"
    "body.present #lesson-replay-caption { margin: 0 !important; }\n"
    "body.present #lesson-replay-button { padding-top: 0; padding-bottom: 0; }\n"
    # a chart's Gradio label floats over its figure's top-left corner, where the enlarged title now reaches;
    # the figure's own title and subtitle name it (a figure without a title keeps its label)
    "body.present .block:has(.js-plotly-plot .gtitle) > label[data-testid='block-label'] { display: none !important; }\n"
)


def presenter_head() -> str:
    return f"<script>{PRESENTER_JS.read_text(encoding='utf-8')}</script>"


def presenter_switch() -> gr.Checkbox:
    return gr.Checkbox(False, label="Presenter mode", elem_id="present", container=False)
