"""What the Serve tab keeps for one session: its workload job, run while it holds the machine alone.

    job = ServeJob(); job.run(work, gate)   # a workload in a thread holding the machine alone (jobs.BackgroundJob)

On 2 shared cores a workload's figures mean nothing if a Generate run shares the CPU, so a workload takes
the machine alone (machine_gate.py). One workload at a time in the process, one per session.
Left out: layout and handlers (serve_tab.py), the gate itself (machine_gate.py).
"""
from __future__ import annotations

from ..jobs import BackgroundJob
from .export_folder import ExportFolder
from .machine_gate import MachineGate

DEFAULT_SLO = (2.0, 0.5)   # TTFT ≤ 2 s, TPOT ≤ 0.5 s: the Serve tab's goodput until the user moves them


class ServeJob(BackgroundJob):
    """One session's workload (or sweep), a BackgroundJob: its results, live sweeps and exported files."""

    def __init__(self):
        super().__init__()
        self.results, self.sweeps = [], []
        self.exports = ExportFolder("serve-")
        self.watch_exports = ExportFolder("watch-")   # the Watch view's Perfetto trace of the endpoint's clients
        self.slo: tuple[float | None, float | None] = DEFAULT_SLO   # (TTFT, TPOT) seconds the goodput is judged by
        self.roofline = None   # the last batch-size sweep on the roofline (a figure), once its ceilings are measured
        self.measured: dict = {}   # what a preset measured after its runs: its finding's keywords (presets.py)
        self.gaps: list = []       # a replayed trace's session gaps per side, as its prefix cache alone would keep them
        #                            (session_gaps; [] for no trace)

    def run(self, work, gate: MachineGate | None) -> None:
        """Run `work(job)` in a thread holding the machine alone (the caller acquired `gate` alone), or, with no
        gate, as one more client of the room's engine loop."""
        self.results, self.sweeps, self.measured = [], [], {}
        self.start(work, done=None if gate is None else gate.release_alone, name="serve-workload")

    def close(self) -> None:
        self.cancel.set()
        self.exports.remove()
        self.watch_exports.remove()
