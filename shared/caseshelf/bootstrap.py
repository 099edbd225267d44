"""The one composition root: settings -> adapters -> services.

Handlers and the CLI call `services()`; nothing else builds a client or an adapter. Importing this
module does no I/O: settings are read and adapters built on first use, then cached.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from caseshelf.adapters.queues import LocalQueue
from caseshelf.api.cors import CORS_ORIGIN_PATTERN
from caseshelf.domain import layout
from caseshelf.domain.answers import EVENT_BODY_LIMIT
from caseshelf.domain.errors import BadRequest, Forbidden
from caseshelf.extras import require
from caseshelf.functions import EXPORT_QUEUE, IMPORT_QUEUE, QUEUES
from caseshelf.ports import BlobStore, Index, Queue
from caseshelf.storehome import FROM_CALLER, StoreHome, find_home, given_home

if TYPE_CHECKING:
    # Services are imported where they are built, so importing a handler stays cheap (cold start).
    from caseshelf.services.browse import BrowseService
    from caseshelf.services.diff import DiffService
    from caseshelf.services.download_jobs import DownloadJobService
    from caseshelf.services.export_jobs import ExportJobService
    from caseshelf.services.exports import ExportService
    from caseshelf.services.imports import ImportService
    from caseshelf.services.jobs import JobService
    from caseshelf.services.recipes import RecipeService
    from caseshelf.services.refs import RefService
    from caseshelf.services.registry import RegistryService
    from caseshelf.services.selection import SelectionService
    from caseshelf.services.tasks import TaskImportService


class Settings(BaseModel):
    """Every setting, validated once. Read from the environment by `load_settings`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Literal["local", "aws"] = "local"
    # The embedded store's directory and how it was found (`caseshelf.storehome`); filled in by
    # `load_settings` for the local backend.
    home: Path | None = None
    home_found: Literal["env", "project", "user", "given"] | None = None
    bucket: str | None = None
    table: str | None = None
    endpoint_url: str | None = None
    region: str = "us-east-1"
    # Attempts per S3 or DynamoDB request (None: `caseshelf.adapters.aws.MAX_ATTEMPTS`).
    aws_max_attempts: int | None = Field(default=None, ge=1, le=20)
    tenant: str = "local"
    principal: str = "local"
    roles: tuple[str, ...] = ()
    # A request body's bytes as they sit in the Lambda event, escaped (caseshelf.domain.answers)
    max_body_bytes: int = Field(default=EVENT_BODY_LIMIT, ge=1)
    max_case_bytes: int = Field(default=4 * 1024 * 1024, ge=1)
    presign_expiry: int = Field(default=900, ge=1, le=7 * 24 * 3600)
    gc_grace_seconds: int = Field(default=24 * 3600, ge=0)
    hf_endpoint: str = "https://huggingface.co"
    hf_viewer_url: str = "https://datasets-server.huggingface.co"
    hf_token: SecretStr | None = None
    hf_secret_prefix: str = "caseshelf/hf-token/"  # noqa: S105 - a name prefix, not a secret
    # The local server's own URL (`caseshelf serve` sets it): the embedded store then answers
    # upload URLs on it (`PUT /_uploads/<token>`), as S3 answers presigned PUTs.
    public_url: str | None = Field(default=None, pattern=r"^https?://[^/\s]+(/\S*)?$")
    # The embedded store answers a version's download as a presigned URL of its own, as S3 does
    # (the in-process client sets it, and streams the stored document from that URL); otherwise
    # the download route answers the document itself there (architecture §7).
    presign_local_downloads: bool = False
    max_upload_bytes: int = Field(default=1024 * 1024 * 1024, ge=1)
    # The Kubernetes Secret EvalHub pods read S3 credentials from: the exports' default
    # `secret_ref` (an RFC 1123 label).
    evalhub_secret_ref: str | None = Field(
        default=None, pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
    )
    # Sources over HTTP (caseshelf.adapters.fence): a deployed API is always fenced; the local
    # server turns this on for itself (`caseshelf serve`); the CLI on the embedded store reads
    # the user's own files.
    fence_sources: bool = False
    source_hosts: tuple[str, ...] = ("huggingface.co", "*.huggingface.co", "*.hf.co")
    source_buckets: tuple[str, ...] = ()
    source_connect_timeout: float = Field(default=10.0, gt=0, le=300)
    source_read_timeout: float = Field(default=60.0, gt=0, le=900)
    # Web origins (`https://host[:port]`) whose pages may read the API's answers (CORS); none
    # by default: the UI deployed with the stack is on the API's own origin.
    cors_origins: tuple[Annotated[str, Field(pattern=CORS_ORIGIN_PATTERN)], ...] = ()
    # The process's memory in MB: Lambda's AWS_LAMBDA_FUNCTION_MEMORY_SIZE (its MemorySize);
    # elsewhere 1,024. The manifest cache is bounded against it (caseshelf.services.memo), or
    # by CASESHELF_MANIFEST_CACHE_BYTES when that is set.
    memory_mb: int = Field(default=1024, ge=128)
    manifest_cache_bytes: int | None = Field(default=None, ge=0)
    # How many processes an import may use on a plain local jsonl file (Hugging Face
    # `datasets`' `num_proc`): 1, the import in this process, unless set; always 1 on the AWS
    # backend and in a Lambda function (`load_settings`).
    num_proc: int = Field(default=1, ge=1, le=64)
    # The export jobs' SQS queue and its dead-letter queue (the template sets both); without a
    # queue URL the parts are queued in process and delivered by `caseshelf serve` or the
    # in-process client (`caseshelf.adapters.queues.LocalQueue`).
    export_queue_url: str | None = None
    export_dead_letter_arn: str | None = None
    # The import jobs' queue and its dead-letter queue (task imports through the API), as the
    # export queue: in process without a URL.
    import_queue_url: str | None = None
    import_dead_letter_arn: str | None = None

    @property
    def sources_fenced(self) -> bool:
        return self.backend == "aws" or self.fence_sources

    @property
    def store_home(self) -> StoreHome:
        """The embedded store's directory, and how it was found."""
        if self.home is None:
            return find_home()
        return StoreHome(str(self.home), self.home_found or FROM_CALLER)


