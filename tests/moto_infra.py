"""Test infrastructure built from `infra/template.yaml`, so the test schema and the deployed
schema cannot drift: the moto bucket and table take their properties from the template."""

from __future__ import annotations

import functools
import re
import socket
import threading
from pathlib import Path
from typing import Any

import botocore.session
import yaml
from botocore.loaders import Loader, create_loader

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "infra" / "template.yaml"
BUCKET_RESOURCE = "DataBucket"
TABLE_RESOURCE = "IndexTable"


class CfnLoader(yaml.SafeLoader):
    """A safe loader that reads CloudFormation short-form tags (`!Ref`, `!GetAtt`, `!Sub`, ...)
    into their long form (`{"Ref": ...}`, `{"Fn::GetAtt": [...]}`)."""


def _cfn_tag(loader: CfnLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    if suffix == "Ref":
        return {"Ref": value}
    if suffix == "GetAtt" and isinstance(value, str):
        value = value.split(".", 1)
    return {f"Fn::{suffix}": value}


CfnLoader.add_multi_constructor("!", _cfn_tag)


@functools.cache
def load_template(path: Path = TEMPLATE) -> dict[str, Any]:
    with path.open(encoding="utf-8") as fh:
        doc: dict[str, Any] = yaml.load(fh, Loader=CfnLoader)
    return doc


def resource_properties(name: str) -> dict[str, Any]:
    props: dict[str, Any] = load_template()["Resources"][name]["Properties"]
    return props


def schedule_seconds(function: str, event: str) -> int:
    """The period, in seconds, of a function's scheduled event in the template (its
    `Schedule: rate(N minutes)`)."""
    rate = resource_properties(function)["Events"][event]["Properties"]["Schedule"]
    m = re.fullmatch(r"rate\((\d+) (minute|minutes|second|seconds)\)", rate)
    assert m, rate
    return int(m.group(1)) * (60 if m.group(2).startswith("minute") else 1)


def _lifecycle_rule(rule: dict[str, Any]) -> dict[str, Any]:
    """A template lifecycle rule in the shape of the S3 API."""
    out: dict[str, Any] = {"ID": rule["Id"], "Status": rule["Status"]}
    tags = rule.get("TagFilters") or []
    prefix = rule.get("Prefix")
    if tags and prefix:
        out["Filter"] = {"And": {"Prefix": prefix, "Tags": tags}}
    elif len(tags) > 1:
        out["Filter"] = {"And": {"Tags": tags}}
    elif tags:
        out["Filter"] = {"Tag": tags[0]}
    else:
        out["Filter"] = {"Prefix": prefix or ""}
    if "ExpirationInDays" in rule:
        out["Expiration"] = {"Days": rule["ExpirationInDays"]}
    if "ExpiredObjectDeleteMarker" in rule:
        out["Expiration"] = {"ExpiredObjectDeleteMarker": rule["ExpiredObjectDeleteMarker"]}
    if "AbortIncompleteMultipartUpload" in rule:
        out["AbortIncompleteMultipartUpload"] = rule["AbortIncompleteMultipartUpload"]
    if "NoncurrentVersionExpiration" in rule:
        out["NoncurrentVersionExpiration"] = rule["NoncurrentVersionExpiration"]
    return out


def create_bucket(s3: Any, name: str) -> None:
    """The data bucket as the template declares it: encryption, public access block, versioning,
    lifecycle rules."""
    props = resource_properties(BUCKET_RESOURCE)
    s3.create_bucket(Bucket=name)
    enc = props.get("BucketEncryption")
    if enc:
        rules = [
            {
                "ApplyServerSideEncryptionByDefault": r["ServerSideEncryptionByDefault"],
                **({"BucketKeyEnabled": r["BucketKeyEnabled"]} if "BucketKeyEnabled" in r else {}),
            }
            for r in enc["ServerSideEncryptionConfiguration"]
        ]
        s3.put_bucket_encryption(Bucket=name, ServerSideEncryptionConfiguration={"Rules": rules})
    block = props.get("PublicAccessBlockConfiguration")
    if block:
        s3.put_public_access_block(Bucket=name, PublicAccessBlockConfiguration=block)
    versioning = props.get("VersioningConfiguration")
    if versioning:
        s3.put_bucket_versioning(Bucket=name, VersioningConfiguration=versioning)
    lifecycle = props.get("LifecycleConfiguration")
    if lifecycle:
        s3.put_bucket_lifecycle_configuration(
            Bucket=name,
            LifecycleConfiguration={"Rules": [_lifecycle_rule(r) for r in lifecycle["Rules"]]},
        )


def share_moto_key_material() -> None:
    """moto gives each KMS key it makes a private key of its own, freshly generated, and makes
    one for every table created with SSE (the table's default encryption key): an RSA-2048
    generation, ~0.1 s of CPU for each fresh table. Nothing here signs or encrypts with that key
    material, so the fake keys of one key spec share one."""
    from moto.kms import models

    if getattr(models.generate_private_key, "shared", False):
        return
    shared = functools.cache(models.generate_private_key)
    shared.shared = True  # type: ignore[attr-defined]
    models.generate_private_key = shared


def list_moto_services_once() -> None:
    """The moto server finds the service a request is for by listing moto's package directory
    and testing each of its ~170 entries with `isdir`, on every request. The list is fixed
    while the server runs; read once, an S3 put or get through the server takes about a
    quarter less CPU (4.1 ms against 5.7, medians of four runs alternating)."""
    from moto import backends

    names = tuple(backends.list_of_moto_modules())  # called again, it lists the same tuple
    backends.list_of_moto_modules = lambda: names


def create_table(ddb: Any, name: str) -> None:
    """The index table as the template declares it: keys, billing, SSE, PITR, TTL."""
    props = resource_properties(TABLE_RESOURCE)
    share_moto_key_material()  # (the tables are moto's, in process or as a server in this one)
    args: dict[str, Any] = {
        "TableName": name,
        "KeySchema": props["KeySchema"],
        "AttributeDefinitions": props["AttributeDefinitions"],
        "BillingMode": props.get("BillingMode", "PROVISIONED"),
    }
    for extra in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes"):
        if extra in props:
            args[extra] = props[extra]
    sse = props.get("SSESpecification")
    if sse:
        args["SSESpecification"] = {"Enabled": bool(sse.get("SSEEnabled"))}
    ddb.create_table(**args)
    pitr = props.get("PointInTimeRecoverySpecification")
    if pitr:
        ddb.update_continuous_backups(TableName=name, PointInTimeRecoverySpecification=pitr)
    ttl = props.get("TimeToLiveSpecification")
    if ttl:
        ddb.update_time_to_live(TableName=name, TimeToLiveSpecification=ttl)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


_MOTO_DYNAMODB_CALLS = (
    "transact_write_items",
    "put_item",
    "update_item",
    "delete_item",
    "get_item",
    "query",
    "scan",
)
_moto_lock = threading.RLock()
_moto_patched = False


def make_moto_dynamodb_atomic() -> None:
    """DynamoDB applies a conditional write or a transaction atomically; moto's backend checks
    the condition and then writes, with nothing between two request threads. Serialise its
    item operations so the race tests exercise the adapter, not the fake's missing lock."""
    global _moto_patched
    with _moto_lock:
        if _moto_patched:
            return
        from moto.dynamodb.models import DynamoDBBackend

        for name in _MOTO_DYNAMODB_CALLS:
            original = getattr(DynamoDBBackend, name)

            def locked(self: Any, *args: Any, __original: Any = original, **kw: Any) -> Any:
                with _moto_lock:
                    return __original(self, *args, **kw)

            functools.update_wrapper(locked, original)
            setattr(DynamoDBBackend, name, locked)
        _moto_patched = True


class _SearchPaths(list[str]):
    """A loader's search paths, where a path already listed is not added again: every boto3
    session appends boto3's own data path to its loader's."""

    def append(self, path: str) -> None:
        if path not in self:
            super().append(path)


@functools.cache
def _shared_loader() -> Loader:
    return Loader(extra_search_paths=_SearchPaths())


def share_aws_models() -> None:
    """Every botocore session of the test process reads the AWS service models from one loader,
    which parses each model's JSON once, instead of once per session.

    What it buys: `build_adapters` makes a session per backend, as a Lambda does once per cold
    start; the tests build a fresh backend hundreds of times, and each paid ~0.25 s of JSON
    parsing (S3's endpoint rules, DynamoDB's model), ~80% of a moto backend's set-up. The models
    are read-only data and the clients built from them are unchanged. A session given its own
    AWS_DATA_PATH keeps a loader of its own."""
    if getattr(botocore.session.Session, "_caseshelf_shared_models", False):
        return

    def register(session: botocore.session.Session) -> None:
        def loader() -> Loader:
            path = session.get_config_variable("data_path")
            return create_loader(path) if path else _shared_loader()

        session._components.lazy_register_component("data_loader", loader)

    botocore.session.Session._register_data_loader = register  # type: ignore[method-assign]
    botocore.session.Session._caseshelf_shared_models = True  # type: ignore[attr-defined]


def create_queues(sqs: Any, suffix: str) -> dict[str, tuple[str, str]]:
    """The template's export queues (dead-letter queue first: the other's redrive names it),
    with their attributes: `{logical id: (url, arn)}`."""
    import json

    made: dict[str, tuple[str, str]] = {}
    resources = load_template()["Resources"]
    names = [n for n, r in resources.items() if r["Type"] == "AWS::SQS::Queue"]
    names.sort(key=lambda n: "RedrivePolicy" in resources[n]["Properties"])
    for name in names:
        props = resources[name]["Properties"]
        attrs = {
            k: str(props[k]) for k in ("VisibilityTimeout", "MessageRetentionPeriod") if k in props
        }
        redrive = props.get("RedrivePolicy")
        if redrive:
            target = redrive["deadLetterTargetArn"]["Fn::GetAtt"][0]
            attrs["RedrivePolicy"] = json.dumps(
                {
                    "deadLetterTargetArn": made[target][1],
                    "maxReceiveCount": redrive["maxReceiveCount"],
                }
            )
        url = sqs.create_queue(QueueName=f"{name}-{suffix}", Attributes=attrs)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
        made[name] = (url, arn["QueueArn"])
    return made
