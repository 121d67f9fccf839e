"""``hal.capture``: record a fixed-shape pipeline once, replay its kernels without Python's per-op cost.

>>> with hal.capture() as graph:          # the ops run normally, and are recorded
...     y = net(x)
>>> x.copy_(next_batch)                    # new data into the same input buffer
>>> graph.replay()                         # the same kernels on the same buffers; y holds the result

Each op's validation, tuning lookup and output allocation happen once, inside the
``with`` block. ``replay`` then calls the backend launchers with the recorded specs,
buffers and parameters. On a backend that can capture its launches into a device-side
graph (CUDA: a CUDA graph, captured from the stream by the driver API) the replay is a
single graph launch; elsewhere, and wherever capture fails, it calls the launchers one
by one (``graph.mode`` says which). The recorded buffers (inputs, outputs, weights and the
backend's workspaces) stay alive as long as the graph does.

Only what runs on the device is replayed: host work inside the block (uploads of numpy
arrays passed to ops, Python arithmetic) is not. Pass device tensors for every input
that should change between replays, and write new data into them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from hal.ops import record_launches, replay_launches


class Graph:
    """The recorded launches of one pipeline, and how they are replayed."""

    def __init__(self) -> None:
        self.launches: list[tuple[Any, str, Any, tuple[Any, ...], Any]] = []
        #: "device graph" (one graph launch per replay) or "launchers" (one launcher call per kernel)
        self.mode = "launchers"
        self._device_replay: Callable[[], None] | None = None

    def _finish(self, launches: list[tuple[Any, str, Any, tuple[Any, ...], Any]]) -> None:
        self.launches = list(launches)
        devices = {id(dev): dev for dev, *_ in self.launches}
        if len(devices) != 1:
            return
        self._device_replay = next(iter(devices.values())).backend.capture(self._replay_launchers)
        if self._device_replay is not None:
            self.mode = "device graph"

    def __len__(self) -> int:
        return len(self.launches)

    def _replay_launchers(self) -> None:
        replay_launches(self.launches)

    def replay(self) -> None:
        """Run the recorded kernels again, in order, on the same buffers (asynchronously, like an op)."""
        if self._device_replay is not None:
            self._device_replay()
        else:
            self._replay_launchers()

    def __repr__(self) -> str:
        return f"hal.Graph({len(self)} launches, {self.mode})"


@contextmanager
def capture() -> Iterator[Graph]:
    """Record the ops called inside; the yielded graph can replay them once the block ends."""
    graph = Graph()
    with record_launches() as launches:
        yield graph
    graph._finish(launches)
