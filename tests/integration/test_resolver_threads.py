"""The resolver answers from several threads at once (the local server's way): a route's first
calls, made together, each get the route's answer.

Powertools builds a route's middleware stack on the route's first call. The test holds the first
build open until the second call has either reached the same build (two builds at once: the
stack is wrapped twice and the route answers 500 from then on) or is waiting for the resolver's
lock, so it proves the order by events, never by timing."""

from __future__ import annotations

import threading
from typing import Any

from caseshelf.api.app import make_resolver

WAIT = 30  # a broken resolver fails the test after this, never hangs it


def event(path: str) -> dict[str, Any]:
    return {
        "httpMethod": "GET",
        "path": path,
        "resource": path,
        "headers": {},
        "queryStringParameters": None,
        "body": None,
        "isBase64Encoded": False,
        "requestContext": {"authorizer": {"tenant": "t", "principalId": "p"}},
    }


class Watched:
    """A lock that reports a thread waiting for it (then acts as the lock it wraps)."""

    def __init__(self, lock: Any, waiting: threading.Event) -> None:
        self.lock, self.waiting = lock, waiting

    def __enter__(self) -> Any:
        if not self.lock.acquire(blocking=False):
            self.waiting.set()
            self.lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def test_two_first_calls_of_a_route_at_once_both_get_its_answer() -> None:
    app = make_resolver("t")

    @app.get("/things")
    def things() -> dict[str, Any]:
        return {"things": 1}

    route = next(r for r in app._static_routes if r.path == "/things")
    build = route._build_middleware_stack
    first_in, second_here, go = threading.Event(), threading.Event(), threading.Event()
    inside: list[int] = []
    at_once: list[int] = []

    def held_build(**kwargs: Any) -> None:
        inside.append(1)
        at_once.append(len(inside))
        if len(inside) == 1:
            first_in.set()
        else:
            second_here.set()
        go.wait(WAIT)
        build(**kwargs)
        inside.pop()

    route._build_middleware_stack = held_build  # type: ignore[method-assign,assignment]
    app._setup_lock = Watched(app._setup_lock, second_here)  # type: ignore[assignment]
    answers: list[int] = []

    def call() -> None:
        answers.append(app.resolve(event("/things"), None)["statusCode"])

    first = threading.Thread(target=call)
    first.start()
    assert first_in.wait(WAIT)
    second = threading.Thread(target=call)
    second.start()
    assert second_here.wait(WAIT)  # at the lock, or in a second build
    go.set()
    first.join(WAIT)
    second.join(WAIT)
    assert max(at_once) == 1, "two threads built the route's middleware stack at once"
    assert answers == [200, 200]
    assert app.resolve(event("/things"), None)["statusCode"] == 200
