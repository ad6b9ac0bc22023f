"""The Generate page's live view: a run drawn in the browser as each step is made, in one folder.

    gr.Blocks(head=live_head(), css=LIVE_CSS)   # view.py: Plotly.js and the scripts below, the elements they own
    demo.launch(app_kwargs=app_kwargs())        # channel.py: GET /playground/live/<run id>, each step as it is made

The scripts, one per concern, loaded in view.LIVE_PARTS' order: format.js (figures as text, as the Python
formatters write them), charts.js, metrics.js, redraw.js (when to draw), stream.js (reads the step stream).
They draw from the run's step stream (playground/step_stream.py), which reaches the page two ways: Gradio's
updates of the Generate tab (generate_handlers.py) and the live channel (channel.py).

Left out: the stream's format (playground/step_stream.py) and the run itself (session.py, generate_handlers.py).
"""
from .channel import app_kwargs
from .view import LIVE_CSS, live_head

__all__ = ["LIVE_CSS", "app_kwargs", "live_head"]
