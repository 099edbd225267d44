"""The dataset registry: register, validate, read, tag, tombstone, download.

Registration order is the commit protocol of architecture §4: packs, blobs and the manifest are
written first; the conditional put of the version row is the commit. A crash before it leaves only
unreferenced objects (collected by `gc`), never a half-visible version.

One module per stage, layered so that each uses only those before it: `results` and `documents`
(what goes in and comes out), `caches` (stored versions read and kept), `reads`, `staging`
(validate, canonicalise, digest), `writer` (packs, blobs, manifest), `commit` (the one commit
loop), and the front, `service.RegistryService`.
"""

from caseshelf.services.registry.documents import DatasetDocument, dataset_error, parse_dataset
from caseshelf.services.registry.results import (
    KIND,
    DatasetSummary,
    Download,
    OneCase,
    RegisterResult,
    ValidateResult,
    WriteStats,
    unchanged_latest,
)
from caseshelf.services.registry.service import MAX_CASE_BYTES, RegistryService
from caseshelf.services.registry.staging import IdLog, SeenIds, VersionHead, parse_head

__all__ = [
    "KIND",
    "MAX_CASE_BYTES",
    "DatasetDocument",
    "DatasetSummary",
    "Download",
    "IdLog",
    "OneCase",
    "RegisterResult",
    "RegistryService",
    "SeenIds",
    "ValidateResult",
    "VersionHead",
    "WriteStats",
    "dataset_error",
    "parse_dataset",
    "parse_head",
    "unchanged_latest",
]