_ENV = {
    "backend": "CASESHELF_BACKEND",
    "home": "CASESHELF_HOME",
    "bucket": "CASESHELF_BUCKET",
    "table": "CASESHELF_TABLE",
    "endpoint_url": "AWS_ENDPOINT_URL",
    "region": "AWS_DEFAULT_REGION",
    "aws_max_attempts": "CASESHELF_AWS_MAX_ATTEMPTS",
    "tenant": "CASESHELF_TENANT",
    "principal": "CASESHELF_PRINCIPAL",
    "roles": "CASESHELF_ROLES",
    "max_body_bytes": "CASESHELF_MAX_BODY_BYTES",
    "max_case_bytes": "CASESHELF_MAX_CASE_BYTES",
    "presign_expiry": "CASESHELF_PRESIGN_EXPIRY",
    "gc_grace_seconds": "CASESHELF_GC_GRACE_SECONDS",
    "hf_endpoint": "HF_ENDPOINT",
    "hf_viewer_url": "CASESHELF_HF_VIEWER_URL",
    "hf_token": "HF_TOKEN",
    "hf_secret_prefix": "CASESHELF_HF_SECRET_PREFIX",
    "public_url": "CASESHELF_PUBLIC_URL",
    "max_upload_bytes": "CASESHELF_MAX_UPLOAD_BYTES",
    "evalhub_secret_ref": "CASESHELF_EVALHUB_SECRET_REF",
    "fence_sources": "CASESHELF_FENCE_SOURCES",
    "source_hosts": "CASESHELF_SOURCE_HOSTS",
    "source_buckets": "CASESHELF_SOURCE_BUCKETS",
    "source_connect_timeout": "CASESHELF_SOURCE_CONNECT_TIMEOUT",
    "source_read_timeout": "CASESHELF_SOURCE_READ_TIMEOUT",
    "cors_origins": "CASESHELF_CORS_ORIGINS",
    "memory_mb": "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
    "manifest_cache_bytes": "CASESHELF_MANIFEST_CACHE_BYTES",
    "num_proc": "CASESHELF_NUM_PROC",
    "export_queue_url": "CASESHELF_EXPORT_QUEUE_URL",
    "export_dead_letter_arn": "CASESHELF_EXPORT_DEAD_LETTER_ARN",
    "import_queue_url": "CASESHELF_IMPORT_QUEUE_URL",
    "import_dead_letter_arn": "CASESHELF_IMPORT_DEAD_LETTER_ARN",
}
# Set by the Lambda runtime in every function.
LAMBDA_ENV = "AWS_LAMBDA_FUNCTION_NAME"
_LISTS = frozenset({"roles", "source_hosts", "source_buckets", "cors_origins"})


