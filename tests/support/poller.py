# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the shared cluster's tests watch while a playbook runs (reservations, node states): a thread that calls a
function once a second for the time of a ``with`` block."""

import threading


class Poller(object):
    """Calls ``tick()`` every ``interval`` seconds in a thread of its own while the ``with`` block runs."""

    def __init__(self, tick, interval=1):
        self._tick, self._interval = tick, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self._tick()
            self._stop.wait(self._interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(30)
