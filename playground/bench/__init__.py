"""The benchmark (`make bench`): `python -m playground.bench [COMMAND]`, one JSON line a row.

Commands and their modules (__main__.py dispatches by a table of their `main` functions):
backends.py (engine vs plain generate()), prefill.py, fidelity.py, peer.py (llama.cpp's llama-bench,
the matmul peak, the kernel floor, the summary ratios), batch.py, serve.py, aiperf.py, roofline.py,
speculative.py, ui.py (the app's cost; with app_process.py, proxy.py, paced.py and recorder.py, the JS
a browser run injects), remote.py, interleaved.py, results.py (the dated pages in docs/results/).
rows.py types the base Row and the stamp (commit, machine, date); each command's rows are typed in its
own module; process.py runs a command in a fresh process and reads its row back.

Nothing is imported here: `python -m playground.bench` and the tests import the modules they need.
"""
