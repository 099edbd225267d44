"""The export queue on AWS: SQS. `SqsQueue.send` sends messages in batches of ten (SQS's
limit); the function consuming the queue gets them through its SQS event source (batch size 1),
as the template declares. `caseshelf.adapters.queues.LocalQueue` is the same in process."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from botocore.exceptions import ClientError

from caseshelf.domain.errors import Upstream

SQS_BATCH = 10


class SqsQueue:
    def __init__(self, client: Any, url: str) -> None:
        self.client = client
        self.url = url

    def send(self, messages: Sequence[dict[str, Any]]) -> None:
        for start in range(0, len(messages), SQS_BATCH):
            batch = messages[start : start + SQS_BATCH]
            entries = [
                {"Id": str(i), "MessageBody": orjson.dumps(m).decode()} for i, m in enumerate(batch)
            ]
            try:
                resp = self.client.send_message_batch(QueueUrl=self.url, Entries=entries)
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                raise Upstream(f"the export queue refused messages ({code})") from exc
            if resp.get("Failed"):
                first = resp["Failed"][0]
                raise Upstream(
                    f"the export queue refused {len(resp['Failed'])} message(s) "
                    f"({first.get('Code')}: {first.get('Message')}); ask again"
                )