def load_settings(env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    for name, var in _ENV.items():
        raw = env.get(var)
        if raw not in (None, ""):
            values[name] = (
                tuple(r.strip() for r in raw.split(",") if r.strip()) if name in _LISTS else raw
            )
    values.pop("home", None)  # found below, by the one rule (`caseshelf.storehome`)
    values.update({k: v for k, v in overrides.items() if v is not None})
    if values.get("backend", "local") == "local":
        home = given_home(values["home"]) if "home" in values else find_home(env)
        check_home(home)
        values.update(home=home.path, home_found=home.found)
    try:
        settings = Settings.model_validate(values)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        name = str(err["loc"][0])
        raise BadRequest(f"setting {_ENV.get(name, name)}: {err['msg']}", field=name) from None
    if settings.backend == "aws" and not (settings.bucket and settings.table):
        raise BadRequest("CASESHELF_BACKEND=aws needs CASESHELF_BUCKET and CASESHELF_TABLE")
    if settings.num_proc > 1 and (settings.backend == "aws" or env.get(LAMBDA_ENV)):
        # A function has a share of a core and may have no /dev/shm: one process.
        settings = settings.model_copy(update={"num_proc": 1})
    return settings


def check_home(home: StoreHome) -> None:
    """Refuse a store directory that is something else (a file): reading it would mislead and
    writing it cannot work. A directory that does not exist yet is fine (created on the first
    write)."""
    path = Path(home.path)
    if path.exists() and not path.is_dir():
        raise BadRequest(
            f"the store at {home.path} ({home.how}) is not a directory: point CASESHELF_HOME at "
            "a directory (a new one is created on the first write), or move the file away",
            field="home",
        )


class Services:
    """The process's services. The registry is built with the adapters; every other service on
    first use, so a command or a function pays only for what it touches (start-up time is most
    of a short CLI command). Each service's import says what it would add to the cold start of
    a function that does not use it (`# lazy: ~N ms`: `python -X importtime` after importing
    `caseshelf.functions.registry`)."""

    def __init__(
        self, settings: Settings, store: BlobStore, index: Index, registry: RegistryService
    ) -> None:
        self.settings = settings
        self.store = store
        self.index = index
        self.registry = registry

    def _s3_store(self, bucket: str) -> BlobStore:
        return s3_store(self.settings, bucket)

    @property
    def _local(self) -> bool:
        return self.settings.backend == "local"

    @cached_property
    def selection(self) -> SelectionService:
        from caseshelf.services.selection import SelectionService  # lazy: ~4 ms, on first use

        # An answer carrying cases is paged within the budget of every answer
        # (`caseshelf.domain.answers`).
        return SelectionService(self.registry)

    @cached_property
    def refs(self) -> RefService:
        from caseshelf.services.refs import RefService  # lazy: ~2 ms, on first use

        return RefService(self.registry.versions)

    @cached_property
    def browse(self) -> BrowseService:
        from caseshelf.services.browse import BrowseService  # lazy: ~3 ms, on first use
        from caseshelf.services.search_index import index_bytes_for  # lazy: as BrowseService

        memory = self.settings.memory_mb * 1024 * 1024
        return BrowseService(self.registry, index_bytes=index_bytes_for(memory))

    @cached_property
    def diff(self) -> DiffService:
        from caseshelf.services.diff import (  # lazy: ~6 ms, on the first diff
            FIELD_COUNT_MAX_CASES,
            DiffService,
        )

        return DiffService(
            self.registry,
            max_gap_bytes=self.registry.read_gap,
            read_workers=self.registry.read_workers,
            # the local server has no time limit: a diff's field counts in one request
            field_count_cases=None if self._local else FIELD_COUNT_MAX_CASES,
        )

    @cached_property
    def exports(self) -> ExportService:
        from caseshelf.services.exports import ExportService  # lazy: ~110 ms, on first use

        return ExportService(
            self.registry,
            selection=self.selection,
            bucket=None if self._local else self.settings.bucket,
            store_for_bucket=self._s3_store,
            presign_expiry=self.settings.presign_expiry,
            secret_ref=self.settings.evalhub_secret_ref,
        )

    @cached_property
    def export_jobs(self) -> ExportJobService:
        from caseshelf.api.dto import export_out  # lazy: ~23 ms the CLI's verify and gc skip
        from caseshelf.services.export_jobs import ExportJobService  # lazy: ~280 ms, on use

        return ExportJobService(
            self.exports,
            self.index,
            lambda: self.queue(EXPORT_QUEUE),
            render=lambda res: export_out(res).model_dump(mode="json"),
        )

    @cached_property
    def download_jobs(self) -> DownloadJobService:
        from caseshelf.services.download_jobs import DownloadJobService  # lazy: ~260 ms, on use

        return DownloadJobService(self.registry, self.index, lambda: self.queue(EXPORT_QUEUE))

    def queue(self, name: str) -> Queue:
        """The template's queue `name`: SQS when the deployment names its URL, else this
        process's own (`local_queues`), delivered by `caseshelf serve` or the in-process
        client."""
        if name == EXPORT_QUEUE and self.settings.export_queue_url:
            return self._export_sqs
        if name == IMPORT_QUEUE and self.settings.import_queue_url:
            return self._import_sqs
        return self.local_queues[name]

    @cached_property
    def _import_sqs(self) -> Queue:
        assert self.settings.import_queue_url
        return sqs_queue(self.settings, self.settings.import_queue_url)

    @cached_property
    def _export_sqs(self) -> Queue:
        assert self.settings.export_queue_url
        return sqs_queue(self.settings, self.settings.export_queue_url)

    @cached_property
    def local_queues(self) -> dict[str, LocalQueue]:
        return {
            q.name: LocalQueue(
                q.name, dead_letter=q.dead_letter, max_receive_count=q.max_receive_count
            )
            for q in QUEUES
        }

    @cached_property
    def tasks(self) -> TaskImportService:
        from caseshelf.services.tasks import TaskImportService  # lazy: ~50 ms, on first use

        return TaskImportService(
            self.registry,
            self.store,
            own_bucket=None if self._local else self.settings.bucket,
            store_for_bucket=self._fenced_s3_store
            if self.settings.sources_fenced
            else self._s3_store,
        )

    def _fenced_s3_store(self, bucket: str) -> BlobStore:
        """Another bucket than the registry's, for a request over HTTP: only one the
        deployment lists in CASESHELF_SOURCE_BUCKETS."""
        if bucket not in self.settings.source_buckets:
            listed = ", ".join(self.settings.source_buckets) or "none"
            raise Forbidden(
                f"s3://{bucket}/: not the registry's bucket and not one this deployment lists "
                f"(CASESHELF_SOURCE_BUCKETS: {listed})",
                field="s3",
            )
        return self._s3_store(bucket)

    @cached_property
    def _import_services(
        self,
    ) -> tuple[RecipeService, ImportService, Callable[[], JobService]]:
        return build_import_services(
            self.settings,
            self.store,
            self.index,
            self.registry,
            lambda: self.tasks,
            queue=lambda: self.queue(IMPORT_QUEUE),
            selection=lambda: self.selection,
        )

    @property
    def recipes(self) -> RecipeService:
        return self._import_services[0]

    @property
    def imports(self) -> ImportService:
        return self._import_services[1]

    @cached_property
    def jobs(self) -> JobService:
        return self._import_services[2]()


def build_adapters(settings: Settings) -> tuple[BlobStore, Index]:
    if settings.backend == "aws":
        require("boto3", "the AWS backend (CASESHELF_BACKEND=aws)")
        import boto3  # lazy: optional [aws] extra, ~150 ms the embedded store never pays

        from caseshelf.adapters.aws import client_config  # lazy: botocore: optional [aws] extra
        from caseshelf.adapters.dynamodb import DynamoIndex  # lazy: botocore: optional [aws] extra
        from caseshelf.adapters.s3 import S3BlobStore  # lazy: botocore: optional [aws] extra
        from caseshelf.services.storage import REMOTE_READ_WORKERS  # lazy: as in `build`

        session = boto3.session.Session(region_name=settings.region)
        # SigV4 for presigned URLs: objects are SSE-KMS encrypted, which SigV2 cannot read.
        # One pooled connection per concurrent ranged read.
        s3_config = client_config(
            max_attempts=settings.aws_max_attempts,
            signature_version="s3v4",
            max_pool_connections=REMOTE_READ_WORKERS,
        )
        s3 = session.client("s3", endpoint_url=settings.endpoint_url, config=s3_config)
        ddb = session.client(
            "dynamodb",
            endpoint_url=settings.endpoint_url,
            config=client_config(max_attempts=settings.aws_max_attempts),
        )
        assert settings.bucket and settings.table
        return S3BlobStore(s3, settings.bucket), DynamoIndex(ddb, settings.table)
    from caseshelf.adapters.localfs import LocalBlobStore  # lazy: as in `build`
    from caseshelf.adapters.sqlite import SqliteIndex  # lazy: sqlite3, ~2 ms AWS never uses
    from caseshelf.adapters.sqlite_stamp import INDEX_FILE  # lazy: as SqliteIndex

    home = Path(settings.store_home.path)
    store = LocalBlobStore(home / "objects", public_url=settings.public_url)
    return store, SqliteIndex(home / INDEX_FILE)


def sqs_queue(settings: Settings, url: str) -> Queue:
    """The SQS queue at `url`, with the settings' region and endpoint."""
    require("boto3", f"the queue {url}")
    import boto3  # lazy: optional [aws] extra, ~150 ms the embedded store never pays
    from botocore.config import Config  # lazy: botocore: optional [aws] extra

    from caseshelf.adapters.sqs import SqsQueue  # lazy: botocore: optional [aws] extra

    session = boto3.session.Session(region_name=settings.region)
    client = session.client(
        "sqs", endpoint_url=settings.endpoint_url, config=Config(retries={"mode": "standard"})
    )
    return SqsQueue(client, url)


def s3_store(settings: Settings, bucket: str) -> BlobStore:
    """A store on any bucket (export targets, pulls), with the settings' region and endpoint."""
    require("boto3", f"s3://{bucket}")
    import boto3  # lazy: optional [aws] extra, ~150 ms the embedded store never pays

    from caseshelf.adapters.aws import client_config  # lazy: botocore: optional [aws] extra
    from caseshelf.adapters.s3 import S3BlobStore  # lazy: botocore: optional [aws] extra

    session = boto3.session.Session(region_name=settings.region)
    config = client_config(
        max_attempts=settings.aws_max_attempts, signature_version="s3v4", max_pool_connections=32
    )
    client = session.client("s3", endpoint_url=settings.endpoint_url, config=config)
    return S3BlobStore(client, bucket)


def build(
    settings: Settings, *, store: BlobStore | None = None, index: Index | None = None
) -> Services:
    """The services on `settings`' adapters (or on `store` and `index`). What the registry
    service needs is imported here, not with this module: settings alone (`caseshelf info`)
    skip its ~35 ms."""
    from caseshelf.adapters.localfs import LocalBlobStore  # lazy: part of the ~35 ms above
    from caseshelf.services.memo import cache_bytes_for  # lazy: part of the ~35 ms above
    from caseshelf.services.registry import RegistryService  # lazy: ~30 ms of the 35 above
    from caseshelf.services.storage import (  # lazy: part of the ~35 ms above
        LOCAL_MAX_GAP_BYTES,
        MAX_GAP_BYTES,
        REMOTE_READ_WORKERS,
    )

    if store is None or index is None:
        built_store, built_index = build_adapters(settings)
        store = store or built_store
        index = index or built_index
    local = settings.backend == "local"
    registry = RegistryService(
        store,
        index,
        max_case_bytes=settings.max_case_bytes,
        presign_expiry=settings.presign_expiry,
        # architecture §7: a presigned URL on AWS, the document itself from the embedded store.
        presign_downloads=settings.presign_local_downloads or not isinstance(store, LocalBlobStore),
        # A local read costs microseconds: read little more than the records wanted, one span
        # at a time. An S3 request waits tens of milliseconds: read wider spans, several at once.
        read_gap=LOCAL_MAX_GAP_BYTES if local else MAX_GAP_BYTES,
        read_workers=1 if local else REMOTE_READ_WORKERS,
        cache_bytes=settings.manifest_cache_bytes
        if settings.manifest_cache_bytes is not None
        else cache_bytes_for(settings.memory_mb * 1024 * 1024),
    )
    return Services(settings, store, index, registry)


def build_import_services(
    settings: Settings,
    store: BlobStore,
    index: Index,
    registry: RegistryService,
    tasks: Callable[[], TaskImportService],
    *,
    queue: Callable[[], Queue] | None = None,
    selection: Callable[[], SelectionService] | None = None,
) -> tuple[RecipeService, ImportService, Callable[[], JobService]]:
    """Recipes, imports, and how to build import jobs (on first use: a plain import needs neither
    the job service nor the task on-ramps). From the CLI on the embedded store an import may read
    any path or URL; over HTTP (a deployed API, `caseshelf serve`) only what the source fence
    allows (`caseshelf.adapters.fence`). A job reads its own upload, whose URL the server made."""
    from caseshelf.adapters.huggingface import (  # lazy: the import services, ~200 ms in all
        HuggingFace,
        SecretsManagerTokens,
        StaticToken,
    )
    from caseshelf.adapters.sources import SourceReader, smart_opener  # lazy: as above
    from caseshelf.catalog import load_catalog  # lazy: import services, ~200 ms in all
    from caseshelf.services.imports import ImportService  # lazy: import services, ~200 ms in all
    from caseshelf.services.recipes import RecipeService  # lazy: import services, ~200 ms in all

    recipes = RecipeService(store, index, catalog=load_catalog)
    hf = HuggingFace(settings.hf_endpoint, settings.hf_viewer_url)
    client = getattr(store, "client", None)
    remote = smart_opener({"client": client} if client is not None else None)
    tokens: SecretsManagerTokens | StaticToken
    if settings.backend == "aws":
        bucket = settings.bucket
        tokens = SecretsManagerTokens(prefix=settings.hf_secret_prefix)

        def object_url(key: str) -> str:
            return f"s3://{bucket}/{key}"

    else:
        token = settings.hf_token.get_secret_value() if settings.hf_token else None
        tokens = StaticToken(token)
        objects = Path(settings.store_home.path).resolve() / "objects"

        def object_url(key: str) -> str:
            return str(objects / key)

    reader_for = fenced_reader_for(settings) if settings.sources_fenced else _open_reader(remote)
    imports = ImportService(
        registry, recipes, reader_for=reader_for, hf=hf, tokens=tokens, num_proc=settings.num_proc
    )

    def jobs() -> JobService:
        from caseshelf.services.jobs import JobService  # lazy: ~240 ms, on the first job

        return JobService(
            index,
            store,
            imports,
            tasks(),
            object_url=object_url,
            object_reader=SourceReader(remote),
            presign_expiry=settings.presign_expiry,
            queue=queue,
            selection=selection,
        )

    return recipes, imports, jobs


def _open_reader(remote: Any) -> Callable[[Any], Any]:
    from caseshelf.adapters.sources import SourceReader  # lazy: ~55 ms, import services only

    def reader_for(identity: Any) -> SourceReader:
        return SourceReader(remote)

    return reader_for


def fenced_reader_for(settings: Settings) -> Callable[[Any], Any]:
    """Readers for requests over HTTP: each caller's own fence (its tenant's area of the
    registry's bucket, the listed buckets, the allowed https hosts) and remote reads with the
    settings' connect and read timeouts."""
    from caseshelf.adapters.fence import (  # lazy: ~75 ms, the import services over HTTP only
        SourceFence,
        Timeouts,
        fenced_opener,
    )
    from caseshelf.adapters.sources import SourceReader  # lazy: ~55 ms, import services only

    timeouts = Timeouts(settings.source_connect_timeout, settings.source_read_timeout)
    built: list[Any] = []

    def s3_client() -> Any:
        if not built:
            require("boto3", "an s3:// source")
            import boto3  # lazy: optional [aws] extra, ~150 ms the embedded store never pays

            from caseshelf.adapters.aws import client_config  # lazy: botocore: optional [aws] extra

            config = client_config(
                max_attempts=settings.aws_max_attempts,
                signature_version="s3v4",
                connect_timeout=timeouts.connect,
                read_timeout=timeouts.read,
            )
            session = boto3.session.Session(region_name=settings.region)
            built.append(session.client("s3", endpoint_url=settings.endpoint_url, config=config))
        return built[0]

    def reader_for(identity: Any) -> SourceReader:
        own = (
            f"s3://{settings.bucket}/{layout.root(identity.tenant)}"
            if settings.backend == "aws"
            else None
        )
        fence = SourceFence(
            own_prefix=own, buckets=settings.source_buckets, hosts=settings.source_hosts
        )
        return SourceReader(fenced_opener(fence, timeouts, s3_client), fence)

    return reader_for


_lock = threading.Lock()
_current: Services | None = None
# The services of the call under way, where a caller chose them for it (the in-process client
# transport, around each handler call): they win over the process-wide ones, for that context only.
_scoped: ContextVar[Services | None] = ContextVar("caseshelf_services", default=None)


def services() -> Services:
    """The services of this call (`scoped`), else the process-wide ones, built from the
    environment on first use."""
    svc = _scoped.get()
    if svc is not None:
        return svc
    global _current
    if _current is None:
        with _lock:
            if _current is None:
                _current = build(load_settings())
    return _current


def use(svc: Services | None) -> None:
    """Install (or with None, forget) the process-wide services: for the CLI, the local server
    and tests."""
    global _current
    with _lock:
        _current = svc


@contextmanager
def scoped(svc: Services) -> Iterator[Services]:
    """Within the block (and this thread or task only), `services()` answers `svc`: one process
    may hold several embedded stores (`caseshelf.connect(home=...)`) without any of them
    becoming the process-wide one."""
    token = _scoped.set(svc)
    try:
        yield svc
    finally:
        _scoped.reset(token)
