"""The `lambda` tier: the template's functions run by the real runtime interface client in the
Lambda emulation (`tests/lambda_emulation.py`), over a moto server made from the template."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lambda_emulation import BWRAP, Emulation, cached_layer, moto_stack

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test of this directory carries the `lambda` marker (`-m lambda` selects them)."""
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker("lambda")


@pytest.fixture(scope="session")
def layer() -> Path:
    """The layer as the template's build makes it, from the virtualenv's distributions
    (rebuilt only when they, the package or shared/Makefile changed)."""
    if BWRAP is None:
        pytest.skip("bubblewrap is missing (apt-get install bubblewrap; .ci/run installs it)")
    return cached_layer()


@pytest.fixture(scope="module")
def emulation(
    layer: Path, moto_server: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Emulation]:
    """The template's functions over a fresh bucket and table on the moto server."""
    with (
        moto_stack(moto_server) as (bucket, table),
        Emulation(
            endpoint_url=moto_server,
            bucket=bucket,
            table=table,
            layer=layer,
            scratch=tmp_path_factory.mktemp("lambda"),
        ) as emu,
    ):
        yield emu
