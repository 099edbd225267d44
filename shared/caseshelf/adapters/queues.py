"""The export queue's delivery in process, for the embedded store (`caseshelf.adapters.sqs`
is the queue on AWS).

`LocalQueue` is the SQS machinery in one process: `send` keeps the messages; `take` hands the next
one out with its delivery count (`ApproximateReceiveCount`); `failed` puts it back to be
delivered again, or, once it has been delivered `max_receive_count` times, moves it to its
dead-letter queue (the template's `RedrivePolicy`). `caseshelf serve` and the in-process client
deliver what is queued to the consuming function's handler (`caseshelf.gateway.deliver_queued`).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson


@dataclass
class Delivery:
    queue: str
    body: str
    receive_count: int


class LocalQueue:
    """A queue and its dead-letter queue in process (thread-safe)."""

    def __init__(self, name: str, *, dead_letter: str | None, max_receive_count: int) -> None:
        self.name = name
        self.dead_letter = dead_letter
        self.max_receive_count = max_receive_count
        self._lock = threading.Lock()
        self._ready: deque[Delivery] = deque()

    def send(self, messages: Sequence[dict[str, Any]]) -> None:
        with self._lock:
            for m in messages:
                self._ready.append(Delivery(self.name, orjson.dumps(m).decode(), 0))

    def take(self) -> Delivery | None:
        """The next message to deliver (its count of deliveries, this one included)."""
        with self._lock:
            if not self._ready:
                return None
            d = self._ready.popleft()
            d.receive_count += 1
            return d

    def failed(self, delivery: Delivery) -> None:
        """A delivery whose handler failed: delivered again, or dead-lettered after
        `max_receive_count` deliveries."""
        with self._lock:
            if delivery.queue == self.name and delivery.receive_count >= self.max_receive_count:
                if self.dead_letter is not None:
                    self._ready.append(Delivery(self.dead_letter, delivery.body, 0))
                return
            if delivery.queue != self.name and delivery.receive_count >= self.max_receive_count:
                return  # a dead letter whose handler fails too is dropped, as SQS would keep it
            self._ready.append(delivery)

    def __len__(self) -> int:
        with self._lock:
            return len(self._ready)
